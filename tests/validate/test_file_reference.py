"""Kernels bound to their file's own CPU reference: the binder, trial sizes, the compile gate
with a repo's headers, hostile includes, the harness's CPU side, and (GPU) llm.c end to end."""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import shutil
import types
from pathlib import Path

import pytest
import torch

from sftbuild.harvest.cuda_extract import extract_kernels, include_dirs, local_headers, macros_tested
from sftbuild.harvest.stage import _entry
from sftbuild.bind.binders import infer
from sftbuild.trial import acceptance
from sftbuild.trial import file_reference as FR
from sftbuild.bind.binders.inferred import Inferred
from sftbuild.record import Record
from sftbuild.trial_types import TrialTask
from sftbuild.trial import compile as C
from sftbuild.trial import harness as H
from sftbuild.trial import trials as T
from sftbuild.validate.static import scan

LLMC = Path("/work/shared/corpora/llmc-dev-cuda")
needs_llmc = pytest.mark.skipif(not LLMC.is_dir(), reason="llm.c dev/cuda corpus not on this machine")

REPO_HEADER = """#pragma once
#include <cuda_runtime.h>
#define cudaCheck(e) (void)(e)
template <class T> __host__ __device__ T ceil_div(T a, T b) { return (a + b - 1) / b; }
float* make_random_float(size_t n);
"""
REPO_FILE = """#include <stdlib.h>
#include "common.h"
void scale_cpu(float* out, const float* inp, int N, int C) {
    for (int i = 0; i < N * C; i++) out[i] = 2.0f * inp[i] + (float)(i % C);
}
__global__ void scale_kernel(float* out, const float* inp, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N * C) out[i] = 2.0f * inp[i] + (float)(i % C);
}
void scale1(float* out, const float* inp, int N, int C, int block_size) {
    scale_kernel<<<ceil_div(N * C, block_size), block_size>>>(out, inp, N, C);
    cudaCheck(cudaGetLastError());
}
int main() {
    int N = 4096;
    int C = 768;
    float* out = (float*)malloc(N * C * sizeof(float));
    float* inp = make_random_float(N * C);
    scale_cpu(out, inp, N, C);
    int block_sizes[] = {64, 128, 256};
    return 0;
}
"""


@functools.lru_cache(maxsize=None)
def _extracted(root: Path, rel: str, stamp: tuple) -> tuple:
    """(include dirs, local headers, kernels) of one file as harvest extracts it (the defines that
    configure the file's own headers stay: macros_tested), once per file and version of it."""
    src = (root / rel).read_bytes()
    dirs = include_dirs(root, rel)
    headers = local_headers(root, rel, dirs, src)
    return dirs, headers, extract_kernels(src, tested=frozenset(macros_tested(headers.values())))[0]


def _record(root: Path, rel: str, kernel: str, bind: bool = True) -> Record:
    st = (root / rel).stat()
    dirs, headers, kernels = _extracted(root, rel, (st.st_mtime_ns, st.st_size))
    k = next(k for k in kernels if k.name == kernel)
    entry = _entry("cuda", dataclasses.asdict(k), False)
    entry.update(include_dirs=list(dirs), headers=dict(headers))
    rec = Record(language="cuda", code=k.code, source="t", entry=entry, binding=None, provenance={})
    if bind:
        rec = Record(language="cuda", code=k.code, source="t", entry=entry, binding=infer(rec), provenance={})
    return rec


def _repo(root: Path, file_text: str, name: str = "scale.cu", header: str = REPO_HEADER) -> Path:
    """A repo of one `common.h` and one CUDA file."""
    root.mkdir()
    (root / "common.h").write_text(header)
    (root / name).write_text(file_text)
    return root


@pytest.fixture
def repo(tmp_path) -> Path:
    return _repo(tmp_path / "repo", REPO_FILE)


def test_binder_binds_through_launcher_and_cpu_function(repo):
    rec = _record(repo, "scale.cu", "scale_kernel")
    b = rec.binding
    assert (b.how, b.launch["cpu_reference"], b.launcher, b.harness) == \
        ("file_reference", "scale_cpu", "scale1", "file_reference")
    assert "void scale1(" in rec.code


def test_trial_sizes_shrink_and_keep_divisibility(repo):
    ref = _record(repo, "scale.cu", "scale_kernel").binding.harness_args["ref"]
    plans = FR.plans(ref)
    assert len(plans) == 2
    for p in plans:
        n, c = p["args"][2], p["args"][3]
        assert sum(p["counts"]) <= FR.MAX_ELEMENTS and p["counts"] == [n * c, n * c]
        assert n % 128 == 0 and c % 128 == 0 and c <= 768  # main()'s sizes are multiples of 128: so are these
    assert FR.block_sizes(ref) == [64, 128, 256]
    assert FR.evaluate("B * T * (C / 3) + 7 % 4", {"B": 2, "T": 3, "C": 10}) == 2 * 3 * 3 + 3
    with pytest.raises(ValueError):
        FR.evaluate("__import__('os')", {})


SM_HEADER = REPO_HEADER + """int num_sms = 0;
void setup_main() {
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    num_sms = prop.multiProcessorCount;
}
"""
SM_FILE = REPO_FILE.replace("""void scale1(float* out, const float* inp, int N, int C, int block_size) {
    scale_kernel<<<ceil_div(N * C, block_size), block_size>>>(out, inp, N, C);""",
                            """void scale1(float* out, float* partial, const float* inp, int N, int C, int block_size) {
    scale_kernel<<<ceil_div(N * C, block_size), block_size>>>(out, inp, N, C);
    cudaMemset(partial, 0, num_sms * C * sizeof(float));""").replace(
    "    scale_cpu(out, inp, N, C);", """    float* d_partial;
    cudaMalloc(&d_partial, num_sms * C * sizeof(float));
    scale_cpu(out, inp, N, C);""")


def test_globals_the_repos_setup_fills_from_the_device(tmp_path):
    """llm.c's launchers size grids and scratch by `cuda_num_SMs`, which setup_main() fills from the
    device: the binding names such globals, sizes are planned with the device's values, and the
    harness fills them before calling the launcher."""
    root = _repo(tmp_path / "repo", SM_FILE, "scale.cu", SM_HEADER)
    rec = _record(root, "scale.cu", "scale_kernel")
    ref = rec.binding.harness_args["ref"]
    assert ref["device_globals"] == {"num_sms": "multiProcessorCount"}
    c = FR.plans(ref)[0]["args"][3]
    assert FR.plans(ref)[0]["scratch"] == [FR.DEVICE_FIELDS["multiProcessorCount"] * c]
    assert FR.plans(ref, device={"multiProcessorCount": 7})[0]["scratch"] == [7 * c]
    src = H.render(rec, H.checks(rec.binding)[0], ["float32"])
    assert "num_sms = prop.multiProcessorCount;" in src.split("sftbuild_file_launch", 1)[1]
    assert FR.device_globals(["int n = 0;\nvoid f(cudaDeviceProp p) { n = q.major; }"]) == {}  # not a device's


