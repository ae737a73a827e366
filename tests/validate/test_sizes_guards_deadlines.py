"""Sizes past the example, guard regions around every trial's tensors, and per-call deadlines.

CPU: the size choice (sftbuild.trial.sizes), guard carving and checking on CPU tensors
(sftbuild.trial.fences), both trial loops with Python stand-ins for kernels that are
size-specialised or touch memory past an edge, the deadline's bound, and the executor's step
bounds. GPU: the red-team hang is cut short by the per-call bound, not by `sample_timeout`:
    pytest -m gpu -s -n 0 tests/validate/test_sizes_guards_deadlines.py
"""
import dataclasses
import math
import tempfile
import types

import pytest
import torch

from sftbuild import ops
from sftbuild.executor import LocalExecutor
from sftbuild.trial_types import TrialTask
from sftbuild.trial import checks as C
from sftbuild.trial import deadline, fences, sizes
from sftbuild.trial import harness as H
from tests import tasks
from tests.redteam.cases import REF_MATMUL, REF_RELU, STRIDE_KERNEL, TRITON_RELU, TRITON_STRIDE

# ---- sizes --------------------------------------------------------------------------------------


def test_block_sizes_are_read_from_cuda_and_triton_code():
    cuda = "#define BLOCK 256\nconstexpr int TILE = 16;\nk<<<(n + 127) / 128, 128>>>(x);\ndim3 block(32, 8);"
    assert sizes.block_sizes(cuda) == {256, 16, 128, 32, 8}
    assert sizes.block_sizes(TRITON_RELU) == {1024}
    assert sizes.block_sizes("def f(x, BLOCK_SIZE: tl.constexpr = 64):\n    pass") == {64}
    assert 128 in sizes.block_sizes(STRIDE_KERNEL.replace("(long)blockDim.x", "128") + "\nk<<<g, 128>>>()")


def test_the_grown_size_passes_every_cap_within_the_budget():
    assert sizes.past_caps() == (1 << 20) + 1 <= sizes.ELEMENT_BUDGET
    assert sizes.past_caps(sizes.limit_for(None, on_cpu=True)) == (1 << 15) + 1  # the interpreter's
    assert sizes.past_caps(sizes.limit_for(1 << 17)) == (1 << 16) + 1
    assert sizes.grown_target(16384) == (1 << 20) + 1  # past every cap, 64x the example
    assert sizes.grown_target(1 << 20) == sizes.ELEMENT_BUDGET  # 2x: the budget bounds it
    assert sizes.grown_target(sizes.ELEMENT_BUDGET) == 0  # the example fills the budget already


def test_awkward_sizes_are_odd_primes_and_no_multiple_of_a_block():
    assert sizes.awkward(1024, {256, 3}) == 1025 and sizes.awkward(1, {256}) == 1
    assert all(sizes.awkward(v, {5, 7}) % k for v in range(2, 200) for k in (2, 5, 7))
    assert sizes.prime_below(1021) == 1021 and sizes.prime_below(1020) == 1019


def test_pool_shapes_grow_on_a_free_axis_within_the_constraints():
    grown = sizes.grow_shape((5, 16411), {"max_cols": 16411})
    assert grown[1] == 16411 and math.prod(grown) > 1 << 20
    assert sizes.grow_shape((2, 3, 4), {"dims": {"0": 2}})[0] == 2  # the harness fixes axis 0
    assert sizes.grow_shape((7,), {"max_numel": 1000}) is None
    shapes = sizes.add_grown([(1,), (7,), (31,)], {}, sizes.ELEMENT_BUDGET, {256})
    assert shapes[:3] == [(1,), (7,), (31,)] and len(shapes) == 4
    assert (1 << 20) < math.prod(shapes[3]) <= sizes.ELEMENT_BUDGET and shapes[3][0] % 2
    assert sizes.add_grown([(7,)], {}, sizes.ELEMENT_BUDGET, works=lambda s: 1 / 0) == [(7,)]


