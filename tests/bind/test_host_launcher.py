"""The host-launcher binder's CPU half: roles, shortlists, mappings and the harnesses it builds.

Test data: an excerpt of llm.c's train_gpt2_fp32.cu (tests/data/harvest/launchers/llmc, MIT), whose
launchers take raw pointers and B, T, C / N sizes and whose layer norm writes mean and rstd too."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sftbuild.harvest.cuda_extract import extract_kernels
from sftbuild.bind.binders import BINDERS
from sftbuild.bind.binders.launched import (HostLauncher, call_args, dimension_values, dtypes_of, mappings, roles,
                                           shortlist, size_value, unprobeable, written)
from sftbuild.record import Record
from tests.conftest import HAS_NVCC

LLMC = Path(__file__).resolve().parents[1] / "data" / "harvest" / "launchers" / "llmc" / "train_gpt2_fp32_excerpt.cu"


@pytest.fixture(scope="module")
def records() -> dict[str, Record]:
    """The excerpt's kernels as records, by launcher name."""
    out = {}
    for k in extract_kernels(LLMC.read_bytes())[0]:
        entry = {"kernels": [k.name], "params": k.params, "launch_sites": k.launch_sites, "includes": k.includes,
                 "include_sets": [], "template": k.template, "launcher": k.launcher}
        out[k.launcher["name"]] = Record(language="cuda", code=k.code, source="t", entry=entry,
                                         provenance={"path": "train_gpt2_fp32.cu"})
    return out


def test_every_written_pointer_is_an_output_and_read_ones_are_inputs_const_or_not(records):
    rec = records["layernorm_forward"]
    # llm.c's fp32 launcher takes `float* inp`: not const, yet only read by the kernel
    assert written(rec) == {"out", "mean", "rstd"}
    found = roles(rec.entry["launcher"]["params"], written(rec))
    assert [(r["name"], r["role"]) for r in found] == [
        ("out", "out"), ("mean", "out"), ("rstd", "out"), ("inp", "in"), ("weight", "in"), ("bias", "in"),
        ("B", "size"), ("T", "size"), ("C", "size")]
    assert written(records["residual_forward"]) == {"out"}


def test_shortlists_come_from_names_and_data_flow(records):
    def ops_for(name):
        rec = records[name]
        return shortlist(rec, roles(rec.entry["launcher"]["params"], written(rec)))

    assert ops_for("layernorm_forward")[0] == "layer_norm"
    assert "gelu_tanh" in ops_for("gelu_forward")
    assert "add" in ops_for("residual_forward")  # no name says add: one size over flat buffers, two inputs


def test_mappings_put_tensors_on_pointers_and_dimensions_on_sizes_best_first(records):
    rec = records["layernorm_forward"]
    found = roles(rec.entry["launcher"]["params"], written(rec))
    x, w, b = {"name": "x", "shape": [6, 10]}, {"name": "w", "shape": [10]}, {"name": "b", "shape": [10]}
    maps = list(mappings(found, [x, w, b], [{"shape": [6, 10]}], {}))
    first = maps[0]
    # out is the op's output (t:0), mean and rstd are written scratch, inp/weight/bias the inputs
    assert first["ptrs"] == ["t:0", "scratch", "scratch", "t:1", "t:2", "t:3"]
    assert [size_value(e, [_S([6, 10]), _S([6, 10]), _S([10]), _S([10])]) for e in first["ints"]] == [6, 1, 10]
    # sizes covering a tensor exactly come first (B=T=rows, 6 x 6 x 10, only after every one of those),
    # and none runs past every buffer (a wrong guess there could fault the GPU for every later trial)
    tensors = [_S([6, 10]), _S([6, 10]), _S([10]), _S([10])]
    totals = [size_value(m["ints"][0], tensors) * size_value(m["ints"][1], tensors)
              * size_value(m["ints"][2], tensors) for m in maps]
    later = [t not in (60, 10) for t in totals]
    assert later == sorted(later) and any(later) and max(totals) <= 4 * 60
    assert dimension_values("C", [6, 10], 1, [x], [{"shape": [6, 10]}])[0] == "dim:1:-1"
    args = call_args(rec.entry["launcher"]["params"], first)
    assert args[0] == "(float*)ptrs[0]" and "scratch_bytes" in args[1] and args[3] == "(float*)ptrs[1]"


class _S:
    def __init__(self, shape):
        self.shape = shape


