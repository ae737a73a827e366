"""Real CUDA repos: llm.c's dev/cuda files (extraction only, no builds), a repo's own headers and
include folders on the record, closures that keep file-scope aliases and structs, and hostile includes."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from sftbuild.harvest import stage as harvest
from sftbuild.harvest.cuda_extract import extract_kernels, include_dirs, local_headers, macros_tested, safe_rel

LLMC = Path("/work/shared/corpora/llmc-dev-cuda")
needs_llmc = pytest.mark.skipif(not LLMC.is_dir(), reason="llm.c dev/cuda corpus not on this machine")


def _kernels(name: str) -> dict:
    return {k.name: k for k in extract_kernels((LLMC / name).read_bytes())[0]}


@needs_llmc
def test_closure_keeps_namespace_aliases_and_struct_semicolons():
    k = _kernels("classifier_fused.cu")["fused_classifier_kernel1"]
    assert "namespace cg = cooperative_groups;" in k.code  # the file-scope alias prepare_softmax needs
    k = _kernels("softmax_forward.cu")["softmax_forward_online_kernel2"]
    start = k.code.index("struct __align__(8) SumMax")
    assert k.code[start:].split("}", 1)[1].lstrip().startswith(";")


def test_closure_keeps_using_declarations():
    src = b"""#include <cstdio>
using namespace std;
using std::min;
namespace cg = cooperative_groups;
__device__ float f(float x) { return min(x, 1.0f); }
__global__ void k(float* y, int n) { cg::thread_block b = cg::this_thread_block(); y[0] = f(y[0]); }
"""
    code = extract_kernels(src)[0][0].code
    assert "using namespace std;" in code and "using std::min;" in code and "namespace cg =" in code


@needs_llmc
@pytest.mark.parametrize("file,kernel,launcher,cpu", [
    ("gelu_forward.cu", "gelu_forward_kernel2", "gelu_forward2", "gelu_forward_cpu"),
    ("layernorm_forward.cu", "layernorm_forward_kernel3", "layernorm_forward3", "layernorm_forward_cpu"),
    ("softmax_forward.cu", "softmax_forward_online_kernel2", "softmax_forward_online2", "softmax_forward_cpu"),
])
def test_file_reference_found_with_launcher_in_the_code(file, kernel, launcher, cpu):
    k = _kernels(file)[kernel]
    ref = k.file_reference
    assert ref["launcher"] == launcher and ref["cpu"] == cpu
    assert f"void {launcher}(" in k.code and re.search(kernel + r"\s*<<<", k.code)  # what is validated is emitted
    assert f"void {cpu}(" not in k.code and f"void {cpu}(" in ref["cpu_code"]
    assert ref["trailing"] == ["block_size"] and ref["block_sizes"] == [32, 64, 128, 256, 512, 1024]
    assert dict((n, e) for n, e, _ in ref["scalars"])["B"] == "8"
    gens = {b["arg"]: b["gen"] for b in ref["buffers"]}
    assert gens["inp"] == "uniform" and gens["out"] == "empty"


@needs_llmc
def test_launcher_of_several_kernels_makes_one_closure():
    ks = _kernels("layernorm_forward.cu")
    assert ks["mean_kernel"].code == ks["rstd_kernel"].code == ks["normalization_kernel"].code
    assert "layernorm_forward2(" in ks["mean_kernel"].code


CONFIGURED = b"""#include <stdio.h>
#define ENABLE_BF16
#define UNUSED_FLAG 1
#define ROWS 4
#include "common.h"
#define LATE_FLAG
__global__ void k(floatX* y, int n) { int i = threadIdx.x; if (i < n) y[i] = (floatX)(float)ROWS; }
"""
CONFIG_HEADER = """#pragma once
#if defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#elif defined(ENABLE_FP16) // half
typedef half floatX;
#else
typedef float floatX;
#endif
#ifdef LATE_FLAG
#endif
"""


def test_a_define_that_configures_the_files_own_header_stays_before_its_include():
    """`#define ENABLE_BF16` before `#include "common.h"` picks common.h's floatX: the closure keeps it
    there (the kernel never names it). A define the headers do not test is left out; one the code
    uses (ROWS) is emitted where it was, before the include; one after the last include (LATE_FLAG)
    configures nothing the include declared, and stays out."""
    tested = frozenset(macros_tested([CONFIG_HEADER]))
    assert {"ENABLE_BF16", "ENABLE_FP16", "LATE_FLAG"} <= tested and "defined" not in tested and "half" not in tested
    code = extract_kernels(CONFIGURED, tested=tested)[0][0].code
    assert code.index("#define ENABLE_BF16") < code.index("#define ROWS") < code.index('#include "common.h"')
    assert "UNUSED_FLAG" not in code and "LATE_FLAG" not in code
    plain = extract_kernels(CONFIGURED)[0][0].code  # headers unknown: only what the code names
    assert "ENABLE_BF16" not in plain and plain.index("#define ROWS") < plain.index('#include "common.h"')


def _repo(tmp_path, source: str) -> str:
    """A repo of one llm.c file with the header and licence it comes with."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for f in (source, "common.h", "LICENSE"):
        shutil.copy(LLMC / f, repo / f)
    return str(repo)