def test_module_variants_use_primes_a_batch_of_one_and_one_grown_past_the_caps():
    from sftbuild.trial.pyrun import size_variants

    heads = [[ln for ln in v.splitlines() if " = " in ln and ln[0].isalpha()] for v in
             size_variants(REF_RELU, 3, {256})]
    assert heads == [["batch_size = 16", "dim = 1024"], ["batch_size = 13", "dim = 1021"],
                     ["batch_size = 1", "dim = 257"]]
    grown = sizes.grow_constant(REF_RELU, 16 * 1024, {256})
    assert "batch_size = 1025" in grown and "dim = 1024" in grown  # 1,049,600 elements
    assert "M = 4097" in sizes.grow_constant(REF_MATMUL, 256 * 256, {16})


REF_TRIL = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x0):
        return torch.tril(x0)


size_0 = 10


def get_inputs():
    return [torch.rand((size_0, size_0))]
"""


def _meta_numel(src):
    from sftbuild.trial.pyrun import load_module

    with tempfile.TemporaryDirectory() as d:
        mod, _ = load_module(src, "probe", d)
        with torch.device("meta"):
            return max(t.numel() for t in mod.get_inputs())


def test_a_size_in_two_dimensions_grows_by_its_square_root_not_past_memory():
    # linear growth would give size_0 = 419431: a 10^11-element input, which the host cannot allocate
    assert "size_0 = 104859" in sizes.grow_constant(REF_TRIL, 100)
    grown = sizes.grow_constant(REF_TRIL, 100, numel_at=_meta_numel)
    n = _meta_numel(grown)
    assert (1 << 20) < n <= sizes.MAX_ELEMENTS, n
    assert sizes.grow_constant(REF_TRIL, 100, numel_at=lambda src: None) is None  # cannot tell: no growth
    # linear inputs keep the linear guess
    assert sizes.grow_constant(REF_RELU, 16 * 1024, {256}, numel_at=_meta_numel) == \
        sizes.grow_constant(REF_RELU, 16 * 1024, {256})


def _python_run(fn, dtype="float32", shapes=1):
    from sftbuild.trial import pyrun

    counter = types.SimpleNamespace(count=0, names=set())

    def wrapper(x):
        counter.count += 1  # stands in for the candidate's own Triton launch
        return fn(x)
    task = TrialTask.of({"id": "t", "language": "triton", "code": "", "binding": {"op": "relu"},
                         "entry": {"wrapper": "wrapper"}, "dtypes": [dtype], "shapes": shapes})
    from sftbuild.trial import guards, pristine, refbook

    guards.set_strict()  # as run_python does before its snapshot
    dev = torch.device("cpu")
    prob = pyrun.OpProblem(task, dev)  # the reference side first, as the loop builds it
    book = refbook.Book(prob, 1, dev, pyrun.layout_of)
    prob.bind(types.SimpleNamespace(wrapper=wrapper))
    return pyrun.Run(prob, dev, counter, set(), C.selected(), book, pristine.Pristine()), prob


def _trial(run, prob, v, dtype="float32"):
    from sftbuild.trial import pyrun

    return pyrun.trial(run, v, dtype, "contiguous", 0, vi=prob.variants().index(v))


def _first_32768(x):
    """A size-specialised kernel's result: right up to 32,768 elements, the tail never written."""
    y = torch.full_like(x, float("nan"))
    y.view(-1)[:32768] = torch.relu(x.reshape(-1)[:32768])
    return y


def test_a_size_specialised_wrapper_fails_on_the_grown_shape():
    from sftbuild.trial import pyrun

    run, prob = _python_run(_first_32768, shapes=2)
    grown = max(prob.variants(), key=math.prod)
    assert 32768 < math.prod(grown) <= 1 << 16  # on the CPU: past 2^15, within the interpreter's limit
    assert all(_trial(run, prob, v)[0] for v in prob.variants() if v != grown)
    ok, stats = _trial(run, prob, grown)
    assert not ok and stats["reason"] == "incorrect"
    run, prob = _python_run(torch.relu, shapes=2)
    assert all(_trial(run, prob, v)[0] for v in prob.variants())


# ---- guard regions ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int8,
                                   torch.bool])
