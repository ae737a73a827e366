"""A record's headers are cut to what its kernel and launcher use; a compile failure says whose it is."""
from __future__ import annotations

import pytest

from sftbuild.harvest.cuda_extract import extract_kernels, prune_headers
from sftbuild.trial.compile import blame, compile_task
from tests.conftest import HAS_NVCC

# a header whose unrelated host code fails on CUDA 13 (`cudaMemAdvise` took an int device before it)
HEADER = """#pragma once
#include <cuda_runtime.h>
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define checked(call) check_status((call), __LINE__)
struct Pair { float a, b; };
inline void check_status(cudaError_t e, int line) { if (e != cudaSuccess) { (void)line; } }
__device__ inline float twice(float x) { return 2.f * x; }
inline void advise(void* p, size_t n) {
  checked(cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, 0));
}
"""
KERNEL = b"""#include "util.cuh"
__global__ void scale_kernel(float* out, const float* inp, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = twice(inp[i]);
}
void scale(float* out, const float* inp, int n) {
  scale_kernel<<<CEIL_DIV(n, 256), 256>>>(out, inp, n);
  checked(cudaGetLastError());
}
"""


def test_headers_keep_what_the_kernel_and_launcher_use_line_for_line():
    k = extract_kernels(KERNEL)[0][0]
    assert k.launcher["name"] == "scale" and k.launcher["params"] == ["float* out", "const float* inp", "int n"]
    assert "scale_kernel<<<" in k.launcher["code"] and "__global__" not in k.launcher["code"]
    cut = prune_headers({"util.cuh": HEADER}, k.code + k.launcher["code"])["util.cuh"]
    assert cut.count("\n") == HEADER.count("\n")
    assert "cudaMemAdvise" not in cut and "inline void advise" not in cut
    # reached through the launcher's macro, and through the kernel; types and macros always stay
    assert "inline void check_status" in cut and "twice(float x)" in cut and "struct Pair" in cut


def test_blame_names_whose_failure_it_is():
    assert blame('kernel.cuh(2): catastrophic error: cannot open source file "curand_kernel.h"', "", {})[0] \
        == "missing_header"
    assert blame("/usr/local/cuda/include/crt/x.h(9): error: bad", "", {}) == \
        ("toolchain", "/usr/local/cuda/include/crt/x.h(9): bad")
    reason, where = blame("tree/util.cuh(9): error: no suitable constructor", KERNEL.decode(), {"util.cuh": HEADER})
    assert reason == "closure_error" and where.startswith("tree/util.cuh(9)") and "advise" in where
    assert blame("kernel.cuh(4): error: identifier \"y\" is undefined", KERNEL.decode(), {})[0] == "compile_error"


@pytest.mark.nvcc
@pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc")
def test_a_cut_header_compiles_where_the_whole_one_fails_on_code_the_kernel_never_uses(compile_cache):
    k = extract_kernels(KERNEL)[0][0]
    task = {"id": "t", "code": k.code, "harness": None, "include_sets": [], "arch": "sm_90", "timeout": 60,
            "cache_dir": str(compile_cache), "include_dirs": ["."]}
    whole = compile_task({**task, "headers": {"util.cuh": HEADER}})
    if whole["ok"]:
        pytest.skip("this toolkit still takes an int device in cudaMemAdvise (before CUDA 13)")
    assert whole["reason"] == "closure_error" and "util.cuh(9)" in whole["where"] and "advise" in whole["where"]
    cut = prune_headers({"util.cuh": HEADER}, k.code)
    assert compile_task({**task, "headers": cut})["ok"]


def test_include_folders_anywhere_in_the_tree_are_searched(tmp_path):
    from sftbuild.harvest.cuda_extract import include_dirs, local_headers

    (tmp_path / "csrc" / "includes").mkdir(parents=True)
    (tmp_path / "csrc" / "ops").mkdir()
    (tmp_path / "csrc" / "includes" / "layers.h").write_text("#pragma once\n#define WIDTH 4\n")
    src = b'#include "layers.h"\n__global__ void k(float* x) { x[0] = WIDTH; }\n'
    (tmp_path / "csrc" / "ops" / "k.cu").write_bytes(src)
    dirs = include_dirs(tmp_path, "csrc/ops/k.cu")
    assert "csrc/includes" in dirs  # a build's -Icsrc/includes, which the tree does not state
    assert list(local_headers(tmp_path, "csrc/ops/k.cu", dirs, src)) == ["csrc/includes/layers.h"]


def test_an_explicit_specialization_keeps_its_primary_templates_declaration():
    src = (b"template <typename T>\n__global__ void scale(T* x, int n);\n\n"
           b"template <>\n__global__ void scale<float>(float* x, int n) { x[threadIdx.x] *= 2.f; }\n")
    (k,), _ = extract_kernels(src)
    assert k.code.index("__global__ void scale(T* x, int n);") < k.code.index("scale<float>")
