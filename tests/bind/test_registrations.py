"""A package's registration table of ATen ops names the op its functions implement
(sftbuild.ops.registrations), the probed binder tries those ops first, and an entry point
written like an ATen op is called with an op_db sample's own non-tensor arguments."""
from __future__ import annotations

import dataclasses

import pytest

from sftbuild import ops
from sftbuild.harvest.stage import _entry
from sftbuild.harvest.triton_extract import extract_kernels
from sftbuild.ops import registrations as R
from sftbuild.bind.binders.probed import Probed, shortlist
from sftbuild.record import Record

TABLE = '''
from .ops import *

_FULL_CONFIG = (
    ("neg", flip_sign),
    ("add.Tensor", add_two),
    ("add_.Tensor", add_two_),
    ("cumsum.out", cumsum_out),
    ("_softmax", softmax),
)
'''
NOT_A_TABLE = 'PAIRS = (("first", a), ("second", b))\n'
IMPL = 'lib.impl("aten::abs", my_abs, "CUDA")\n'
KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, -tl.load(x_ptr + offs, mask=m), mask=m)


def flip_sign(A):
    A = A.contiguous()
    out = torch.empty_like(A)
    n = A.numel()
    _k[(triton.cdiv(n, 256),)](A, out, n, BLOCK=256)
    return out
'''


def package(tmp_path):
    pkg = tmp_path / "gemslike"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text(TABLE)
    (pkg / "ops" / "__init__.py").write_text("from .flip import flip_sign\n")
    (pkg / "ops" / "flip.py").write_text(KERNEL)
    (pkg / "other.py").write_text(NOT_A_TABLE + IMPL)
    return tmp_path


def record(tree, rel="gemslike/ops/flip.py") -> Record:
    k = extract_kernels((tree / rel).read_text())[0][0]
    return Record(language="triton", code=k.code, source="t", entry=_entry("triton", dataclasses.asdict(k), False),
                  provenance={"path": rel, "tree": str(tree)})


def test_registration_tables_and_impl_calls_are_read_not_stray_tuples(tmp_path):
    table = R.registered(package(tmp_path))
    assert table["flip_sign"] == ["neg"] and table["add_two"] == ["add.Tensor"]
    assert table["my_abs"] == ["abs"]
    assert "a" not in table  # two pairs are not a table


def test_aten_names_map_to_the_ops_that_compute_them():
    known = ops.all_ops(opdb=True)
    assert R.candidates("neg", known)[0] == "neg"
    assert "softmax" in R.candidates("_softmax", known)  # leading underscores dropped
    assert "layer_norm" in R.candidates("native_layer_norm", known)
    assert R.candidates("add_.Tensor", known) == []  # in place: the result is an overwritten input
    assert R.candidates("cumsum.out", known) == []
    assert R.candidates("no_such_op_anywhere", known) == []
    from sftbuild.ops import opdb

    aliases = opdb.aliases()  # torch's other names, as op_db lists them
    assert R.candidates("arctanh", known) == [] and R.candidates("arctanh", known, aliases)[0] == "opdb.atanh"
    assert "opdb.gt" in R.candidates("greater.Tensor", known, aliases)


def test_the_registered_op_comes_first_where_the_name_says_nothing(tmp_path):
    rec = record(package(tmp_path))
    assert rec.entry["entry_points"][0]["qualname"] == "flip_sign"
    assert shortlist(rec)[0] == "neg"
    rec = dataclasses.replace(rec, provenance={**rec.provenance, "tree": None})  # without the package, names alone rank
    assert "neg" not in shortlist(rec)[:1]


def test_probe_binds_the_registered_op(tmp_path):
    pytest.importorskip("triton")
    from sftbuild.executor import INTERPRETER_ENV
    from sftbuild.sandbox import run_isolated

    rec = record(package(tmp_path))
    b = Probed()
    task = b.plan(rec, seconds=60)
    res = run_isolated(b.task_fn, task, 120, env=INTERPRETER_ENV)
    found = b.accept(rec, res)
    assert found is not None, res.get("unbound")
    assert found["op"] == "neg" and len(found["evidence"]["shapes"]) >= 3


def test_an_opdb_op_is_first_tried_with_its_samples_own_arguments():
    import torch

    from sftbuild.trial import pyrun
    from sftbuild.bind.probe import arg_mappings

    op = ops.get("opdb.clamp")
    entry = {"params": [{"name": "inp", "has_default": False, "default": None, "annotation": None, "kind": "pos"},
                        {"name": "mini", "has_default": True, "default": None, "annotation": None, "kind": "pos"},
                        {"name": "maxi", "has_default": True, "default": None, "annotation": None, "kind": "pos"}]}
    params = dict(op.params)
    assert next(arg_mappings(entry, op, params)) == [["sample", None]]
    inputs = op.make_inputs(op.shape_pool[0], "float32", "contiguous", torch.Generator().manual_seed(0), params)
    call = {"args": [["sample", None]]}
    args, kwargs = pyrun.call_args(call, inputs, params), pyrun.call_kwargs(call, inputs, params)
    assert args[0] is inputs[0] and len(args) + len(kwargs) >= len(inputs)
    assert torch.equal(torch.clamp(*args, **kwargs), op.run_reference(inputs, params))


def test_an_elementwise_opdb_op_is_offered_at_more_shapes_with_values_from_its_samples():
    import math

    import torch

    from sftbuild.bind.probe import MAX_PROBE_NUMEL, probe_shapes

    op = ops.get("opdb.acos")  # its op_db samples come in one shape; values must stay in [-1, 1]
    shapes = probe_shapes(op, 3, MAX_PROBE_NUMEL)
    assert len(set(shapes)) >= 3
    for shape in shapes:
        params = {}
        (x,) = op.make_inputs(shape, "float32", "contiguous", torch.Generator().manual_seed(1), params)
        assert tuple(x.shape) == tuple(shape) and x.abs().max() <= 1
        y = op.run_reference([x.double()], params)
        assert tuple(y.shape) == tuple(shape) and math.isfinite(float(y.sum()))
    # not elementwise of one tensor: only its sample's shape, scaled (opdb.scaled_shapes), never tiled
    assert ops.get("opdb.clamp").shape_pool == [(5, 10, 5), (10, 20, 10), (15, 30, 15)]
