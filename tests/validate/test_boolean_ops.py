"""Boolean-valued ops get trial inputs that can tell a kernel from a constant (sftbuild.ops.special),
and a record whose reference moves in no trial is `uninformative`, not the candidate's fault
(checks/input_independent). CPU: op_db's ops, and Triton kernels in the interpreter."""
from __future__ import annotations

import pytest
import torch

from sftbuild import ops
from sftbuild.executor import LocalExecutor
from sftbuild.ops import special
from sftbuild.bind import probe
from tests.redteam.cases import TRITON_ISINF as ISINF
from tests.redteam.cases import TRITON_ISINF_ALL_FALSE as ALL_FALSE


def _op(name):
    try:
        return ops.get(name)
    except KeyError as e:
        pytest.skip(f"torch's op_db is not available here: {e}")


def test_a_boolean_ops_inputs_hold_special_values_deterministically():
    op = _op("opdb.isinf")
    shape = op.shape_pool[1]
    a = special.trial_inputs(op, shape, "float32", 0, dict(op.params))[0]
    again = special.trial_inputs(op, shape, "float32", 0, dict(op.params))[0]
    fresh = special.trial_inputs(op, shape, "float32", 1000, dict(op.params))[0]
    assert tuple(a.shape) == tuple(shape) and torch.equal(a.nan_to_num(), again.nan_to_num())
    assert bool(a.isposinf().any()) and bool(a.isneginf().any()) and bool(a.isnan().any()) and bool((a == 0).any())
    assert bool(torch.isfinite(a).float().mean() > 0.5)  # most values are the op's own
    assert not torch.equal(torch.isinf(a), torch.isinf(fresh))  # the reference moves between the two orders
    # the probe draws the same inputs as validation
    p = probe._inputs(op, shape, "float32", 0, torch.device("cpu"), dict(op.params))[0]
    assert torch.equal(p.nan_to_num(), a.nan_to_num())


def test_ops_with_floating_results_keep_their_own_inputs():
    op = ops.get("relu")
    shape = op.shape_pool[3]
    mixed = special.trial_inputs(op, shape, "float32", 3, dict(op.params))
    plain = op.make_inputs(shape, "float32", "contiguous", torch.Generator().manual_seed(3), dict(op.params))
    assert all(torch.equal(x, y) for x, y in zip(mixed, plain))


def test_two_inputs_that_broadcast_get_equal_positions():
    x, y = torch.randn(5, 1), torch.randn(5)
    a, b = special.with_specials([x, y, torch.arange(3)], seed=4)[:2]
    eq = a == b  # broadcast to (5, 5)
    assert bool(eq.any()) and not bool(eq.all())
    assert tuple(a.shape) == (5, 1) and tuple(b.shape) == (5,)
    for op_name in ("opdb.eq", "opdb.ne", "opdb.isclose", "opdb.logical_and"):
        op = _op(op_name)
        moved = 0
        for shape in op.shape_pool[:4]:
            p = dict(op.params)
            r0 = op.run_reference(special.trial_inputs(op, shape, "float32", 0, p), p)
            r1 = op.run_reference(special.trial_inputs(op, shape, "float32", 1000, p), p)
            assert r0.dtype == torch.bool
            moved += not torch.equal(r0, r1)
        assert moved >= 3, op_name  # the reference varies with the inputs: the trials can tell a constant


# Validation of an honest and an all-False Triton isinf bound to op_db's isinf runs in the red team
# (twin_isinf_triton, all_false_isinf_triton), in the CPU interpreter and on the GPU.


def test_the_probe_binds_an_honest_isinf_and_not_an_all_false_one():
    pytest.importorskip("triton")
    _op("opdb.isinf")
    from tests.validate.test_probe import probe, record

    with LocalExecutor(cpu_workers=1, gpus="none", progress=False) as ex:  # one kept worker for both
        _, res, b = probe(record(ISINF, path="pkg/isinf.py"), executor=ex)
        assert b is not None and b["op"] == "opdb.isinf", res.get("unbound")
        # all False agrees with isinf on finite inputs only
        _, res, b = probe(record(ALL_FALSE, path="pkg/isinf.py"), executor=ex)
    assert b is None and "opdb.isinf" in res["unbound"]