def _build_harness(rec, tmp_path) -> dict:
    """The record's file-reference harness, built and linked as validate builds it."""
    src = H.render(rec, H.checks(rec.binding)[0], ["float32"])
    res = C.compile_task({"id": rec.id, "code": rec.code, "harness": src, "include_sets": [], "arch": "sm_90",
                          "timeout": 300, "cache_dir": str(tmp_path / "cache"), "headers": rec.entry["headers"],
                          "include_dirs": rec.entry["include_dirs"], "link": True})
    assert res["ok"], res.get("log")
    return res


@pytest.mark.nvcc
def test_the_harness_that_fills_device_globals_builds(tmp_path):
    root = _repo(tmp_path / "repo", SM_FILE, "scale.cu", SM_HEADER)
    _build_harness(_record(root, "scale.cu", "scale_kernel"), tmp_path)


@needs_llmc
@pytest.mark.parametrize("file,kernel,cpu", [
    ("gelu_forward.cu", "gelu_forward_kernel1", "gelu_forward_cpu"),
    ("layernorm_forward.cu", "layernorm_forward_kernel4", "layernorm_forward_cpu"),
    ("softmax_forward.cu", "softmax_forward_kernel7", "softmax_forward_cpu"),
    ("layernorm_backward.cu", "layernorm_backward_kernel10", "layernorm_backward_cpu"),  # scratch by cuda_num_SMs
])
def test_llmc_kernels_bind_to_their_cpu_reference(file, kernel, cpu):
    b = _record(LLMC, file, kernel).binding
    assert b.how == "file_reference" and b.launch["cpu_reference"] == cpu and FR.plans(b.harness_args["ref"])


@needs_llmc
def test_a_step_launcher_reads_what_the_cpu_function_computed_first():
    """attention_backward_cpu computes datt, then the softmax backward from it; the step's launcher
    takes datt non-const but its kernel declares it const, so the step starts from the CPU's datt."""
    ref = _record(LLMC, "attention_backward.cu", "softmax_autoregressive_backward_kernel1").binding.harness_args["ref"]
    names = [c["name"] for c in ref["cpu_params"] if c["ptr"]]
    roles = dict(zip(names, FR.roles(ref)))
    assert roles["datt"] == "staged" and roles["att"] == "staged" and roles["dpreatt"] == "inout"
    assert roles["dinp"] == "host" and "datt" in ref["kernel_reads"]
    assert FR.kernel_reads(["float* __restrict__ out", "const float* __restrict__ inp", "const int* idx",
                            "float* const p", "int n"]) == ["inp", "idx"]


def _inferred(code: str, name: str, params: list[str]):
    rec = Record(language="cuda", code=code, source="t", entry={"kernels": [name], "params": params},
                 binding=None, provenance={})
    return (Inferred().bind(rec) or {}).get("op")


GELU = """__global__ void gelu_kernel(float* out, const float* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { float x = inp[i]; out[i] = 0.5f * x * (1.0f + BODY); }
}
"""
SOFTMAX = """__global__ void softmax_kernel(float* out, const float* inp, int N, int C) {
    int row = blockIdx.x; const float* x = inp + row * C;
    float m = -INFINITY;
    for (int i = 0; i < LIMIT; i++) m = fmaxf(m, x[i]);
    float s = 0.f;
    for (int i = 0; i < LIMIT; i++) s += expf(x[i] - m);
    for (int i = 0; i < C; i++) out[row * C + i] = expf(x[i] - m) / s;
}
"""


def test_inferred_reads_the_variant_from_the_code_not_the_name():
    p = ["float* out", "const float* inp", "int N"]
    assert _inferred(GELU.replace("BODY", "tanhf(0.7978845f * (x + 0.044715f * x * x * x))"), "gelu_kernel", p) \
        == "gelu_tanh"
    assert _inferred(GELU.replace("BODY", "erff(x * 0.70710678f)"), "gelu_kernel", p) == "gelu"
    assert _inferred(GELU.replace("BODY", "x"), "gelu_kernel", p) is None
    p = ["float* out", "const float* inp", "int N", "int C"]
    assert _inferred(SOFTMAX.replace("LIMIT", "C"), "softmax_kernel", p) == "softmax"
    assert _inferred(SOFTMAX.replace("< LIMIT", "<= row"), "softmax_kernel", p) is None  # causal
    assert _inferred(SOFTMAX.replace("LIMIT", "C").replace("int N, int C", "int N, int C, int NH"),
                     "softmax_kernel", p + ["int NH"]) is None  # (B, T, NH): 4-D attention, not rows


def test_an_include_is_not_a_cheat_a_library_call_is():
    code = "#include <cublas_v2.h>\n#include <thrust/sort.h>\ncublasHandle_t h;\n" \
           "__global__ void k(float* y) { y[0] = 1.f; }\n" \
           "void setup() { cublasCreate(&h); cublasSetMathMode(h, CUBLAS_DEFAULT_MATH); }\n"
    assert scan(code, "cuda") == []
    for call in ("cublasSgemm(h, 0, 0)", "cublasLtMatmul(h)", "thrust::sort(p, p + 4)", "cub::DeviceReduce::Sum(a)"):
        found = scan(code + f"void run(float* p) {{ {call}; }}\n", "cuda")
        assert found and found[0].reason == "cheat", call


def test_gate_refuses_includes_that_leave_the_tree():
    ok = {"common.h": "#define X 1\n", "sub/a.h": '#include "../common.h"\n'}
    assert C.unsafe_include('#include "common.h"\n#include <cuda_runtime.h>\n', ok, ["."]) is None
    for code, headers in [('#include "../../../../etc/shadow"\n', {}), ('#include "/etc/shadow"\n', {}),
                          ("#define P </etc/shadow>\n#include P\n", {}),
                          ('#include "common.h"\n', {"common.h": '#include "../../etc/passwd"\n'}),
                          ('#include "x.h"\n', {"../x.h": "int a;\n"}),
                          # a "/*" inside a string literal opens no comment: the include after it counts
                          ('const char* s = "/*";\n#include "/etc/shadow"\n// */\n', {})]:
        assert C.unsafe_include(code, headers, ["."]), code
    res = C.compile_task({"id": "x", "code": '#include "../../../../etc/shadow"\n', "harness": None,
                          "include_sets": [], "arch": "sm_90", "timeout": 30, "cache_dir": "/nonexistent"})
    assert res["reason"] == "unsafe_include" and not res["ok"]