def test_carved_tensors_keep_their_values_layout_and_intact_guards(dtype):
    base = (torch.randn(6, 9) * 10).to(dtype)
    layouts = [base, base.t(), base[:, 1::2], base[2]]
    fence = fences.Fence(layouts)
    for t, v in zip(layouts, fence.views):
        assert torch.equal(t, v) and v.stride() == t.stride() and v.dtype == dtype
    assert fence.tripped() is None
    g = fence.guarded[0]
    if dtype.is_floating_point:
        assert bool(g.base[: g.pad].isnan().all())
    elif dtype != torch.bool:
        assert bool((g.base[: g.pad] == fences.guard_value(dtype)).all()) and fences.guard_value(dtype) != 0


def test_a_write_past_any_edge_trips_and_names_the_tensor_and_side():
    x, y = torch.randn(10), torch.randn(4, 6)[:, ::2]
    fence = fences.Fence([x, y], ["input 0", "output 0"])
    cases = [(0, -1, "write before the start of input 0"), (0, 10, "write past the end of input 0"),
             (1, 1, "write between the elements of output 0"), (1, 24, "write past the end of output 0")]
    for i, offset, said in cases:
        g = fence.guarded[i]
        g.base[g.pad + offset] = 0.0
        assert fence.tripped() == {"reason": "out_of_bounds", "why": f"{said} (its guard region changed)"}
        fence.restore()
        assert fence.tripped() is None