@needs_llmc
def test_harvest_keeps_the_defines_llmc_files_configure_common_h_with(ctx, tmp_path):
    harvest.run(ctx, [_repo(tmp_path, "layernorm_backward.cu")])
    recs = {r.name: r for r in ctx.store.records()}
    code = recs["layernorm_backward_kernel4"].code
    assert code.index("#define ENABLE_BF16") < code.index('#include "common.h"')
    ref = recs["layernorm_backward_kernel10"].entry["file_reference"]
    assert ref["block_sizes"] == [32, 64, 128, 256, 512, 1024]  # main()'s `/*768,*/` is commented out
    # the binding names the dtypes the file builds its launcher's arrays in: floatX is bf16 here
    from sftbuild.bind.binders.file_reference import FileReference
    assert FileReference().bind(recs["layernorm_backward_kernel4"])["dtypes"][0] == "bfloat16"


@needs_llmc
def test_harvest_stores_headers_and_include_dirs(ctx, tmp_path):
    stats = harvest.run(ctx, [_repo(tmp_path, "gelu_forward.cu")])
    assert stats["errors"] == {}
    recs = list(ctx.store.records())
    assert {r.name for r in recs} == {"gelu_forward_kernel1", "gelu_forward_kernel2"}
    for r in recs:
        assert r.entry["include_dirs"] == ["."]
        kept, full = r.entry["headers"]["common.h"], (LLMC / "common.h").read_text()
        # the header is cut to what the record uses, line for line: compiler line numbers still hold
        assert kept.count("\n") == full.count("\n") and "cudaCheck" in kept and "ceil_div" in kept
        assert "void cublasCheck(" in full and "void cublasCheck(" not in kept  # GELU calls no cuBLAS
        assert r.entry["file_reference"]["cpu"] == "gelu_forward_cpu"


def test_include_dirs_and_headers_stay_in_the_tree(tmp_path):
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "include" / "lib").mkdir(parents=True)
    (root / "csrc").mkdir()
    (root / "include" / "lib" / "util.h").write_text('#include "more.h"\n#define UTIL 1\n')
    (root / "include" / "lib" / "more.h").write_text("#define MORE 2\n")
    (root / "src" / "local.cuh").write_text("#define LOCAL 3\n")
    (tmp_path / "secret.h").write_text("SECRET\n")
    (root / "src" / "link.h").symlink_to(tmp_path / "secret.h")
    src = (b'#include "local.cuh"\n#include <lib/util.h>\n#include "../../secret.h"\n'
           b'#include "/etc/passwd"\n#include "link.h"\n#include <cuda_runtime.h>\n')
    dirs = include_dirs(root, "src/k.cu", ["extra", "../outside"])
    assert dirs == ["src", ".", "include", "csrc"]
    got = local_headers(root, "src/k.cu", dirs, src)
    assert set(got) == {"src/local.cuh", "include/lib/util.h", "include/lib/more.h"}
    assert all("SECRET" not in t for t in got.values())
    assert safe_rel("a/../../b") is None and safe_rel("/etc") is None and safe_rel("a/./b/../c") == "a/c"


@needs_llmc
def test_launchers_taking_part_of_the_cpu_call_scratch_and_null_arrays():
    from sftbuild.trial.file_reference import plans, roles

    ref = _kernels("matmul_backward_bias.cu")["matmul_backward_bias_kernel1"].file_reference
    assert ref["cpu"] == "matmul_backward_bias_cpu" and ref["call_args"][:2] == ["NULL", "NULL"]
    # dbias starts at zero in main(); dout is read through a non-const pointer: the CPU's values are fed
    assert roles(ref) == ["null", "null", "inout", "staged", "null", "null"]
    assert [ref["call_args"][i] for i in ref["compare"]] == ["dbias"]
    ref = _kernels("layernorm_backward.cu")["layernorm_backward_kernel5"].file_reference
    assert ref["launcher"] == "layernorm_backward5"  # a template launcher, with a device-only scratch array
    assert [m for m in ref["launcher_map"] if "scratch" in m] == [{"scratch": "(1024/32) * cuda_num_SMs * (2 * C + 1)"}]
    assert [ref["call_args"][i] for i in ref["compare"]] == ["dinp", "dweight", "dbias"]


@needs_llmc
def test_a_launcher_that_calls_cublas_is_not_used():
    k = _kernels("matmul_forward.cu")["add_bias"]
    assert k.file_reference is None and "cublasSgemm" not in k.code
    assert _kernels("attention_forward.cu")["softmax_forward_kernel4"].file_reference is None


@needs_llmc
def test_what_main_sets_up_beyond_the_cpu_call():
    """A file-scope device buffer main() allocates, main()'s block-size array named after the
    launcher's trailing parameter, and the element types main()'s own call gives a template launcher
    (the file's floatX, not the CPU function's float)."""
    ref = _kernels("matmul_backward_bias.cu")["matmul_backward_bias_kernel8"].file_reference
    assert ref["device_buffers"] == [{"name": "dbias_buffer", "type": "float", "size": "OC * 1 * 32",
                                      "zeroed": False}]
    ref = _kernels("matmul_forward.cu")["matmul_forward_kernel1"].file_reference
    assert ref["trailing"] == ["sqrt_block_size"] and ref["block_sizes"] == [4, 8, 16, 32]
    ref = _kernels("layernorm_backward.cu")["layernorm_backward_kernel4"].file_reference
    assert {g["type"] for g in ref["launcher_params"] if g["ptr"]} == {"floatX"}
    assert ref["device_buffers"] == []