def test_the_binder_plans_one_probe_per_record_and_says_why_not_elsewhere(records):
    binder = BINDERS.get("host_launcher")()
    assert binder.version and binder.runs_code and binder.bind(records["gelu_forward"]) is None
    task = binder.plan(records["gelu_forward"])
    assert task.dtypes == ["float32"] and task.shortlist[0].startswith("gelu")
    assert "sftbuild_raw_call" in task.harness and "gelu_forward((float*)ptrs[0], (const float*)ptrs[1]" \
        not in task.harness  # pointers go in as the launcher declares them, not re-qualified
    assert unprobeable({"name": "f", "params": ["float* out", "std::pair<int, int> shape"], "code": ""}) \
        == "launcher f takes a parameter with no role: shape"
    # a slice's stride (llm.c's adamw_update) is a size: the whole buffer first, then a row
    strided = roles(["float* out", "const float* x", "size_t count", "ptrdiff_t w_stride"])
    assert [r["role"] for r in strided] == ["out", "in", "size", "size"]
    assert dimension_values("w_stride", [4, 8], 1, [{"shape": [4, 8]}], [{"shape": [4, 8]}])[:2] == \
        ["numel:1", "dim:1:-1"]
    flagged = roles(["float* out", "const float* x", "bool pre_ln", "int n"])
    assert [r["role"] for r in flagged] == ["out", "in", "flag", "size"]
    flags = [m["ints"][0] for m in mappings(flagged, [{"name": "x", "shape": [8]}], [{"shape": [8]}], {})]
    assert flags[0] == "const:0" and "const:1" in flags
    assert "an extension function" in unprobeable({"name": "f", "params": ["torch::Tensor x", "float* y"], "code": ""})
    assert HostLauncher().why_not(Record(language="cuda", code="", source="t", entry={"kernels": ["k"]})) \
        == "no host function launches this kernel alone"


@pytest.mark.nvcc
@pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc")
def test_the_validate_harness_of_a_probed_launcher_compiles(records, compile_cache):
    from sftbuild.trial import harness
    from sftbuild.trial.compile import compile_task

    rec = records["layernorm_forward"]
    found = roles(rec.entry["launcher"]["params"], written(rec))
    first = next(mappings(found, [{"name": "x", "shape": [6, 10]}, {"name": "w", "shape": [10]},
                                  {"name": "b", "shape": [10]}], [{"shape": [6, 10]}], {}))
    rec = dataclasses.replace(rec, binding={"kind": "op", "op": "layer_norm", "harness": "host_launcher", "harness_args": first})
    src = harness.render(rec, {"op": "layer_norm"}, ["float32"])
    res = compile_task({"id": "t", "code": rec.code, "harness": src, "include_sets": [], "arch": "sm_90",
                        "timeout": 120, "cache_dir": str(compile_cache), "link": False})
    assert res["ok"], res.get("log")


DEEPSPEED = LLMC.parents[1] / "deepspeed" / "gelu_kernels.cu"  # DeepSpeed's, Apache-2.0


def test_a_template_launcher_is_instantiated_at_the_types_its_file_instantiates():
    kernels = extract_kernels(DEEPSPEED.read_bytes())[0]
    launcher = next(k.launcher for k in kernels if k.name == "fused_bias_gelu")
    assert launcher["name"] == "launch_bias_gelu" and launcher["template"] == ["T"]
    assert launcher["instantiated"] == ["__half", "float"] and unprobeable(launcher) is None
    rec = Record(language="cuda", code="", source="t", entry={"kernels": ["fused_bias_gelu"], "launcher": launcher})
    task = HostLauncher().plan(rec)
    assert task.dtypes == ["float32", "float16"] and set(task.harnesses) == {"float32", "float16"}
    assert "launch_bias_gelu<__half>((__half*)ptrs[0]" in task.harness
    assert "sftbuild_raw_call_float32" in task.harness and "bias_gelu" in task.shortlist
    found = task.roles
    assert [r["role"] for r in found] == ["in", "in", "out", "size", "size", "stream"]
    maps = list(mappings(found, [{"name": "x", "shape": [4, 8]}, {"name": "b", "shape": [8]}], [{"shape": [4, 8]}], {}))
    assert maps[0]["ptrs"] == ["t:1", "t:2", "t:0"] and maps[0]["ints"][0] == "dim:1:-1"
    args = call_args(launcher["params"], maps[0], launcher["template"])
    assert args[:3] == ["(U*)ptrs[1]", "(U*)ptrs[2]", "(U*)ptrs[0]"] and args[-1] == "stream"