@pytest.mark.nvcc
def test_gate_finds_the_repos_own_header(repo, tmp_path):
    rec = _record(repo, "scale.cu", "scale_kernel", bind=False)
    shutil.rmtree(repo)  # the source tree is gone: the record carries its headers
    task = {"id": rec.id, "code": rec.code, "harness": None, "include_sets": [], "arch": "sm_90",
            "timeout": 120, "cache_dir": str(tmp_path / "cache"), "headers": rec.entry["headers"],
            "include_dirs": rec.entry["include_dirs"]}
    res = C.compile_task(task)
    assert res["ok"], res.get("log")
    assert not C.compile_task({**task, "headers": {}, "include_dirs": []})["ok"]  # common.h: no such file


@pytest.mark.nvcc
def test_harness_exports_the_cpu_reference(repo, tmp_path):
    rec = _record(repo, "scale.cu", "scale_kernel")
    res = _build_harness(rec, tmp_path)
    lib = T.load_file_harness(res["so"])
    lib.sftbuild_file_elem_bytes.restype = ctypes.c_int
    assert lib.sftbuild_file_elem_bytes(0) == 4
    ref = rec.binding.harness_args["ref"]
    p = FR.plans(ref)[0]
    host, roles = T._file_buffers(ref, p, 0)
    assert roles == ["output", "input"]
    out = T.file_reference_outputs(lib, ref, p, host)
    c = p["args"][3]
    want = 2 * host[1] + (torch.arange(host[1].numel()) % c).float()
    assert torch.equal(out[0], want) and torch.equal(out[1], host[1])


def test_file_output_comparison():
    want = torch.linspace(-2, 2, 100)
    assert T.compare_file_output(want + 1e-4, want, 4)[0]
    assert not T.compare_file_output(want + 0.1, want, 4)[0]
    assert T.compare_file_output(want + 0.02, want, 2)[0]  # a 16-bit launcher type: looser
    nan = want.clone()
    nan[3] = float("nan")
    assert not T.compare_file_output(nan, want, 4)[0]
    assert not T.compare_file_output(want, nan, 4)[0]
    assert not T.compare_file_output(torch.tensor([1, 2], dtype=torch.int32),
                                     torch.tensor([1, 3], dtype=torch.int32), 4)[0]


@pytest.mark.gpu
@needs_llmc
def test_llmc_kernels_validate_end_to_end(make_ctx, tmp_path):
    from sftbuild.bind import stage as bind
    from sftbuild.describe import stage as describe
    from sftbuild.harvest import stage as harvest
    from sftbuild.validate import stage as validate

    repo = tmp_path / "llmc"
    repo.mkdir()
    for f in ("gelu_forward.cu", "layernorm_forward.cu", "softmax_forward.cu", "common.h", "LICENSE"):
        shutil.copy(LLMC / f, repo / f)
    ctx = make_ctx()
    harvest.run(ctx, [str(repo)])
    shutil.rmtree(repo)  # validation needs only the workspace
    bind.run(ctx)
    describe.run(ctx)
    validate.run(ctx)
    names = {"gelu_forward_kernel1", "layernorm_forward_kernel3", "softmax_forward_kernel4"}
    results = ctx.store.results_for("validate")
    verdicts = {r.name: results.get(r.id, {}) for r in ctx.store.records()}
    ok = {n for n, v in verdicts.items() if v.get("status") == "ok"}
    assert names <= ok, {n: (v.get("status"), v.get("reason")) for n, v in verdicts.items()}


def test_the_cpu_reference_runs_once_per_size_seed_and_run_not_per_block_size(repo, monkeypatch):
    """The file's CPU function depends on the trial size and seed only: every block size of one
    size shares its result (trials.ReferenceCache). Runs on the CPU: the launcher is emulated."""
    from sftbuild.trial import loop

    rec = _record(repo, "scale.cu", "scale_kernel")
    ref = rec.binding.harness_args["ref"]
    calls = []

    def scale(out, inp, c):
        out.copy_(2 * inp + (torch.arange(inp.numel()) % c).float())

    def reference(lib, ref_, p, host):
        calls.append((tuple(p["counts"]), float(host[1][0])))
        out = [t.clone() for t in host]
        scale(out[0], out[1], p["args"][3])
        return out

    def launch(lib, ref_, p, dev_bufs, block):
        scale(dev_bufs[0], dev_bufs[1], p["args"][3])
        return 0

    class Lib:  # the harness's three entry points; only the element size is read from it here
        sftbuild_file_launch = sftbuild_file_reference = staticmethod(lambda *a: 0)
        sftbuild_file_elem_bytes = staticmethod(lambda i: 4)

    monkeypatch.setattr(T, "load_file_harness", lambda path: Lib())
    monkeypatch.setattr(T, "file_reference_outputs", reference)
    monkeypatch.setattr(T, "_file_call", launch)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    task = TrialTask("t", "cuda", "", binding=rec.binding, sos=["harness.so"], shapes=3, seeds=2)
    adapter = T.FileReference(task, torch.device("cpu"), T.C.selected())
    out = loop.run([adapter], task)

    plans = FR.plans(ref, 3)
    sizes, pairs = len(plans), len(FR.pairs(ref, plans))
    assert out["status"] == "ok", out
    assert sizes == 3 and pairs > sizes
    assert len(out["trials"]) == pairs * 2  # every (size, block size, seed) is still a trial
    assert len(calls) == sizes * 2 * 2 == out["reference_calls"]  # (size, seed, run), not per block size
    assert len(set(calls)) == len(calls)

    # a reference slower than the budget at the largest size leaves that size out, keeping one
    calls.clear()
    monkeypatch.setattr(T, "REFERENCE_BUDGET_S", -1.0)
    out = loop.run([T.FileReference(task, torch.device("cpu"), T.C.selected())], task)
    assert out["status"] == "ok" and len(out["trials"]) == len(FR.block_sizes(ref, p=plans[-1])) * 2
    assert {r["sizes"][0] for r in out["trials"]} == {plans[-1]["counts"][0]}


def test_a_small_run_gets_a_small_size_and_never_none(repo):
    ref = _record(repo, "scale.cu", "scale_kernel").binding.harness_args["ref"]
    big = FR.plans(ref, 1)[0]
    small = FR.plans(ref, 1, 1 << 17)[0]
    assert sum(small["counts"]) <= 1 << 17 < sum(big["counts"])
    tiny = FR.plans(ref, 1, 1)  # below every size the file allows: its smallest
    assert len(tiny) == 1 and sum(tiny[0]["counts"]) <= sum(small["counts"])
    # a small run keeps the trials' divisibility: a tiled kernel sees no partial tile there either
    assert all(a % 128 == 0 for a in tiny[0]["args"][2:])


def test_sizes_keep_128_wide_tiles_while_they_fit_then_64(repo, monkeypatch):
    """A tiled matmul writes whole 128-wide tiles: main()'s multiples of 128 stay multiples of 128
    while some trial size fits, else of 64 (the plans are never empty for want of a tile)."""
    ref = _record(repo, "scale.cu", "scale_kernel").binding.harness_args["ref"]
    assert all(a % 128 == 0 for p in FR.plans(ref, 3) for a in p["args"][2:])
    monkeypatch.setattr(FR, "MAX_ELEMENTS", 50000)  # below every size that keeps 128
    plans = FR.plans(ref, 3)
    assert plans and all(sum(p["counts"]) <= 50000 and all(a % 64 == 0 for a in p["args"][2:]) for p in plans)
    assert any(a % 128 for p in plans for a in p["args"][2:])


