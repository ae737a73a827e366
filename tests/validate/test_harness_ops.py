"""Harness templates around known-good kernels: bound by inference, compiled with nvcc, run on a GPU.

CPU: every harness renders and compiles (nvcc -shared). GPU (marked gpu): each record goes
through validate's trial loop and must come out correct.
"""
import dataclasses
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from sftbuild import ops
from sftbuild.binding import Binding
from sftbuild.bind import binders
from sftbuild.record import Record
from sftbuild.trial import compile as C
from sftbuild.trial import harness as H
from sftbuild.validate import pipeline

DATA = Path(__file__).parents[1] / "data" / "ops"
EXPECTED = {"relu_kernel": "relu", "silu_kernel": "silu", "sigmoid_kernel": "sigmoid", "tanh_kernel": "tanh",
            "exp_kernel": "exp", "gelu_kernel": "gelu", "neg_kernel": "neg", "add_kernel": "add",
            "mul_kernel": "mul", "max_kernel": "maximum", "softmax_kernel": "softmax",
            "log_softmax_kernel": "log_softmax", "row_sum_kernel": "row_sum"}


def records() -> list[Record]:
    out = []
    for path in sorted(DATA.glob("*.cu")):
        code = path.read_text()
        for m in re.finditer(r"__global__\s+void\s+(\w+)\s*\(([^)]*)\)", code):
            params = [p.strip() for p in m.group(2).split(",")]
            # one record per kernel: a trailing comment keeps their ids apart
            out.append(Record(language="cuda", code=f"{code}\n// entry: {m.group(1)}\n", source="test",
                              entry={"kernels": [m.group(1)], "params": params, "include_sets": []},
                              provenance={"path": path.name}))
    return out


def bound() -> list[Record]:
    return [dataclasses.replace(r, binding=binders.infer(r)) for r in records()]


def test_inference_binds_every_known_kernel():
    recs = bound()
    assert {r.name for r in recs} == set(EXPECTED)
    for r in recs:
        assert r.binding and r.binding.how == "inferred", r.name
        assert r.binding.op == EXPECTED[r.name], (r.name, r.binding.op)
        assert r.binding.dtypes == ("float32",), r.name  # float* params only


# as validate builds them: a launchable .so with a GPU, else the harness's device code only (the
# compiler's front end still checks all of it, host code included)
LINK = torch.cuda.is_available()


def _compile(rec, cache):
    srcs = [H.render(rec, check, list(rec.binding.dtypes)) for check in H.checks(rec.binding)]
    return [C.compile_task({"id": rec.id, "code": rec.code, "harness": src, "include_sets": [], "arch": "sm_90",
                            "timeout": 300, "nvcc": "", "cache_dir": str(cache), "link": LINK}) for src in srcs]


@pytest.fixture(scope="module")
def compiled(compile_cache):
    cache = compile_cache
    recs = bound()
    if not LINK:  # nothing runs them here: one kernel of each op family shows the template builds
        recs = list({ops.get(r.binding.op).family: r for r in recs}.values())
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda r: _compile(r, cache), recs))
    return list(zip(recs, results))


@pytest.mark.nvcc
def test_every_harness_compiles(compiled):
    for rec, results in compiled:
        for res in results:
            assert res["ok"], (rec.name, res.get("log", "")[-2000:])
            assert not LINK or (res["so"] and Path(res["so"]).exists())


@pytest.mark.gpu
def test_known_good_kernels_pass_trials(compiled):
    from sftbuild.trial import trials

    assert len(compiled) >= 10
    for rec, results in compiled:
        task = {"id": rec.id, "sos": [r["so"] for r in results], "binding": rec.binding, "entry": rec.entry,
                "dtypes": list(rec.binding.dtypes), "shapes": 4, "seeds": 2, "timing": False, "warmup": 1, "runs": 3}
        out = trials.run_record(task)
        assert out["status"] == "ok", (rec.name, out.get("reason"), out.get("detail"))


@pytest.mark.gpu
def test_a_wrong_kernel_is_caught(compiled):
    from sftbuild.trial import trials

    rec, results = next((r, res) for r, res in compiled if r.name == "neg_kernel")
    wrong = {**rec.binding, "op": "relu"}  # a negation kernel bound to relu must fail
    task = {"id": rec.id, "sos": [r["so"] for r in results], "binding": wrong, "entry": rec.entry,
            "dtypes": ["float32"], "shapes": 2, "seeds": 1, "timing": False, "warmup": 1, "runs": 3}
    assert trials.run_record(task)["status"] == "dropped"