SPECIALIZED = b"""#include <cuda_fp16.h>
template <typename T> void launch_add(T* out, const T* a, const T* b, int n, cudaStream_t& stream);
__global__ void add_kernel(float* out, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a[i] + b[i];
}
__global__ void add_kernel(__half* out, const __half* a, const __half* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = __hadd(a[i], b[i]);
}
template <>
void launch_add<float>(float* out, const float* a, const float* b, int n, cudaStream_t& stream) {
  add_kernel<<<(n + 255) / 256, 256, 0, stream>>>(out, a, b, n);
}
template <>
void launch_add<__half>(__half* out, const __half* a, const __half* b, int n, cudaStream_t& stream) {
  add_kernel<<<(n + 255) / 256, 256, 0, stream>>>(out, a, b, n);
}
"""


def test_each_overload_of_a_kernel_is_launched_by_the_specialization_of_its_types():
    kernels = extract_kernels(SPECIALIZED)[0]
    calls = {k.params[0]: k.launcher["call"] for k in kernels}
    assert calls == {"float* out": "launch_add<float>", "__half* out": "launch_add<__half>"}
    half = next(k for k in kernels if k.params[0] == "__half* out")
    rec = Record(language="cuda", code=half.code, source="t",
                 entry={"kernels": ["add_kernel"], "launcher": half.launcher})
    task = HostLauncher().plan(rec)
    assert task.dtypes == ["float16"] and "add" in task.shortlist
    # a stream taken by reference gets a variable of the harness's
    assert "launch_add<__half>((__half*)ptrs[0], (__half*)ptrs[1], (__half*)ptrs[2], (int)ints[0], sftbuild_stream)" \
        in task.harness


def _emulated_layernorm(broken: bool = False, vector: int = 1):
    """llm.c's layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C) on the CPU, reading and
    writing the probe's buffers by address as the compiled launcher would (`broken`: forgets the bias;
    `vector`: writes each row in vectors of that many elements, leaving a shorter tail unwritten)."""
    import ctypes

    import numpy as np

    def at(addr, n):
        return np.ctypeslib.as_array((ctypes.c_float * n).from_address(addr))

    def fn(ptrs, ints, floats):
        n, c = ints[0] * ints[1], ints[2]
        x = at(ptrs[3], n * c).reshape(n, c).astype(np.float64)
        m, s = x.mean(1), 1 / np.sqrt(x.var(1) + 1e-5)
        y = (x - m[:, None]) * s[:, None] * at(ptrs[4], c) + (0 if broken else at(ptrs[5], c))
        at(ptrs[0], n * c).reshape(n, c)[:, :c - c % vector] = y[:, :c - c % vector]
        at(ptrs[1], n)[:], at(ptrs[2], n)[:] = m, s
        return 0
    return fn


@pytest.mark.parametrize("broken", [False, True])
def test_the_probe_finds_layer_norm_through_the_launcher_and_rejects_its_broken_twin(records, broken):
    import time

    from sftbuild.bind import launcher_probe

    task = HostLauncher().plan(records["layernorm_forward"])
    task = dataclasses.replace(task, device="cpu")
    from sftbuild import ops

    found, why = launcher_probe._try_op({"float32": _emulated_layernorm(broken)}, ops.get("layer_norm"), task,
                                        time.monotonic() + 60)
    if broken:
        assert found is None and "worst error" in why
    else:
        assert found["op"] == "layer_norm" and found["harness"] == "host_launcher" and found["dtypes"] == ["float32"]
        assert found["harness_args"]["ptrs"] == ["t:0", "scratch", "scratch", "t:1", "t:2", "t:3"]
        assert len(found["evidence"]["shapes"]) >= 3


def test_sizes_are_read_only_from_dimensions_the_ops_tensors_have(records):
    # poly_norm's bias is 0-d: neither C (a last dimension) nor any size may be read from it
    rec = records["layernorm_forward"]
    found = roles(rec.entry["launcher"]["params"], written(rec))
    ins = [{"name": "x", "shape": [6, 10]}, {"name": "w", "shape": [3]}, {"name": "b", "shape": []}]
    tensors = [_S([6, 10]), _S([6, 10]), _S([3]), _S([])]
    maps = list(mappings(found, ins, [{"shape": [6, 10]}], {}))
    assert maps and all(size_value(e, tensors) >= 0 for m in maps for e in m["ints"])