GLOBAL_FILE = REPO_FILE.replace("""void scale1(float* out, const float* inp, int N, int C, int block_size) {""",
                                """float* partial;
void scale1(float* out, const float* inp, int N, int C, int block_size) {
    cudaMemset(partial, 0, N * sizeof(float));""").replace(
    "    scale_cpu(out, inp, N, C);", """    cudaMalloc(&partial, N * sizeof(float) * 2);
    scale_cpu(out, inp, N, C);""")


def test_a_file_scope_device_buffer_main_allocates_is_the_harness_s_to_set(tmp_path):
    """llm.c's matmul_backward_bias keeps `float* dbias_buffer;` at file scope; main() allocates it
    and the launchers use it: the harness points it at a buffer of main()'s size (zeros, guarded,
    after the launcher's own scratch) for the call, and back at NULL after it."""
    root = _repo(tmp_path / "repo", GLOBAL_FILE)
    rec = _record(root, "scale.cu", "scale_kernel")
    ref = rec.binding.harness_args["ref"]
    assert ref["device_buffers"] == [{"name": "partial", "type": "float", "size": "N * 1 * 2", "zeroed": False}]
    assert rec.binding.harness_args["file_buffers"] == [{"name": "partial", "type": "float", "slot": 2}]
    p = FR.plans(ref)[0]
    assert p["scratch"] == [2 * p["args"][2]] and FR.scratch_names(ref) == ["partial"]
    assert FR.scratch_zeroed(ref) == [False]
    assert T.file_buffer_names(ref, 2) == ["out", "inp", "partial (device-only)"]
    launch = H.render(rec, H.checks(rec.binding)[0], ["float32"]).split("sftbuild_file_launch", 1)[1]
    assert "partial = static_cast<float*>(ptrs[2]);" in launch and "partial = nullptr;" in launch


STEP_FILE = """#include <stdlib.h>
#include "common.h"
void mask_cpu(float* att, const float* inp, int n) {
    for (int i = 0; i < n; i++) att[i] = (i % 2) ? 0.0f : inp[i];
}
void scale_cpu(float* out, const float* att, int N, int C) {
    for (int i = 0; i < N * C; i++) out[i] = 2.0f * att[i];
}
__global__ void scale_kernel(float* out, const float* att, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N * C) out[i] = 2.0f * att[i];
}
void scale1(float* out, const float* att, int N, int C, int block_size) {
    scale_kernel<<<ceil_div(N * C, block_size), block_size>>>(out, att, N, C);
}
int main() {
    int N = 4096;
    int C = 768;
    float* inp = make_random_float(N * C);
    float* att = (float*)malloc(N * C * sizeof(float));
    float* out = (float*)malloc(N * C * sizeof(float));
    mask_cpu(att, inp, N * C);
    scale_cpu(out, att, N, C);
    return 0;
}
"""


@pytest.fixture
def step_repo(tmp_path) -> Path:
    return _repo(tmp_path / "step", STEP_FILE)


def test_an_array_main_fills_by_an_earlier_cpu_step_gets_that_step(step_repo):
    """main() fills `att` by mask_cpu before the reference reads it (as llm.c's attention backward
    gets a causal `att` from attention_forward_cpu): the binding names that step, with the arrays
    only it takes (`inp`) made as main() makes them."""
    ref = _record(step_repo, "scale.cu", "scale_kernel").binding.harness_args["ref"]
    assert ref["prepare"]["cpu"] == "mask_cpu" and "void mask_cpu" in ref["cpu_code"]
    assert [b["arg"] for b in ref["prepare"]["extra"]] == ["inp"]
    assert FR.prepare_arrays(ref) == [("host", 1), ("extra", 0)]
    p = FR.plans(ref)[0]
    n = p["args"][2] * p["args"][3]
    assert p["prepare"] == {"counts": [n], "args": [n]}


@pytest.mark.nvcc
def test_the_harness_runs_the_earlier_step_on_the_host_arrays(step_repo, tmp_path):
    rec = _record(step_repo, "scale.cu", "scale_kernel")
    lib = T.load_file_harness(_build_harness(rec, tmp_path)["so"])
    ref = rec.binding.harness_args["ref"]
    p = FR.plans(ref)[0]
    host, roles = T._file_buffers(ref, p, 0, lib)
    assert roles == ["output", "input"]
    att = host[1]
    assert bool((att[1::2] == 0).all()) and bool((att[0::2] != 0).any())  # mask_cpu's zeros, not random values
    assert torch.equal(T._file_buffers(ref, p, 0, lib)[0][1], att)  # seeded: the same arrays again


def test_byte_counts_become_element_counts():
    from sftbuild.harvest.main_reader import block_values, elements

    assert elements("OC * sizeof(float)") == "OC" and elements("sizeof(float) * OC") == "OC"
    assert elements("OC * sizeof(float) * 32") == "OC * 1 * 32"
    main = "int sqrt_block_sizes[] = {4, 8, 16, 32};\nint block_sizes[] = {64, 128};"
    assert block_values(main, ["sqrt_block_size"]) == [4, 8, 16, 32]
    assert block_values(main, ["block_size"]) == block_values(main) == [64, 128]
    assert block_values("int tile_block_sizes[3] = {1, 2, 3};") == [1, 2, 3]



def test_block_sizes_main_comments_out_are_not_tried():
    """llm.c's layernorm_backward: `int block_sizes[] = {32, ..., 512, /*768,*/ 1024};`."""
    from sftbuild.harvest.main_reader import block_values
    from sftbuild.parsing import blank_comments

    main = 'int block_sizes[] = {32, /*768,*/ 1024}; // {64}\nprintf("/*%d*/ // no", 1);'
    blank = blank_comments(main)
    assert block_values(blank) == [32, 1024] and len(blank) == len(main)
    assert blank.endswith('printf("/*%d*/ // no", 1);')  # comment marks inside a string are text


BF16_HEADER = REPO_HEADER + """#include <cuda_bf16.h>
#ifdef ENABLE_BF16
typedef __nv_bfloat16 floatX;
#else
typedef float floatX;
#endif
"""


