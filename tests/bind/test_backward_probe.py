"""A backward kernel is bound through the autograd Function that launches it: harvest keeps the
Function in the backward kernel's record, the probe checks the Function's gradients against the
gradients of the forward op's reference (and a wrong backward stays unbound), validation replays
the same check, and the instructions say it is the backward pass."""
from __future__ import annotations

import dataclasses

import pytest

from sftbuild.harvest.stage import _entry
from sftbuild.harvest.triton_extract import extract_kernels
from sftbuild.record import Record

SQUARE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _square_fwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x * x, mask=m)


@triton.jit
def _square_bwd_kernel(dy_ptr, x_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=m).to(tl.float32)
    tl.store(dx_ptr + offs, (2.0 * x * dy).to(dx_ptr.dtype.element_ty), mask=m)


def square_forward(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    _square_fwd_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y


def square_backward(dy, x):
    dy = dy.contiguous()
    dx = torch.empty_like(x)
    n = x.numel()
    _square_bwd_kernel[(triton.cdiv(n, 1024),)](dy, x, dx, n, BLOCK=1024)
    return dx


class SquareFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return square_forward(x)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return square_backward(dy, x)
'''
WRONG = SQUARE.replace("(2.0 * x * dy)", "(x * dy)")


def records(code: str) -> dict[str, Record]:
    out = {}
    for k in extract_kernels(code)[0]:
        out[k.name] = Record(language="triton", code=k.code, source="t",
                             entry=_entry("triton", dataclasses.asdict(k), False), provenance={"path": "sq.py"})
    return out


def test_a_backward_kernels_record_keeps_the_function_that_launches_it():
    from sftbuild.bind.binders.probed import shortlist

    recs = records(SQUARE)
    bwd, fwd = recs["_square_bwd_kernel"], recs["_square_fwd_kernel"]
    assert shortlist(bwd)[0] == "square"  # a forward op first: the Function is checked through its gradients
    assert "class SquareFunction" in bwd.code and "_square_fwd_kernel" in bwd.code
    assert "class SquareFunction" not in fwd.code and "_square_bwd_kernel" not in fwd.code
    entry = next(e for e in bwd.entry["entry_points"] if e["qualname"] == "SquareFunction.apply")
    assert entry["backward"]["launches"] == ["_square_bwd_kernel"]


@pytest.fixture(scope="module")
def worker():
    """One kept interpreter worker for this module's probes, as the bind stage keeps its workers."""
    from sftbuild.executor import LocalExecutor

    with LocalExecutor(cpu_workers=1, gpus="none", progress=False) as ex:
        yield ex


def _probe(rec, ex):
    """(result, binding or None) of probing `rec` in the kept worker, as tests/validate/test_probe.py probes."""
    from tests.validate.test_probe import probe

    _, res, found = probe(rec, seconds=90, executor=ex)
    return res, found


def test_the_probe_binds_a_backward_kernel_through_its_gradients_and_validation_agrees(tmp_path, worker):
    pytest.importorskip("triton")
    from sftbuild.config import ValidateConfig
    from sftbuild.describe import stage as D
    from sftbuild.executor import LocalExecutor
    from sftbuild.validate import pipeline

    rec = records(SQUARE)["_square_bwd_kernel"]
    res, found = _probe(rec, worker)
    assert found is not None, res.get("unbound")
    assert found["op"] == "square" and found["call"]["entry"] == "SquareFunction.apply"
    assert found["call"]["grad"] is True and len(found["evidence"]["shapes"]) >= 3
    rec = dataclasses.replace(rec, binding=found)
    cfg = dataclasses.replace(ValidateConfig(), shapes=2, seeds=1, timing=False)
    with LocalExecutor(cpu_workers=1, gpus="none", progress=False) as ex:
        out = list(pipeline.validate([rec], cfg, ex, str(tmp_path / "cc")))
    assert [(o[1], o[2]) for o in out] == [("ok", None)], out[0][3]
    conf = {"seed": 0, "languages": ["en", "zh"], "levels": ["brief", "detailed"], "arch": "sm_90",
            "smem_budget": 232448}
    status, _, payload = D.describe(rec, conf)
    assert status == "ok", payload.get("problems")
    assert all("backward pass" in t for k, t in payload["instructions"].items() if k.startswith("en:"))


def test_a_wrong_backward_stays_unbound(worker):
    pytest.importorskip("triton")
    rec = records(WRONG)["_square_bwd_kernel"]
    res, found = _probe(rec, worker)
    assert found is None
    assert "SquareFunction.apply" in res["unbound"] or any(
        t["entry"] == "SquareFunction.apply" for t in res["evidence"]["candidates_tried"])


def test_a_losss_target_is_a_constant_of_its_backward_check():
    """Distillation losses differentiate the student only: KL-div, JSD and TVD give their target no
    gradient, and the backward check compares the student's gradient alone."""
    import torch

    from sftbuild import ops
    from sftbuild.trial import pyrun

    op = ops.get("kl_div")
    assert op.grad_constants == (1,) and ops.get("jsd").grad_constants == (1,)
    assert ops.get("tvd").grad_constants == (1,)
    x, y = op.make_inputs((3, 33), "float32", "contiguous", torch.Generator().manual_seed(0), op.params)

    def student_only(xs):  # what a kernel's Function returns: a gradient for x, None for the target
        return [torch.nn.functional.kl_div(xs[0], xs[1].detach(), reduction="batchmean")]
    ref = pyrun.with_grads(lambda xs: [op.run_reference(xs)], [x, y], op.grad_constants)
    cand = pyrun.with_grads(student_only, [x, y], op.grad_constants)
    assert len(ref) == len(cand) == 2  # the loss, then the one gradient that is compared
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ref, cand))
    every = pyrun.with_grads(lambda xs: [op.run_reference(xs)], [x, y])
    assert len(every) == 3 and every[2].abs().max() > 0  # without the convention the target's gradient counts