# ---- the trial loop itself, on the CPU, with Python stand-ins for the launched kernel ---------

def _trial_with(monkeypatch, opname, kernel):
    from sftbuild.trial import trials

    op = ops.get(opname)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(trials, "_launch", lambda lib, dtype, contract, i, o, params=None: kernel(op, i, o, params) or 0)
    contract = H.CONTRACTS[H.contract_for("", op.launch)]
    return trials._trial(None, op, contract, {}, op.shape_pool[2], "float32", 0, torch.device("cpu"))


def _exact(op, i, o, p):
    for buf, val in zip(o, ops.as_outputs(op.run_reference(i, p))):
        buf.copy_(val)


def test_trials_multi_output_mutates_and_index_ties(monkeypatch):
    assert _trial_with(monkeypatch, "cummax", _exact)[0]
    assert _trial_with(monkeypatch, "batch_norm_stats", _exact)[0]
    assert _trial_with(monkeypatch, "adam_step", _exact)[0]  # outputs are the clones of param, m, v
    assert _trial_with(monkeypatch, "argmax", _exact)[0]

    def wrong_indices(op, i, o, p):
        _exact(op, i, o, p)
        o[1].copy_(o[1].flip(-1))
    ok, stats = _trial_with(monkeypatch, "cummax", wrong_indices)
    assert not ok and "output 1" in stats["why"]

    def tie(op, i, o, p):  # any index of an equal value is right
        _exact(op, i, o, p)
        i0 = i[0]
        first = (i0 == i0.amax(-1, keepdim=True)).float().argmax(-1, keepdim=True)
        assert torch.equal(i0.gather(-1, first), i0.gather(-1, o[0]))
        o[0].copy_(first)
    assert _trial_with(monkeypatch, "argmax", tie)[0]

    def touches_grad(op, i, o, p):
        _exact(op, i, o, p)
        i[1].zero_()
    assert _trial_with(monkeypatch, "adam_step", touches_grad)[1]["reason"] == "cheat"

    def skips_second_output(op, i, o, p):
        o[0].copy_(op.run_reference(i, p)[0])
    assert not _trial_with(monkeypatch, "batch_norm_stats", skips_second_output)[0]


# ---- ATen harnesses: every bound default ATen record ------------------------------------

def _aten_records(workspace):
    from sftbuild.store import Store

    return list(Store(workspace).records())


def _aten_harness_failures(records, cache) -> list:
    """Each check of each bound record rendered and built (torch include set) as validate builds it:
    a launchable .so with a GPU, else the harness's device code only. The builds are validate's own,
    into the run's compile cache. [(name, op, log tail)] of those that failed."""
    import os

    jobs = []
    for rec in records:
        for check in H.checks(rec.binding):
            src = H.render(rec, check, list(rec.binding.dtypes) or ["float32", "float16", "bfloat16"])
            jobs.append((rec, check["op"], src))

    def build(job):
        rec, op, src = job
        return rec, op, C.compile_task({"id": rec.id, "code": rec.code, "harness": src, "include_sets": ["torch"],
                                        "arch": "sm_90", "timeout": 900, "nvcc": "", "cache_dir": str(cache),
                                        "link": LINK})

    with ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        results = list(ex.map(build, jobs))
    # a kernel a preprocessor guard removes on this toolchain is validate's `compiled_out`, not a harness
    # failure (torch 2.11's warp merge sort tests CUDA_VERSION >= 110600, false on every CUDA release)
    return [(r.name, op, res.get("log", "")[-1500:]) for r, op, res in results
            if not res["ok"] and not pipeline.compiled_out(res.get("log", ""), r.name)]


def _bound_aten(workspace) -> list:
    recs = [dataclasses.replace(rec, binding=rec.binding or binders.infer(rec)) for rec in _aten_records(workspace)]
    return [r for r in recs if r.binding]


# two harness templates (the sort's is built below, for real): ATen's functor-taking elementwise
# kernel, and the manifest-bound softmax with its two checks (softmax, log_softmax)
HARNESS_SAMPLE = ("vectorized_elementwise_kernel", "softmax_warp_forward")