@pytest.mark.nvcc
def test_the_harness_builds_the_launcher_with_the_types_main_s_defines_select(tmp_path):
    """The file defines ENABLE_BF16 before including its header, so main()'s floatX is bf16: the
    harness stages the launcher's floatX buffers as 2-byte elements (judged at bf16 tolerance)."""
    text = REPO_FILE.replace('#include "common.h"', '#define ENABLE_BF16\n#include "common.h"')
    text = text.replace("__global__ void scale_kernel(float* out, const float* inp",
                        "__global__ void scale_kernel(floatX* out, const floatX* inp")
    text = text.replace("if (i < N * C) out[i] = 2.0f * inp[i] + (float)(i % C)",
                        "if (i < N * C) out[i] = (floatX)(2.0f * (float)inp[i] + (float)(i % C))")
    text = text.replace("void scale1(float* out, const float* inp", "void scale1(floatX* out, const floatX* inp")
    root = _repo(tmp_path / "repo", text, header=BF16_HEADER)
    rec = _record(root, "scale.cu", "scale_kernel")
    assert rec.code.index("#define ENABLE_BF16") < rec.code.index('#include "common.h"')
    lib = T.load_file_harness(_build_harness(rec, tmp_path)["so"])
    lib.sftbuild_file_elem_bytes.restype = ctypes.c_int
    assert lib.sftbuild_file_elem_bytes(0) == lib.sftbuild_file_elem_bytes(1) == 2


def test_a_failed_trial_says_at_which_sizes_and_block_size(repo):
    ref = _record(repo, "scale.cu", "scale_kernel").binding.harness_args["ref"]
    p = FR.plans(ref)[0]
    n, c = p["args"][2], p["args"][3]
    got = T._located({"reason": "incorrect", "why": "out: 3 elements off"}, ref, p, 256)
    assert got == {"reason": "incorrect", "why": f"out: 3 elements off (at N={n}, C={c}, block size 256)"}


TEMPLATE_LAUNCHER = """#include <cuda_fp16.h>
void scale_cpu(float* out, const float* inp, int N) { for (int i = 0; i < N; i++) out[i] = 2 * inp[i]; }
template <typename T>
__global__ void scale_kernel(T* out, const T* inp, int N) { int i = threadIdx.x; if (i < N) out[i] = 2 * inp[i]; }
template <typename T>
void scale1(T* out, const T* inp, int N, int block_size) { scale_kernel<<<1, block_size>>>(out, inp, N); }
CALLER
int main() {
    int N = 4096;
    float* out = (float*)malloc(N * sizeof(float));
    float* inp = make_random_float(N);
    scale_cpu(out, inp, N);
    return 0;
}
"""


@pytest.mark.parametrize("caller, types", [
    # main()'s dispatcher passes its half* arrays: the launcher is instantiated as the file runs it
    ("void scale(half* out, const half* inp, int N, int bs) { scale1(out, inp, N, bs); }", ["half", "half"]),
    # a caller that is a template itself says nothing: the CPU function's float
    ("template <typename T>\\nvoid scale(T* out, const T* inp, int N, int bs) { scale1(out, inp, N, bs); }",
     ["float", "float"]),
])
def test_a_template_launcher_takes_the_types_main_s_call_gives_it(caller, types):
    src = TEMPLATE_LAUNCHER.replace("CALLER", caller).encode()
    ref = next(k for k in extract_kernels(src)[0] if k.name == "scale_kernel").file_reference
    assert [g["type"] for g in ref["launcher_params"] if g["ptr"]] == types


STEPS_FILE = """#include <stdlib.h>
#include "common.h"
void add_cpu(float* out, const float* a, const float* b, int n) {
    for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}
void rowsum_cpu(float* sums, const float* x, int B, int T, int C) {
    for (int r = 0; r < B * T; r++) { float s = 0.0f; for (int c = 0; c < C; c++) s += x[r * C + c]; sums[r] = s; }
}
__global__ void add_rowsum_kernel(float* out, float* sums, const float* a, const float* b, int N, int C) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= N) return;
    float s = 0.0f;
    for (int c = 0; c < C; c++) { out[r * C + c] = a[r * C + c] + b[r * C + c]; s += out[r * C + c]; }
    sums[r] = s;
}
void add_rowsum1(float* out, float* sums, const float* a, const float* b, int N, int C, int block_size) {
    add_rowsum_kernel<<<ceil_div(N, block_size), block_size>>>(out, sums, a, b, N, C);
}
void add_rowsum(int kernel_num, float* out, float* sums, const float* a, const float* b, int N, int C, int block_size) {
    add_rowsum1(out, sums, a, b, N, C, block_size);
}
int main() {
    int B = 8;
    int T = 256;
    int C = 64;
    float* out = (float*)malloc(B * T * C * sizeof(float));
    float* sums = (float*)malloc(B * T * sizeof(float));
    float* a = make_random_float(B * T * C);
    float* b = make_random_float(B * T * C);
    add_cpu(out, a, b, B * T * C);
    rowsum_cpu(sums, out, B, T, C);
    float *d_out, *d_sums, *d_a, *d_b;
    add_rowsum(1, d_out, d_sums, d_a, d_b, B * T, C, 128);
    return 0;
}
"""


def test_a_fused_launcher_is_checked_against_main_s_consecutive_cpu_calls(tmp_path):
    """A launcher that does what main() checks with two CPU calls (llm.c's fused residual + layernorm)
    is bound to both, as one function over main()'s arrays and sizes; the size it takes that no CPU
    call does (`N`) is what main() passes for it (`B * T`, through the dispatcher)."""
    root = _repo(tmp_path / "steps", STEPS_FILE, "fused.cu")
    rec = _record(root, "fused.cu", "add_rowsum_kernel")
    ref = rec.binding.harness_args["ref"]
    assert ref["cpu"] == "sftbuild_cpu_steps" and ref["call_args"] == ["out", "a", "b", "B", "T", "C", "sums"]
    assert "    add_cpu(out, a, b, B * T * C);\n    rowsum_cpu(sums, out, B, T, C);\n" in ref["cpu_code"]
    assert {"expr": "B * T"} in ref["launcher_map"]
    p = FR.plans(ref)[0]
    b, t, c = p["args"][3:6]
    assert FR.launcher_scalars(ref, p) == ([b, t, c, b * t], [])
    assert FR.roles(ref) == ["output", "input", "input", "output"]
    slots = rec.binding.harness_args["slots"]
    assert [s["slot"] for s in slots if s["kind"] == "int"] == [3, 2]  # N: after the CPU call's B, T, C; then C


@pytest.mark.nvcc
def test_the_harness_runs_main_s_cpu_steps_as_one_reference(tmp_path):
    root = _repo(tmp_path / "steps", STEPS_FILE, "fused.cu")
    rec = _record(root, "fused.cu", "add_rowsum_kernel")
    lib = T.load_file_harness(_build_harness(rec, tmp_path)["so"])
    ref = rec.binding.harness_args["ref"]
    p = FR.plans(ref)[0]
    host, _ = T._file_buffers(ref, p, 0, lib)
    out, a, b, sums = T.file_reference_outputs(lib, ref, p, host)
    c = p["args"][5]
    assert torch.equal(out, a + b) and torch.allclose(sums, out.view(-1, c).sum(1), rtol=1e-4, atol=1e-4)