@pytest.mark.nvcc
@pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc")
def test_a_launchers_own_assert_refuses_the_probes_sizes_without_ending_its_process(records, compile_cache):
    import ctypes

    from sftbuild.bind.binders.launched import DIVIDED_BY_ZERO, REFUSED
    from sftbuild.trial.compile import compile_task

    from sftbuild.trial.trials import load_file_harness

    # as llm.c's gelu_forward asserts `N % (block_size * x128::size) == 0`; the assert fails before any
    # CUDA call, so the entry answers without a GPU. A helper it never calls names a library function
    # nothing links (DeepSpeed's context.h creates a cuBLAS handle): the harness still loads.
    rec = records["layernorm_forward"]
    launcher = {**rec.entry["launcher"], "code": rec.entry["launcher"]["code"].replace(
        "const int N = B * T;", "const int N = B * T; assert(N % 2 == 0); volatile int g = 64 / (C - 8);")
        + '\nextern "C" int sftbuild_absent(void);\nint never_called() { return sftbuild_absent(); }\n'}
    task = HostLauncher().plan(Record(language="cuda", code=rec.code, source="t",
                                      entry={**rec.entry, "launcher": launcher}))
    res = compile_task({"id": "t", "code": task.code, "harness": task.harness, "include_sets": [],
                        "arch": "sm_90", "timeout": 120, "cache_dir": str(compile_cache), "link": True})
    assert res["ok"], res.get("log")
    with pytest.raises(OSError, match="sftbuild_absent"):
        ctypes.CDLL(res["so"])
    call = load_file_harness(res["so"]).sftbuild_raw_call_float32
    odd = (ctypes.c_longlong * 3)(3, 1, 8)
    assert call((ctypes.c_void_p * 6)(), odd, (ctypes.c_double * 1)()) == REFUSED
    # a host division by zero at a size guess (DeepSpeed's attn_softmax grid) answers too, twice over
    zero = (ctypes.c_longlong * 3)(2, 1, 8)
    assert [call((ctypes.c_void_p * 6)(), zero, (ctypes.c_double * 1)()) for _ in range(2)] == [DIVIDED_BY_ZERO] * 2


def test_token_ids_go_only_to_an_integer_pointer_and_values_to_float_ones():
    # llm.c's encoder_forward(out, inp, wte, B, T, C): a float table read as ids would index far past it
    found = roles(["float* out", "const int* inp", "const float* wte", "int B", "int T", "int C"])
    ins = [{"name": "weight", "shape": [50, 8], "int": False}, {"name": "ids", "shape": [12], "int": True}]
    maps = list(mappings(found, ins, [{"shape": [12, 8]}], {}))
    assert maps and {tuple(m["ptrs"]) for m in maps} == {("t:0", "t:2", "t:1")}


def test_a_launcher_that_leaves_a_rows_tail_unwritten_binds_at_aligned_shapes_kept_as_a_constraint(records):
    # DeepSpeed's kernels load float4s: at a last dimension of 33 the tail stays NaN
    import time

    from sftbuild import ops
    from sftbuild.bind import launcher_probe

    task = dataclasses.replace(HostLauncher().plan(records["layernorm_forward"]), device="cpu")
    found, why = launcher_probe._try_op({"float32": _emulated_layernorm(vector=4)}, ops.get("layer_norm"), task,
                                        time.monotonic() + 60)
    assert found and found["constraints"] == {"multiple": {"-1": 4}}, why
    assert all(s[-1] % 4 == 0 for s in found["evidence"]["shapes"])
    assert ops.fits((7, 1024), found["constraints"]) and not ops.fits((3, 33), found["constraints"])


SEVERAL = b"""#include <cublas_v2.h>
#define LAUNCH_ROW(TPB) row_max<TPB><<<rows, TPB, 0, stream>>>(out, x, cols);
#define LAUNCH_ANY(TPB) if (cols <= TPB) { LAUNCH_ROW(TPB) }
template <int TPB>
__global__ void row_max(float* out, const float* x, int cols) {
  float m = x[blockIdx.x * cols]; for (int c = 1; c < cols; c++) m = fmaxf(m, x[blockIdx.x * cols + c]);
  out[blockIdx.x] = m;
}
__global__ void sub_max(float* y, const float* x, const float* m, int cols) {
  int r = blockIdx.x; for (int c = threadIdx.x; c < cols; c += blockDim.x) y[r * cols + c] = x[r * cols + c] - m[r];
}
__global__ void scale(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] *= 2.f; }
void launch_row_max(float* out, const float* x, int rows, int cols, cudaStream_t stream) { LAUNCH_ANY(128) }
void centre(float* y, float* scratch, const float* x, int rows, int cols, cudaStream_t stream) {
  row_max<256><<<rows, 256, 0, stream>>>(scratch, x, cols);
  sub_max<<<rows, 256, 0, stream>>>(y, x, scratch, cols);
}
void scaled(cublasHandle_t h, float* y, int n) { scale<<<1, 256>>>(y, n); sub_max<<<1, 1>>>(y, y, y, n); cublasSscal(h, n, 0, y, 1); }
"""