@pytest.mark.slow  # three builds against torch's headers
@pytest.mark.nvcc
def test_aten_harnesses_compile(aten_workspace, compile_cache):
    """Bound ATen records of two templates render and build; the sweep below builds every one."""
    recs = [r for r in _bound_aten(aten_workspace) if r.name in HARNESS_SAMPLE]
    assert {r.name for r in recs} == set(HARNESS_SAMPLE)
    assert _aten_harness_failures(recs, compile_cache) == []


@pytest.mark.sweep  # some 35 builds against torch's headers
@pytest.mark.nvcc
def test_every_aten_harness_compiles(aten_workspace, compile_cache):
    """Each check of each bound ATen record renders and builds, so a broken template or a kernel
    signature a harness no longer matches shows up without running it."""
    recs = _bound_aten(aten_workspace)
    assert len({r.id for r in recs}) >= 28
    failed = _aten_harness_failures(recs, compile_cache)
    assert not failed, failed


@pytest.mark.gpu
@pytest.mark.slow
def test_aten_validate_stage(aten_copy):
    """The whole validate stage on the default ATen harvest: the manifest-bound softmax passes and no
    record crashes its GPU worker (a crash means a harness bug: wrong argument contract or buffer)."""
    import subprocess
    import sys

    from sftbuild.store import Store

    ws = aten_copy
    cli = str(Path(sys.executable).with_name("sftbuild"))
    for stage in ("bind", "describe"):
        subprocess.run([cli, stage, "-q", "-w", str(ws)], check=True, capture_output=True)
    recs = _aten_records(ws)
    proc = subprocess.run([cli, "validate", "-q", "-w", str(ws)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = Store(ws).results_for("validate")
    print()
    for rec in sorted(recs, key=lambda r: r.name):
        res = results.get(rec.id) or {}
        detail = str((res.get("payload") or {}).get("detail") or "")[:100]
        print(f"{rec.name:55s} {rec.id[:8]} {res.get('status')!s:8s} {res.get('reason') or ''} {detail}")
    for rec in recs:  # our own harness or contract at fault: the whole traceback
        res = results.get(rec.id) or {}
        if res.get("reason") in ("harness_error", "worker_error", "crash"):
            payload = res.get("payload") or {}
            print(f"--- {rec.name} {res['reason']}:\n{payload.get('detail')}\n{payload.get('log', '')[-3000:]}")
    softmax = [r for r in recs if r.name == "softmax_warp_forward"]
    assert softmax and all(results[r.id]["status"] == "ok" for r in softmax)
    crashed = [r.name for r in recs
               if (results.get(r.id) or {}).get("reason") in ("crash", "worker_error", "harness_error")]
    assert not crashed, crashed


# a harness's host side that calls into c10 the way ATen's kernels do: TORCH_CHECK's failure path is
# c10::detail::torchCheckFail, defined in libc10.so, which the harness does not link
C10_KERNEL = "__global__ void fill(float* x, int n) { if ((int)threadIdx.x < n) x[threadIdx.x] = 1.f; }\n"
C10_HARNESS = """#include "kernel.cuh"
#include <c10/util/Exception.h>
extern "C" int sftbuild_launch_float32(float* x, int n) {
  TORCH_CHECK(n >= 0, "a negative size: ", n);
  fill<<<1, 32>>>(x, n);
  return 0;
}
"""


@pytest.mark.nvcc
def test_a_harness_that_calls_into_c10_loads(compile_cache):
    """A launchable ATen harness may refer to c10 symbols (TORCH_CHECK): a plain dlopen of it fails with
    an undefined symbol, and the worker's loader makes torch's libraries global first, so it loads."""
    import ctypes
    import subprocess
    import sys

    from sftbuild.trial.trials import load_harness

    res = C.compile_task({"id": "c10", "code": C10_KERNEL, "harness": C10_HARNESS, "include_sets": ["torch"],
                          "arch": "sm_90", "timeout": 300, "nvcc": "", "cache_dir": str(compile_cache), "link": True})
    assert res["ok"], res["log"][-2000:]
    plain = subprocess.run([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", res["so"]],
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode != 0 and "undefined symbol" in plain.stderr and "c10" in plain.stderr, plain.stderr
    lib = load_harness(res["so"])
    assert isinstance(lib, ctypes.CDLL) and hasattr(lib, "sftbuild_launch_float32")


def test_also_params_replace_the_first_ops():
    """`params: {}` on an `also` op means none; harness args still add up."""
    binding = {"op": "batch_norm", "params": {"eps": 1e-5}, "harness": "aten_batch_norm",
               "harness_args": {"which": "transform", "train": "false"},
               "also": [{"op": "batch_norm_apply", "params": {}, "harness_args": {"train": "true"}},
                        {"op": "batch_norm"}]}
    first, apply, again = H.checks(Binding.from_dict(binding))
    assert first["params"] == {"eps": 1e-5} and again["params"] == {"eps": 1e-5}
    assert apply["params"] == {}
    assert apply["harness_args"] == {"which": "transform", "train": "true"}


GUARDED = """#include <cuda.h>
#define HAS_FAST_SORT() (CUDA_VERSION >= 110600)
#if HAS_FAST_SORT()
__global__ void guarded_kernel(float* x) { x[threadIdx.x] = 1.f; }
#endif
"""


@pytest.mark.nvcc
def test_a_kernel_its_guard_removes_is_compiled_out(tmp_path):
    """A kernel whose own #if guard is false on this toolchain is `compiled_out`, not a harness error."""
    from sftbuild.config import ValidateConfig

    harness = '#include "kernel.cuh"\nvoid launch(float* x) { guarded_kernel<<<1, 32>>>(x); }\n'
    task = {"id": "g", "name": "guarded_kernel", "language": "cuda", "code": GUARDED, "harnesses": [harness],
            "include_sets": [], "arch": "sm_90", "timeout": 30, "nvcc": "", "cache_dir": str(tmp_path),
            "link": False}
    res = pipeline.compile_cuda(task)
    assert not res["ok"] and res["reason"] == "compiled_out"
    status, reason, payload = pipeline.after_compile(Record(language="cuda", code=GUARDED, source="t"), res,
                                                     ValidateConfig())
    assert (status, reason) == ("dropped", "compiled_out") and "guarded_kernel" in payload["detail"]
    # the same for the file's launcher a file-reference harness calls, when its guard removes it
    launcher = '#include "kernel.cuh"\nvoid run(float* x) { guarded_launcher(x); }\n'
    code = GUARDED.replace("#endif", "void guarded_launcher(float* x) { guarded_kernel<<<1, 32>>>(x); }\n#endif", 1)
    res = pipeline.compile_cuda({**task, "code": code, "harnesses": [launcher], "launcher": "guarded_launcher"})
    assert not res["ok"] and res["reason"] == "compiled_out", res.get("log")
    # a harness that misnames something else is still our fault
    res = pipeline.compile_cuda({**task, "code": GUARDED.replace("110600", "11060"),
                                 "harnesses": [harness.replace("x) {", "x) { undefined_helper();")]})
    assert res.get("harness_failed") and res["reason"] == "compile_error"


def test_the_gate_compiles_only_when_a_harness_fails(monkeypatch):
    """A harness includes the kernel, so a bound record's kernel compiles once; a failed harness
    gets the gate, which says whose fault it is, and a slow one the gate's budget."""
    built = []

    def compile_task(task):
        built.append("gate" if task.harness is None else "harness")
        broken = "BROKEN" in task.code or "BROKEN" in (task.harness or "")
        return {"ok": not broken, "reason": "compile_error" if broken else None, "log": "error" if broken else "",
                "resources": {"registers": 8, "kernels": {"k": {}}}, "so": None if broken else "h.so",
                "seconds": 1.0, "cached": False}

    monkeypatch.setattr(C, "compile_task", compile_task)
    task = {"id": "r", "name": "k", "language": "cuda", "code": "__global__ void k() {}", "harnesses": ["ok"],
            "include_sets": [], "arch": "sm_90", "timeout": 30, "nvcc": "", "cache_dir": "", "link": True}
    res = pipeline.compile_cuda(task)
    assert res["ok"] and res["sos"] == ["h.so"] and res["harnesses_built"] == 1 and built == ["harness"]
    built.clear()
    res = pipeline.compile_cuda({**task, "code": "BROKEN"})  # the kernel's fault: the gate's error
    assert not res["ok"] and not res.get("harness_failed") and built == ["harness", "gate"]
    res = pipeline.compile_cuda({**task, "harnesses": ["BROKEN"]})  # ours
    assert not res["ok"] and res["harness_failed"]
    built.clear()
    res = pipeline.compile_cuda({**task, "harnesses": []})  # unbound: the gate alone
    assert res["ok"] and res["sos"] == [] and built == ["gate"]
    built.clear()
    res = pipeline.compile_cuda({**task, "timeout": 0.5})  # a harness slower than the gate's budget: the gate decides
    assert res["ok"] and built == ["harness", "gate"]