def test_a_cuda_fault_in_a_trial_says_at_which_sizes(repo, monkeypatch):
    """An illegal address ends the record as a RuntimeError (trials._guarded_run): the verdict's detail
    starts with the sizes, block size and seed of the trial that raised it, so torch's long message
    (help text, C++ frames) cut at 500 characters cannot cut them off, and the verdict names that
    trial's row."""
    rec = _record(repo, "scale.cu", "scale_kernel")
    ref = rec.binding.harness_args["ref"]
    plans = FR.plans(ref, 2)
    p, block = [(p, b) for p in plans for b in FR.block_sizes(ref)][1]  # the second trial: the first passed
    message = "CUDA error: an illegal memory access was encountered\n" + "frame #0: c10::Error\n" * 80
    seen = []

    def trial(lib, ref_, p_, block_, seed, *a, **k):
        seen.append((p_["counts"], block_))
        if len(seen) > 1:
            raise RuntimeError(message)
        return True, {}, True

    monkeypatch.setattr(T, "load_file_harness", lambda path: types.SimpleNamespace(
        sftbuild_file_launch=types.SimpleNamespace(), sftbuild_file_reference=types.SimpleNamespace(),
        sftbuild_file_elem_bytes=types.SimpleNamespace()))
    monkeypatch.setattr(FR, "device_fields", lambda dev: {})
    monkeypatch.setattr(T, "ReferenceCache", lambda lib, ref_: types.SimpleNamespace(
        calls=0, get=lambda p_, seed: ([], [], [], 0.0)))
    monkeypatch.setattr(T, "_file_trial", trial)
    out = T._guarded_run(TrialTask("t", "cuda", "", binding=rec.binding, sos=["x.so"], shapes=2, seeds=1))
    n, c = p["args"][2], p["args"][3]
    assert out["reason"] == "illegal_address" and out["recycle"] and len(out["detail"]) == 500
    assert out["detail"].startswith(f"at N={n}, C={c}, block size {block}, seed 0: CUDA error: an illegal memory")
    assert out["trial"] == {"sizes": p["counts"], "block_size": block, "seed": 0}
    assert seen[-1] == (p["counts"], block)


def test_an_exception_a_trial_raises_carries_that_trial_s_place():
    """Every kind's adapter: the loop puts the trial's row on what it raised (loop.fault_detail); an
    exception raised outside any trial keeps its message alone."""
    from sftbuild.trial import loop

    class Faulty(loop.Adapter):
        dtypes, notes = ["float32"], {}

        def variants(self):
            return [(4, 4), (64, 64)]

        def describe(self, variant):
            return {"shape": list(variant)}

        def trial(self, t):
            if t.vi == 1:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            return True, {}

    with pytest.raises(RuntimeError) as info:
        loop.run([Faulty()], TrialTask("t", "triton", "", seeds=1))
    got = loop.fault_detail(info.value)
    assert got == {"detail": "at shape [64, 64], dtype float32, layout contiguous, seed 0: CUDA error: an illegal "
                             "memory access was encountered",
                   "trial": {"shape": [64, 64], "dtype": "float32", "layout": "contiguous", "seed": 0}}
    assert loop.fault_detail(RuntimeError("x" * 600)) == {"detail": "x" * 500}


def test_a_write_past_a_file_scope_buffer_names_it(tmp_path, monkeypatch):
    """The buffers main() allocates for the launcher are guarded like the arrays: a write past the
    end of `partial` is out_of_bounds, named, at the trial's sizes."""
    root = _repo(tmp_path / "repo", GLOBAL_FILE)
    rec = _record(root, "scale.cu", "scale_kernel")
    ref = rec.binding.harness_args["ref"]
    p = FR.plans(ref)[0]
    c = p["args"][3]

    def reference(lib, ref, p, host):
        return [2 * host[1] + (torch.arange(host[1].numel()) % c).float(), host[1].clone()]

    seen = []

    def launch(lib, ref, p, d, block, past=0):
        seen.append((len(d), d[2].numel(), float(d[2].sum())))
        d[0].copy_(2 * d[1] + (torch.arange(d[1].numel()) % c).float())
        d[2].as_strided((d[2].numel() + past,), (1,), d[2].storage_offset()).fill_(1.0)
        return 0

    monkeypatch.setattr(T, "file_reference_outputs", reference)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    lib = types.SimpleNamespace(sftbuild_file_elem_bytes=lambda k: 4)
    cache = T.ReferenceCache(lib, ref)
    monkeypatch.setattr(T, "_file_call", launch)
    ok, _, _ = T._file_trial(lib, ref, p, 64, 0, torch.device("cpu"), T.C.selected(), cache)
    n = p["scratch"][0]
    # zeros of main()'s size at first; the second run finds it as the first left it (main() does not clear it)
    assert ok and seen == [(3, n, 0.0), (3, n, float(n))]
    monkeypatch.setattr(T, "_file_call", lambda *a: launch(*a, past=3))
    ok, why, _ = T._file_trial(lib, ref, p, 64, 0, torch.device("cpu"), T.C.selected(), cache)
    assert not ok and why["reason"] == "out_of_bounds"
    assert why["why"].startswith("write past the end of partial (device-only)") and "block size 64" in why["why"]


ROWS_FILE = """#include <stdlib.h>
#include "common.h"
void rows_cpu(float* out, const float* inp, int B, int T, int C) {
    for (int i = 0; i < B * T * C; i++) out[i] = 2.0f * inp[i];
}
__global__ void rows_kernel(float* out, const float* inp, int B, int T, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = 2.0f * inp[i];  // no bounds check: main() runs T only at multiples of the block size
}
void rows1(float* out, const float* inp, int B, int T, int C, int block_size) {
    rows_kernel<<<B * T * C / block_size, block_size>>>(out, inp, B, T, C);
}
int main() {
    int B = 8;
    int T = 1024;
    int C = 768;
    float* out = (float*)malloc(B * T * C * sizeof(float));
    float* inp = make_random_float(B * T * C);
    rows_cpu(out, inp, B, T, C);
    int block_sizes[] = {32, 64, 128, 256, 512, 1024};
    return 0;
}
"""