def test_a_launcher_running_several_kernels_makes_one_record_and_a_macro_launch_has_its_host_function():
    kernels = {k.name: k for k in extract_kernels(SEVERAL)[0]}
    # launched through two macros, from the host function that expands them
    assert kernels["row_max"].launcher["name"] == "launch_row_max" and "launches" not in kernels["row_max"].launcher
    centre = kernels["sub_max"].launcher  # runs row_max too: both kernels are the record's code, not the launcher's
    assert centre["name"] == "centre" and centre["launches"] == ["row_max"]
    assert "__global__ void row_max" in kernels["sub_max"].code and "__global__" not in centre["code"]
    assert kernels["scale"].launcher is None  # its only launcher calls cuBLAS too: that work is no kernel's


UNLAUNCHED = b"""template <typename T>
__global__ void scale_shift(T* y, const T* x, float a, int rows, int cols) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) y[i] = (T)((float)x[i] * a + 1.f);
}
__global__ void row_sum(float* y, const float* x, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.f; __syncthreads();
  if (threadIdx.x == 0) y[blockIdx.x] = s[0];
}
"""


def test_a_flat_kernel_no_one_launches_gets_a_launcher_of_ours_covering_its_bound():
    kernels = {k.name: k for k in extract_kernels(UNLAUNCHED)[0]}
    ours = kernels["scale_shift"].launcher
    assert ours["generated"] == "ours: a flat grid over rows * cols at 256 threads a block"
    assert "scale_shift<T><<<((rows * cols) + 255) / 256, 256>>>(y, x, a, rows, cols);" in ours["code"]
    assert ours["template"] == ["T"] and unprobeable(ours) is None
    assert kernels["row_sum"].launcher is None  # shared memory and a barrier: its grid is the kernel's own design
    (bounded,), _ = extract_kernels(b"__global__ void __launch_bounds__(128) f(float* y, int n) {\n"
                                    b"  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 1.f;\n}\n")
    assert "f<<<((n) + 127) / 128, 128>>>(y, n);" in bounded.launcher["code"]  # within its launch bounds
    rec = Record(language="cuda", code=kernels["scale_shift"].code, source="t",
                 entry={"kernels": ["scale_shift"], "launcher": ours, "params": kernels["scale_shift"].params})
    task = HostLauncher().plan(rec)
    assert task and "sftbuild_launch_scale_shift<__half>((__half*)ptrs[0]" in task.harness


SPECIALIZED_SIBLING = b"""template <typename T> __global__ void copy_rows(T* y, const T* x, int n);
template <> __global__ void copy_rows<float>(float* y, const float* x, int n) { y[threadIdx.x] = x[threadIdx.x]; }
__global__ void copy_rows_v2(float* y, const float* x, int n) { y[threadIdx.x] = 2.f * x[threadIdx.x]; }
void launch_copy_rows(float* y, const float* x, int n, bool v2) {
  if (v2) copy_rows_v2<<<1, 32>>>(y, x, n); else copy_rows<float><<<1, 32>>>(y, x, n);
}
"""


def test_a_sibling_kernel_that_is_an_explicit_specialization_brings_its_primary_template():
    v2 = next(k for k in extract_kernels(SPECIALIZED_SIBLING)[0] if k.name == "copy_rows_v2")
    assert v2.launcher["launches"] == ["copy_rows"]
    assert v2.code.index("template <typename T> __global__ void copy_rows(") < v2.code.index("template <>")


MACRO_INSTANTIATED = b"""#include <cuda_fp16.h>
template <typename T> __global__ void neg(T* y, const T* x, int n) { int i = threadIdx.x; if (i < n) y[i] = -x[i]; }
template <typename T> void launch_neg(T* y, const T* x, int n, cudaStream_t s) { neg<T><<<1, 256, 0, s>>>(y, x, n); }
#define INSTANTIATE_NEG(T) template void launch_neg<T>(T*, const T*, int, cudaStream_t);
INSTANTIATE_NEG(__half)
INSTANTIATE_NEG(float);
"""


def test_a_template_launcher_instantiated_through_a_macro_is_probed_at_those_types():
    (k,), _ = extract_kernels(MACRO_INSTANTIATED)
    assert k.launcher["instantiated"] == ["__half", "float"]
    assert dtypes_of(roles(k.launcher["params"]), k.launcher) == ["float32", "float16"]