def test_a_long_write_is_named_where_it_started_not_at_the_next_guard_it_reached():
    """Allocations may lie next to each other: a write far past the end of one tensor (llm.c's
    matmul_backward_bias_kernel9 past its device-only buffer) runs through the guard before the start
    of the tensor above it, and over it whole. The verdict names the guard it ran off, whatever the
    order the fence lists the tensors in; a guard changed only in its half away from its tensor was
    reached from another allocation, and says so."""
    x, y = torch.randn(10), torch.randn(10)
    for order in ([x, y], [y, x]):
        fence = fences.Fence(order, ["first", "second"])
        low, high = sorted(fence.guarded, key=lambda g: g.base.data_ptr())
        low.base[low.pad + 10:] = 0.0  # ran off the end of the lower tensor ...
        high.base[:] = 0.0  # ... and on over the whole allocation above it
        assert fence.tripped() == {"reason": "out_of_bounds", "why": (
            f"write past the end of {low.name} (its guard region changed; it also reached the guards "
            f"before the start of {high.name}, past the end of {high.name})")}
        fence.restore()
        low.base[low.pad + 10:] = 0.0
        high.base[:high.pad // 4] = 0.0  # stopped in the far half of the next guard
        assert fence.tripped()["why"] == (f"write past the end of {low.name} (its guard region changed; "
                                          f"it also reached the guards before the start of {high.name})")
        fence.restore()
        high.base[:high.pad // 4] = 0.0  # from an allocation the fence does not hold
        assert fence.tripped()["why"] == (f"write before the start of {high.name} (its guard region changed "
                                          "in its far half only: the write came from another allocation)")
        fence.restore()
        high.base[high.pad - 3] = 0.0  # its own edge, each side
        assert fence.tripped()["why"] == f"write before the start of {high.name} (its guard region changed)"
        fence.restore()
        low.base[low.pad + 10 + 5] = 0.0
        assert fence.tripped()["why"] == f"write past the end of {low.name} (its guard region changed)"
        fence.restore()
        assert fence.tripped() is None


def test_memory_nothing_writes_reads_nan_while_reads_are_blamed_on_the_cpu():
    """A rerun that blames reads must not find an unwritten element holding a right value an earlier
    run left in freed memory (on a GPU, scrub leaves NaN in the allocator's free blocks)."""
    from sftbuild.trial import guards

    was = torch.are_deterministic_algorithms_enabled()
    with guards.unwritten_is_nan(torch.device("cpu")):
        assert torch.empty(1000).isnan().all()
        assert (torch.empty(4, dtype=torch.int32) == torch.iinfo(torch.int32).max).all()
    assert torch.are_deterministic_algorithms_enabled() == was


def test_reads_outside_are_named_and_other_errors_are_not():
    a, b = torch.randn(7), torch.randn(7)
    fence = fences.Fence([a, b])
    va, vb = fence.views
    want = va + vb

    def past_end(t):
        return torch.as_strided(t, (1,), (1,), t.storage_offset() + t.numel())

    def reads_b_past_end():  # the next element times zero: right values, unless that element is NaN
        out = va + vb + 0 * past_end(vb)
        return bool(torch.allclose(out, want))

    verdict = fences.blame_reads(fence, reads_b_past_end)
    assert verdict["reason"] == "out_of_bounds" and verdict["why"].startswith("read outside input 1 (")
    assert fence.tripped() is None and bool(past_end(vb).isnan().all())  # guards restored
    assert fences.blame_reads(fence, lambda: bool(torch.allclose(va - vb, want))) is None  # just wrong


def test_no_fences_under_the_sanitizer(monkeypatch):
    monkeypatch.setenv("SFTBUILD_NO_FENCES", "1")
    x = torch.randn(5)
    assert fences.Fence([x]).views[0] is x


def _past_end(t):
    return torch.as_strided(t, (1,), (1,), t.storage_offset() + t.numel())


def test_python_loop_catches_reads_and_writes_past_the_input():
    from sftbuild.trial import pyrun

    def reads(x):
        y = torch.relu(x)
        y.view(-1)[-1:] += 0 * _past_end(x)
        return y

    def writes(x):
        _past_end(x).fill_(0)
        return torch.relu(x)

    for fn, said in ((reads, "read outside input 0 ("), (writes, "write past the end of input 0")):
        run, prob = _python_run(fn)
        ok, stats = _trial(run, prob, prob.variants()[0])
        assert not ok and stats["reason"] == "out_of_bounds" and stats["why"].startswith(said), stats


def _trial_with(monkeypatch, kernel, shape=None):
    from sftbuild.trial import trials

    op = ops.get("relu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(trials, "_launch", lambda lib, dtype, contract, i, o, params=None: kernel(i, o) or 0)
    contract = H.CONTRACTS[H.contract_for("", op.launch)]
    return trials._trial(None, op, contract, {}, shape or op.shape_pool[4], "float32", 0, torch.device("cpu"))


def test_harness_loop_catches_reads_and_writes_past_an_edge(monkeypatch):
    def exact(i, o):
        o[0].copy_(torch.relu(i[0]))

    def writes_output(i, o):
        exact(i, o)
        _past_end(o[0]).fill_(0)

    def reads_input(i, o):
        o[0].copy_(torch.relu(i[0]))
        o[0][-1:] += 0 * _past_end(i[0])

    assert _trial_with(monkeypatch, exact)[0]
    ok, stats = _trial_with(monkeypatch, writes_output)
    assert not ok and stats["reason"] == "out_of_bounds" and stats["why"].startswith("write past the end of output 0")
    ok, stats = _trial_with(monkeypatch, reads_input)
    assert not ok and stats["reason"] == "out_of_bounds" and stats["why"].startswith("read outside input 0 (")


def test_harness_loop_grows_a_shape_and_a_fixed_grid_fails_on_it(monkeypatch):
    from sftbuild.trial import trials

    op = ops.get("relu")
    shapes = trials._with_grown([(7,), (31,)], op, {}, {}, "float32", TrialTask("t", "cuda", STRIDE_KERNEL),
                                torch.device("cpu"))
    assert len(shapes) == 3 and math.prod(shapes[2]) > 1 << 20

    def fixed_grid(i, o):
        o[0].view(-1)[:32768] = torch.relu(i[0].view(-1)[:32768])

    assert _trial_with(monkeypatch, fixed_grid, (31,))[0]
    ok, stats = _trial_with(monkeypatch, fixed_grid, shapes[2])
    assert not ok and stats["reason"] == "incorrect"


# ---- compute-sanitizer: which tools, and what a finding says ---------------------------------------

MEMCHECK_LOG = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at relu_kernel(const float *, float *, long)+0x70
=========     Address 0x7f0000010000 is out of bounds
========= ERROR SUMMARY: 1 error
"""
RACECHECK_LOG = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at rowsum_kernel(const float *, float *, int)+0x1a0
=========     and Read access at rowsum_kernel(const float *, float *, int)+0x1d0 [256 hazards]
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_shared_memory_code_gets_racecheck_and_synccheck():
    from sftbuild.trial import memcheck
    from tests.redteam.cases import RELU_KERNEL, ROWSUM_KERNEL

    assert memcheck.tools_for(ROWSUM_KERNEL) == ("memcheck", "racecheck", "synccheck")
    assert memcheck.tools_for(RELU_KERNEL) == ("memcheck",)
    assert memcheck.tools_for(RELU_KERNEL, racecheck=True) == ("memcheck", "racecheck")
    assert memcheck.finding(MEMCHECK_LOG) == "Invalid __global__ read of size 4 bytes"
    assert memcheck.finding(RACECHECK_LOG).startswith("Error: Race reported between Write access")
    assert memcheck.finding("========= ERROR SUMMARY: 0 errors") == ""
    # a log whose fault line was cut off: its backtrace is no finding ("backtrace" holds "race")
    assert memcheck.finding("=========     Saved host backtrace up to driver entry point at kernel launch time") == ""


def _on_gpu(monkeypatch, verdict, sanitizer, code="__shared__ float buf[256];", sampled="sample"):
    from sftbuild.trial import memcheck
    from sftbuild.trial.kinds import KINDS
    from sftbuild.validate import pipeline

    ran = []
    monkeypatch.setattr(KINDS.get("cuda_harness"), "runner", "tests.tasks:trial_verdict")
    monkeypatch.setattr(tasks, "VERDICT", verdict)
    monkeypatch.setattr(pipeline, "_env", lambda: {})
    monkeypatch.setattr(memcheck, "run", lambda task, runner, tools, timeout: ran.append(tools) or sanitizer)
    out = pipeline.run_on_gpu({"id": "r", "language": "cuda", "kind": "cuda_harness", "code": code, "memcheck": sampled})
    return out, ran


def test_a_sanitizer_finding_drops_the_record_with_its_message(monkeypatch):
    out, ran = _on_gpu(monkeypatch, {"status": "ok", "reason": None},
                       {"ok": False, "tool": "racecheck", "finding": "Error: Race reported between ..."})
    assert ran == [("memcheck", "racecheck", "synccheck")]
    assert (out["status"], out["reason"], out["detail"]) == ("dropped", "racecheck", "Error: Race reported between ...")


def test_a_sanitizer_that_cannot_start_is_no_finding(monkeypatch):
    from sftbuild.executor import WorkerFailure
    from sftbuild.trial import memcheck

    failed = WorkerFailure("crash", "exit code 13: ========= COMPUTE-SANITIZER\n"
                                    "========= Failed to access the temporary directory.\n")
    monkeypatch.setattr(memcheck, "run_isolated", lambda *a, **k: failed)
    monkeypatch.setattr(memcheck.shutil, "which", lambda name: "/usr/bin/" + name)
    mc = memcheck.run(TrialTask("t", "cuda", "", dtypes=["float32"]), "m:f")
    assert mc["ok"] is None and "could not start" in mc["why"]
    out, _ = _on_gpu(monkeypatch, {"status": "ok", "reason": None}, mc)
    assert out["status"] == "ok" and out["memcheck"]["ok"] is None and set(out["seconds"]) == {"trials", "memcheck"}


API_ERRORS_LOG = """========= COMPUTE-SANITIZER
========= Program hit cudaErrorNotSupported (error 801) due to "operation not supported" on CUDA API call to cuDeviceGetAttribute.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: <module> in common_cuda.py:185
========= ERROR SUMMARY: 34 errors
"""


def test_an_api_error_of_the_references_import_is_no_finding(monkeypatch):
    """torch's op_db import asks the driver for features it refuses; compute-sanitizer reported each
    refusal as an error, and every op_db-bound record that memcheck sampled was dropped with 34."""
    from sftbuild.trial import memcheck

    def sanitized(runner, task, timeout, prefix, env):  # what compute-sanitizer prints, by its flags
        reports = prefix[prefix.index("--report-api-errors") + 1] if "--report-api-errors" in prefix else "explicit"
        if reports == "no":
            return {"_log": "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n", "_exit": 0}
        return {"_log": API_ERRORS_LOG, "_exit": 86}
    monkeypatch.setattr(memcheck, "run_isolated", sanitized)
    monkeypatch.setattr(memcheck.shutil, "which", lambda name: "/usr/bin/" + name)
    assert memcheck.run(TrialTask("t", "cuda", "", dtypes=["float32"]), "m:f") == {"ok": True, "tools": ["memcheck"]}


def test_a_guard_trip_gets_memcheck_to_name_the_fault(monkeypatch):
    verdict = {"status": "dropped", "reason": "out_of_bounds", "detail": "read outside input 0 (...)"}
    out, ran = _on_gpu(monkeypatch, verdict, {"ok": False, "tool": "memcheck", "finding": "Invalid __global__ read",
                                              "log": MEMCHECK_LOG}, sampled="off")
    assert ran == [("memcheck",)] and out["reason"] == "out_of_bounds"
    assert out["detail"] == "read outside input 0 (...); memcheck: Invalid __global__ read"


# ---- deadlines ----------------------------------------------------------------------------------

def test_the_bound_follows_the_reference_up_to_a_ceiling():
    assert deadline.bound(0.0) == 2.0
    assert deadline.bound(0.05) == pytest.approx(7.0)
    assert deadline.bound(1.0) == deadline.CEILING == 10.0


def test_watched_calls_report_their_bound_and_compiles_lift_it(monkeypatch):
    said = []
    monkeypatch.setattr(deadline, "report_deadline", lambda s, why="": said.append(s))
    with deadline.watch(0.01):
        with deadline.lifted():
            pass
        deadline.renew()
    assert said == [pytest.approx(3.0), None, pytest.approx(3.0), pytest.approx(3.0), None]
    said.clear()
    with deadline.watch(None), deadline.lifted():
        pass
    assert said == []


def test_triton_compiles_are_lifted_and_autotuning_renews_the_bound_once(monkeypatch):
    import triton.compiler as tc
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.autotuner import Autotuner

    # all restored after the test
    monkeypatch.setattr(tc, "compile", tc.compile)
    monkeypatch.setattr(Autotuner, "_bench", Autotuner._bench)
    monkeypatch.setattr(CompiledKernel, "_init_handles", CompiledKernel._init_handles)
    deadline.lift_while_compiling()
    patched = (tc.compile, Autotuner._bench, CompiledKernel._init_handles)
    deadline.lift_while_compiling()
    assert (tc.compile, Autotuner._bench, CompiledKernel._init_handles) == patched
    assert all(f._sftbuild_bounded for f in patched)
    said = []
    monkeypatch.setattr(deadline, "report_deadline", lambda s, why="": said.append(s))
    tool = types.SimpleNamespace(build=lambda: said.append("build"), bench=lambda: said.append("bench"))
    deadline._wrap(tool, "build")
    deadline._wrap(tool, "bench", before=deadline.renew)
    with deadline.watch(0.0):
        tool.build()
        tool.bench()
    assert said == [2.0, None, "build", 2.0, 2.0, "bench", None]  # lifted for a build, renewed for a bench


def test_a_step_past_its_bound_ends_the_item_and_slow_items_keep_their_time():
    # the worker loop needs no real GPU: it only pins CUDA_VISIBLE_DEVICES
    ex = LocalExecutor(cpu_workers=1, gpus="0", progress=False)
    out = dict(ex.map_gpu(tasks.bounded_steps, ["hang", "slow", "after"], timeout=60))
    assert out["hang"].kind == "timeout" and out["hang"].detail == "a step ran past its bound"
    assert out["hang"].seconds is not None
    assert out["slow"]["x"] == "slow" and out["after"]["pid"] == out["slow"]["pid"]


# ---- on the GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_a_hang_is_cut_short(tmp_path):
    import time

    from sftbuild.config import ValidateConfig
    from sftbuild.record import Record
    from sftbuild.validate import pipeline
    from tests.redteam.cases import cases

    chosen = {c.name: c for c in cases() if c.name in ("hang", "twin_relu_cuda")}
    recs = {Record(source="redteam", **c.record).id: name for name, c in chosen.items()}
    cfg = ValidateConfig(sample_timeout=120, memcheck="off", timing=False)
    got, t0 = {}, time.monotonic()
    with LocalExecutor(cpu_workers=1, gpus="auto", progress=False) as ex:
        for rec, status, reason, payload in pipeline.validate(
                [Record(source="redteam", **c.record) for c in chosen.values()], cfg, ex, str(tmp_path)):
            got[recs[rec.id]] = (status, reason, payload)
    wall = time.monotonic() - t0
    status, reason, payload = got["hang"]
    print(f"\nhang: {reason} {payload.get('stopped_after_s')} s after its trials began "
          f"({wall:.1f} s for the whole run, builds included): {payload.get('detail')}")
    assert got["twin_relu_cuda"][0] == "ok"
    assert reason == "timeout" and payload["stopped_after_s"] < 30  # within 20 s is the target


HARNESS_RELU = '''__global__ void relu_kernel(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''
HARNESS_CASES = [  # (name, kernel, expected reason); the harness launches one thread per element
    ("twin", HARNESS_RELU, None),
    ("capped_at_32768", HARNESS_RELU.replace("if (i < n)", "if (i < n && i < 32768)"), "incorrect"),
    ("reads_past_input", HARNESS_RELU.replace("x[i] : 0.f;", "x[i] : 0.f;\n  if (i < n) y[i] += 0.f * x[i + 1];"),
     "out_of_bounds"),
    ("writes_past_output", HARNESS_RELU.replace("x[i] : 0.f;", "x[i] : 0.f;\n  if (i == n - 1) y[n] = 0.f;"),
     "out_of_bounds"),
]


@pytest.mark.gpu
@pytest.mark.nvcc
def test_cuda_harness_trials_grow_and_guard(compile_cache):
    from sftbuild.bind import binders
    from sftbuild.record import Record
    from sftbuild.trial import compile as CC
    from sftbuild.trial import trials

    rows = []
    for name, code, expect in HARNESS_CASES:
        rec = Record(language="cuda", code=f"{code}// {name}\n", source="test",
                     entry={"kernels": ["relu_kernel"], "params": ["float* y", "const float* x", "int n"],
                            "include_sets": []})
        rec = dataclasses.replace(rec, binding=binders.infer(rec))
        srcs = [H.render(rec, check, ["float32"]) for check in H.checks(rec.binding)]
        built = [CC.compile_task({"id": rec.id, "code": rec.code, "harness": src, "include_sets": [], "arch": "sm_90",
                                  "timeout": 300, "nvcc": "", "cache_dir": str(compile_cache), "link": True})
                 for src in srcs]
        task = {"id": rec.id, "code": rec.code, "sos": [b["so"] for b in built], "binding": rec.binding,
                "entry": rec.entry, "dtypes": ["float32"], "shapes": 2, "seeds": 1, "timing": False,
                "warmup": 1, "runs": 3}
        out = trials.run_record(task)
        shapes = {tuple(t["shape"]) for t in out.get("trials", [])}
        rows.append((name, expect, out.get("reason"), str(out.get("detail", ""))[:100], max(map(math.prod, shapes))))
    print("\n" + "\n".join(f"{n:20} expected {e}  got {g}  largest {s}  {d}" for n, e, g, d, s in rows))
    assert [(n, g) for n, _, g, _, _ in rows] == [(n, e) for n, _, e in HARNESS_CASES]


def test_autotuning_tries_the_first_and_last_config_on_a_gpu_and_the_first_in_the_interpreter(monkeypatch):
    from triton.runtime.autotuner import Autotuner

    from sftbuild.trial import pyrun

    tuner = types.SimpleNamespace(configs=list(range(18)), early_config_prune=None, perf_model=None,
                                  nargs={}, configs_top_k=1.0)
    orig = Autotuner.prune_configs
    while getattr(orig, "_sftbuild", False):  # this process may have bounded it already
        orig = orig.__wrapped__
    for interpret, kept in (("0", [0, 17]), ("1", [0])):
        monkeypatch.setattr(Autotuner, "prune_configs", orig)  # restored after the test
        monkeypatch.setenv("TRITON_INTERPRET", interpret)
        pyrun.bounded_autotune()
        pyrun.bounded_autotune()  # once only
        assert Autotuner.prune_configs(tuner, {}) == kept