def test_a_size_main_runs_at_multiples_of_every_block_size_stays_one_of_its_block_size(tmp_path):
    """main() runs T=1024 with every block size from 32 to 1024, so a kernel may assume T is a
    multiple of its block size (llm.c's softmax_autoregressive_backward_kernel6 writes up to the next
    multiple). Trial sizes shrink T below 1024: each is paired only with the block sizes it is a
    multiple of, the usual picks first, then the largest others. C=768 is no multiple of 512, and B=8
    of none, so neither constrains the pairs."""
    root = _repo(tmp_path / "repo", ROWS_FILE, "rows.cu")
    ref = _record(root, "rows.cu", "rows_kernel").binding.harness_args["ref"]
    t_at = ref["call_args"].index("T")
    assert FR.block_bound(ref) == [t_at]
    plans = FR.plans(ref, 3)
    assert [p["args"][t_at] for p in plans] == [512, 256, 128]  # shrunk as before: the pairs change, not the sizes
    pairs = FR.pairs(ref, plans)
    assert pairs and all(p["args"][t_at] % block == 0 for p, block in pairs)
    by_t = {}
    for p, block in pairs:
        by_t.setdefault(p["args"][t_at], []).append(block)
    assert by_t == {512: [32, 256, 512], 256: [32, 128, 256], 128: [32, 64, 128]}
    assert FR.block_sizes(ref) == [32, 256, 1024]  # without a plan: the file's picks, as before

    # main() also runs T at a size that is no multiple of its largest block size: nothing is bound
    loose = _record(_repo(tmp_path / "loose", ROWS_FILE.replace("int T = 1024;", "int T = 1000;"), "rows.cu"),
                    "rows.cu", "rows_kernel").binding.harness_args["ref"]
    assert FR.block_bound(loose) == []
    assert all(FR.block_sizes(loose, p=p) == [32, 256, 1024] for p in FR.plans(loose, 3))


@needs_llmc
def test_llmc_attention_backward_pairs_t_only_with_block_sizes_it_is_a_multiple_of():
    ref = _record(LLMC, "attention_backward.cu", "softmax_autoregressive_backward_kernel6").binding.harness_args[
        "ref"]
    t_at = ref["call_args"].index("T")
    pairs = FR.pairs(ref, FR.plans(ref, 3))
    assert pairs and all(p["args"][t_at] % block == 0 for p, block in pairs)
    assert len({block for _, block in pairs}) == 3


# ---- the file's own acceptance test (sftbuild.trial.acceptance) ----------------------------

CHECK_HEADER = REPO_HEADER + """#include <math.h>
#include <float.h>
template<class T>
void validate_out(const T* device, const T* reference, const char* name, int n, T tolerance = 1e-4) {
#ifdef LOOSE_CHECK
    float epsilon = 0.05f;
#else
    float epsilon = FLT_EPSILON;
#endif
    for (int i = 0; i < n; i++) {
        float t_eff = tolerance + fabs(reference[i]) * epsilon;
        if (fabs(reference[i] - device[i]) > t_eff) { exit(1); }
    }
}
"""
CHECKED_FILE = REPO_FILE.replace("    scale_cpu(out, inp, N, C);", """    scale_cpu(out, inp, N, C);
    float* d_out;
    cudaMalloc(&d_out, N * C * sizeof(float));
    CHECK""")


def _rules(tmp_path, check: str, header: str = CHECK_HEADER, head: str = "", name: str = "repo") -> dict:
    text = head + CHECKED_FILE.replace("CHECK", check)
    ref = _record(_repo(tmp_path / name, text, "scale.cu", header), "scale.cu", "scale_kernel").binding.harness_args[
        "ref"]
    return ref["acceptance"]


def _atols(rule) -> list:
    return [acceptance.atol_value(rule, e) for e in (2, 4)]


def test_the_files_own_test_is_read_where_main_states_it(tmp_path):
    """main()'s call names the allowance (a literal, a local it sets once, or the function's default);
    the function's own rule gives `atol + |ref| * rtol`, its epsilon chosen by the file's defines."""
    rule = _rules(tmp_path, 'validate_out(d_out, out, "out", N * C, 2e-3f);')["out"]
    assert (rule["function"], rule["rtol"], _atols(rule)) == ("validate_out", 1.1920928955078125e-07, [2e-3, 2e-3])
    rule = _rules(tmp_path, 'validate_out(d_out, out, "out", N * C);', name="default")["out"]
    assert _atols(rule) == [1e-4, 1e-4]  # the function's default allowance
    rule = _rules(tmp_path, 'float tol = sizeof(float) == 4 ? 1e-3f : 1e-1f;\n'
                            '    validate_out(d_out, out, "out", N * C, tol);', name="sized")["out"]
    assert _atols(rule) == [1e-1, 1e-3] and rule["source"].startswith("tol = sizeof(float) == 4")  # measured size
    rule = _rules(tmp_path, '#ifdef LOOSE_CHECK\n    float tol = 0.5f;\n#else\n    float tol = 1e-5f;\n#endif\n'
                            '    validate_out(d_out, out, "out", N * C, tol);', head="#define LOOSE_CHECK\n",
                  name="loose")["out"]
    assert (rule["rtol"], _atols(rule)) == (0.05, [0.5, 0.5])  # both branches the file's define selects


@pytest.mark.parametrize("check,header", [
    ('float tol = 1e-3f;\n    tol *= 10;\n    validate_out(d_out, out, "out", N * C, tol);', CHECK_HEADER),  # set twice
    ('validate_out(d_out, out, "out", N * C, argc > 1 ? 1e-3f : 1e-2f);', CHECK_HEADER),  # run-time condition
    ('validate_out(d_out, out, "out", N * C, 1e-3f);\n    validate_out(d_out, out, "out", N * C, 1e-2f);',
     CHECK_HEADER),  # two tests for one array
    ('validate_out(d_out, out, "out", N * C, sizeof(myfloat) == 4 ? 1e-3f : 1e-1f);', CHECK_HEADER),  # unknown type
    ('validate_out(d_out, out, "out", N * C, 1e-3f);',
     CHECK_HEADER.replace("tolerance + fabs(reference[i]) * epsilon", "fabs(reference[i]) * epsilon")),  # relative only
    ('validate_out(d_out, out, "out", N * C, 1e-3f);',
     CHECK_HEADER.replace("{ exit(1); }", "{ exit(1); }\n        if (fabs(device[i]) > 1e3f) { exit(1); }")),
    ('validate_out(d_out, out, "out", N * C, 1e-3f);',
     CHECK_HEADER.replace("for (int i", "tolerance *= 2;\n    for (int i")),  # the function changes it
    ('validate_out(d_out, out, "out", N * C, 1e-3f);',
     CHECK_HEADER.replace("#else\n    float epsilon = FLT_EPSILON;\n", "#elif __CUDA_ARCH__ >= 800\n"
                          "    float epsilon = FLT_EPSILON;\n")),  # epsilon under an undecided branch
])
def test_a_test_not_read_keeps_the_default_tolerance(tmp_path, check, header):
    assert _rules(tmp_path, check, header) == {}


def test_c_values_with_conditions():
    assert acceptance.c_value("ELEM == 4 ? 1e-3f : (ELEM == 2 ? 0.5f : 1e-9)", {"ELEM": 2}) == 0.5
    assert acceptance.c_value("(ELEM >= 4) ? 1e-3f : 0.1f", {"ELEM": 8}) == 1e-3
    assert acceptance.c_value("ELEM != 4 ? ELEM << 1 : 0", {"ELEM": 2}) == 4
    with pytest.raises(ValueError):
        acceptance.c_value("kernel_num <= 4 ? 1e-3f : 1e-2f", {"ELEM": 4})


def test_the_comparison_uses_the_files_rule_and_names_it():
    """llm.c layernorm_backward at bf16 (H200): dweight 39 vs 36.2181 passes main()'s own test
    (0.5 + 0.079 * 36.2 = 3.36 allowed) and failed the default; dbias -12.31 vs -10.67 fails both.
    What either accepts passes: a file's rule tighter than the default (1e-5 absolute, on trial inputs
    that are not main()'s) adds no reject of its own."""
    rule = {"function": "validate_result", "atol": "ELEM == 4 ? 1e-3f : 5e-1f", "rtol": 0.079,
            "source": "error_threshold_dparams = sizeof(floatX) == 4 ? 1e-3f : 5e-1f"}
    want = torch.tensor([36.2181, -10.67, 1.0])
    ok, stats = T.compare_file_output(torch.tensor([39.0, -10.67, 1.0]), want, 2, rule)
    assert ok and stats["rule"].startswith("the wider of the file's validate_result: 0.5 + |ref| * 0.079")
    assert not T.compare_file_output(torch.tensor([39.0, -10.67, 1.0]), want, 2)[0]  # the default rejected it
    ok, stats = T.compare_file_output(torch.tensor([36.2181, -12.31, 1.0]), want, 2, rule)
    assert not ok and stats["mismatches"] == 1
    assert T.compare_file_output(torch.tensor([0.4]), torch.tensor([0.0]), 2, rule)[0]
    assert not T.compare_file_output(torch.tensor([2e-3]), torch.tensor([0.0]), 4, rule)[0]  # fp32: 1e-3 allowed
    assert T.compare_file_output(torch.tensor([1.0 + 1e-3]), torch.tensor([1.0]), 4,
                                 {**rule, "atol": "1e-5f", "rtol": 1.2e-7})[0]  # the default's 2e-3 holds
    nan = want.clone()
    nan[0] = float("nan")
    assert not T.compare_file_output(nan, want, 2, rule)[0]  # NaN never passes, whatever the rule


@needs_llmc
def test_llmc_layernorm_backward_is_judged_by_its_own_main():
    rules = _record(LLMC, "layernorm_backward.cu", "layernorm_backward_kernel3").binding.harness_args["ref"][
        "acceptance"]
    assert sorted(rules) == ["dbias", "dinp", "dweight"]
    assert {k: (r["rtol"], _atols(r)) for k, r in rules.items()} == {
        "dinp": (0.079, [0.1, 1e-3]), "dweight": (0.079, [0.5, 1e-3]), "dbias": (0.079, [0.5, 1e-3])}
    # kernel1's launcher takes float*: main() runs it only without ENABLE_BF16, so its test for this
    # build (sizeof(floatX) of bf16) is not the launcher's, and the default stays
    assert _record(LLMC, "layernorm_backward.cu", "layernorm_backward_kernel1").binding.harness_args["ref"][
        "acceptance"] == {}


@needs_llmc
@pytest.mark.parametrize("file,kernel,arrays,atol2,rtol", [
    ("encoder_forward.cu", "encoder_forward_kernel2", ["out"], 1e-2, 0.079),  # #if !defined(ENABLE_BF16) in main()
    ("fused_residual_forward.cu", "fused_residual_forward_kernel5", ["mean", "normed", "residual", "rstd"], 5e-2,
     0.079),  # std::is_same_v<floatX, float>
    ("matmul_backward_bias.cu", "matmul_backward_bias_kernel1", ["dbias"], 1.0, 0.079),
    ("layernorm_forward.cu", "layernorm_forward_kernel3", ["mean", "out", "rstd"], 1e-5, 1.1920928955078125e-07),
    ("attention_forward.cu", "attention_softmax_kernel1", [], None, None),  # by kernel_num: not read
])
def test_llmc_acceptance_rules(file, kernel, arrays, atol2, rtol):
    rules = _record(LLMC, file, kernel).binding.harness_args["ref"]["acceptance"]
    assert sorted(rules) == arrays
    assert all(r["rtol"] == rtol and acceptance.atol_value(r, 2) == pytest.approx(atol2) for r in rules.values())


@needs_llmc
def test_llmc_layernorm_backward_kernel8_leaves_the_tail_of_c_unwritten_at_mains_own_size():
    """The bf16 run's `dinp: 28524 elements off, e.g. [809577] 0 vs -1.77265 (at B=8, T=64, C=1600, block
    size 32)` is the kernel's: each warp iteration covers 32 * x128::size channels (256 at bf16, 128 at
    fp32) and it runs C / 256 = 6 of them, so channels 1536..1599 of every row keep the zeros main()
    left in dinp. C=1600 is main()'s own size (trials keep it: 1600 halves to 800, no multiple of 64),
    and main()'s own test would fail it too (0.1 + 0.079 * 1.77 allowed)."""
    ref = _record(LLMC, "layernorm_backward.cu", "layernorm_backward_kernel8").binding.harness_args["ref"]
    c_at = ref["call_args"].index("C")
    assert {p["args"][c_at] for p, _ in FR.pairs(ref, FR.plans(ref))} == {1600}
    assert 809577 % 1600 >= 1600 // 256 * 256
    code = (LLMC / "layernorm_backward.cu").read_text()
    assert "int iterations_C = C / C_per_iteration;" in code
    rule = ref["acceptance"]["dinp"]
    assert not T.compare_file_output(torch.tensor([0.0]), torch.tensor([-1.77265]), 2, rule)[0]


@needs_llmc
def test_llmc_harnesses_render_as_before():
    """The acceptance rule is read by the trials only: every llm.c record's harness source is the one
    it was without it, so what compiled still compiles."""
    n = 0
    for f in sorted(LLMC.glob("*.cu")):
        src = f.read_bytes()
        dirs = include_dirs(LLMC, f.name)
        headers = local_headers(LLMC, f.name, dirs, src)
        for k in extract_kernels(src, tested=frozenset(macros_tested(headers.values())))[0]:
            rec = _record(LLMC, f.name, k.name)
            b = rec.binding
            if not b or b.how != "file_reference":
                continue
            ref = b.harness_args["ref"]
            bare = {**ref}
            bare.pop("acceptance"), bare.pop("acceptance_text")
            plain = dataclasses.replace(rec, binding=dataclasses.replace(
                b, launch={**b.launch, "harness_args": {**b.harness_args, "ref": bare}}))
            dtypes = list(b.dtypes)
            assert H.render(rec, H.checks(b)[0], dtypes) == H.render(plain, H.checks(b)[0], dtypes), k.name
            n += 1
    assert n >= 60


@pytest.mark.nvcc
@needs_llmc
def test_llmc_layernorm_backward_harness_still_builds(tmp_path):
    _build_harness(_record(LLMC, "layernorm_backward.cu", "layernorm_backward_kernel3"), tmp_path)
