"""Recall of the extractors on real sources (the installed torch's ATen headers) and on
checked-in sources written for the tests. Every `__global__` and `@triton.jit` definition
must be extracted or listed with a reason."""
from __future__ import annotations

import concurrent.futures as cf
import functools
import os
import re
import subprocess
from pathlib import Path

import pytest

from sftbuild.context import find_nvcc
from sftbuild.harvest import sources as S
from sftbuild.harvest.cuda_extract import extract_kernels, late_includes
from sftbuild.harvest.triton_extract import count_jit
from sftbuild.harvest.triton_extract import extract_kernels as triton_kernels

DATA = Path(__file__).parents[1] / "data" / "harvest"


@functools.lru_cache(maxsize=1)
def aten_files() -> dict[str, bytes]:
    inc = S.torch_root() / "include"
    return {p.relative_to(inc).as_posix(): p.read_bytes()
            for p in sorted((inc / "ATen" / "native" / "cuda").glob("*.cuh"))}


def global_definitions(src: bytes) -> list[int]:
    """Lines of `__global__` tokens outside comments (a plain scan, independent of tree-sitter)."""
    text = re.sub(rb"/\*.*?\*/", lambda m: b"\n" * m.group().count(b"\n"), src, flags=re.S)
    lines = []
    for i, line in enumerate(text.split(b"\n"), 1):
        code = line.split(b"//", 1)[0]
        lines += [i] * len(re.findall(rb"\b__global__\b", code))
    return lines


@functools.lru_cache(maxsize=1)
def aten_extraction():
    files = aten_files()
    preludes = late_includes(files)
    return {rel: extract_kernels(data, preludes.get(rel, b"")) for rel, data in files.items()
            if b"__global__" in data}


def test_aten_every_global_is_extracted_or_listed():
    files = aten_files()
    total = extracted = listed = 0
    reasons: dict[str, int] = {}
    for rel, (kernels, others) in aten_extraction().items():
        defs = global_definitions(files[rel])
        found = sorted([k.lines for k in kernels])
        accounted = [ln for ln in defs if any(a <= ln <= b for a, b in found)] + [o["line"] for o in others]
        assert sorted(accounted) == sorted(defs), rel
        total += len(defs)
        extracted += len(kernels)
        listed += len(others)
        for o in others:
            reasons[o["reason"]] = reasons.get(o["reason"], 0) + 1
    print(f"\nATen recall: {total} __global__ in {len(aten_extraction())} files: "
          f"{extracted} extracted, {listed} listed {reasons}")
    assert total == extracted + listed
    assert extracted >= 34
    assert reasons.get("in_string_literal") == 1  # the JIT template in reduction_template.cuh


def test_aten_kernel_names_and_launch_metadata():
    by_name = {k.name: k for kernels, _ in aten_extraction().values() for k in kernels}
    assert not any(n.startswith("C10_") for n in by_name)
    for name in ("vectorized_elementwise_kernel", "unrolled_elementwise_kernel", "elementwise_kernel",
                 "multi_tensor_apply_kernel", "reduce_kernel", "bitonicSortKVInPlace",
                 "warpMergeSortKVInPlace", "radixSortKVInPlace", "unrolled_elementwise_kernel_for_multi_outputs"):
        assert name in by_name, name
    assert by_name["reduce_kernel"].launch_bounds == "C10_LAUNCH_BOUNDS_2(nt, 4)"
    sm = by_name["softmax_warp_forward"]
    assert any(s.get("macro") == "LAUNCH_SOFTMAX_WARP_FORWARD" and s["function"] == "dispatch_softmax_forward"
               for s in sm.launch_sites)


def _nvcc(path, *args):
    res = subprocess.run([find_nvcc(), "-cubin", "-arch=sm_90", *args, "-o", os.devnull, str(path)],
                         capture_output=True, text=True, timeout=600)
    return res.returncode == 0, res.stderr[-600:]


def _gates(kernels, cache) -> dict:
    """Each extracted closure through validate's compile gate (the kernel only, to a cubin, with the
    torch include set: stand-ins for headers a CPU-only torch wheel and a bare toolkit lack), cached
    by content; {kernel name: the build's last log line, for those that failed}."""
    from sftbuild.trial.compile import compile_task

    tasks = {k.code: {"id": k.name, "code": k.code, "harness": None, "include_sets": ["torch"], "arch": "sm_90",
                      "timeout": 600, "nvcc": "", "cache_dir": str(cache), "link": False}
             for k in kernels}  # a closure two kernels share is built once
    with cf.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        built = dict(zip(tasks, pool.map(compile_task, tasks.values())))
    return {k.name: (built[k.code]["log"].strip().splitlines() or [""])[-1] for k in kernels
            if not built[k.code]["ok"]}


# one kernel of three ATen headers: a functor template, a warp-level template, a scan with indices
GATE_SAMPLE = ("vectorized_elementwise_kernel", "softmax_warp_forward", "tensor_kernel_scan_innermost_dim")


@pytest.mark.slow  # three builds against torch's headers
@pytest.mark.nvcc
def test_aten_kernels_compile_on_their_own(compile_cache):
    """A few extracted ATen closures build alone through the gate; the sweep below builds them all."""
    kernels = [k for ks, _ in aten_extraction().values() for k in ks if k.name in GATE_SAMPLE]
    assert {k.name for k in kernels} == set(GATE_SAMPLE)
    assert _gates(kernels, compile_cache) == {}


@pytest.mark.sweep  # some 35 builds against torch's headers
@pytest.mark.nvcc
def test_aten_kernels_compile_on_their_own_all(compile_cache):
    """Nine in ten of all extracted ATen closures build alone. The gate caches by content, so the
    default run's validate reuses these builds."""
    kernels = [k for ks, _ in aten_extraction().values() for k in ks]
    failed = _gates(kernels, compile_cache)
    rate = 1 - len(failed) / len(kernels)
    print(f"\nATen compile rate: {len(kernels) - len(failed)}/{len(kernels)} = {rate:.1%}; failed: {failed}")
    assert rate >= 0.9


def test_checked_in_cuda_accounting():
    src = (DATA / "cuda_tree" / "kernels.cu").read_bytes()
    kernels, others = extract_kernels(src)
    names = {k.name: k for k in kernels}
    assert set(names) == {"row_sum_kernel", "square_kernel", "pair_kernel", "tiny_kernel", "fast_path_kernel"}
    assert {o["reason"] for o in others} == {"rocm_only", "in_string_literal"}
    assert len(kernels) + len(others) == len(global_definitions(src))
    rs = names["row_sum_kernel"]
    assert rs.launch_bounds == "MY_LAUNCH_BOUNDS(BLOCK)" and rs.template
    assert rs.launch_sites[0]["macro"] == "LAUNCH_ROW_SUM"
    assert "warp_sum" in rs.code and "#define WARP 32" in rs.code and "square_kernel" not in rs.code
    assert "struct Pair" in names["pair_kernel"].code
    fast = names["fast_path_kernel"].code
    assert "#if (defined(ENABLE_FAST_PATH))" in fast and "#endif" in fast
    assert names["square_kernel"].launch_sites[0]["function"] == "square"


@pytest.mark.nvcc
def test_checked_in_cuda_kernels_compile(tmp_path):
    kernels, _ = extract_kernels((DATA / "cuda_tree" / "kernels.cu").read_bytes())
    paths = []
    for k in kernels:
        paths.append(tmp_path / f"{k.name}.cu")
        paths[-1].write_text(k.code)
    with cf.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda p: _nvcc(p, "-std=c++17"), paths))
    for k, (ok, err) in zip(kernels, results):
        assert ok, (k.name, err)


def test_checked_in_triton_accounting():
    src = (DATA / "triton_src" / "ops.py").read_text()
    kernels, others = triton_kernels(src)
    names = {k.name: k for k in kernels}
    assert set(names) == {"rms_norm_kernel", "add_kernel", "scale_kernel"}
    assert {(o["detail"], o["reason"]) for o in others} == {
        ("_square", "device_helper"), ("_mean_sq", "device_helper"), ("local_kernel", "nested_definition")}
    assert len(kernels) + len(others) == count_jit(src)
    rms = names["rms_norm_kernel"]
    assert rms.autotune and rms.helpers == ["_mean_sq", "_square"]
    assert "EPS = 1e-6" in rms.code and "def rms_norm(" in rms.code and "def add(" not in rms.code
    assert names["add_kernel"].heuristics and "def _grid(" in names["add_kernel"].code
    assert "class Scale" in names["scale_kernel"].code and "BLOCK_DEFAULT" in names["scale_kernel"].code


def test_triton_closures_import_standalone(tmp_path):
    pytest.importorskip("triton")
    import importlib.util

    kernels, _ = triton_kernels((DATA / "triton_src" / "ops.py").read_text())
    for k in kernels:
        p = tmp_path / f"closure_{k.name}.py"  # triton.jit reads the source from a file
        p.write_text(k.code)
        spec = importlib.util.spec_from_file_location(p.stem, p)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))  # every name resolves


SPLIT_TEMPLATE = b"""#define HAS_FAST_PATH() (1)
#define MY_LAUNCH_BOUNDS_1(x) __launch_bounds__(x)
namespace demo {
#if HAS_FAST_PATH()
template <int rows_per_block, typename T>
#if !defined(USE_ROCM)
// launch bounds on CUDA only
MY_LAUNCH_BOUNDS_1(32 * rows_per_block)
#endif
// a note between the attribute and the kernel
__global__ void
split_kernel(const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * T(rows_per_block);
}
#endif
}  // namespace demo
"""


@pytest.mark.nvcc
def test_template_split_by_a_conditional_attribute(tmp_path):
    """As torch 2.11's warpMergeSortKVInPlace: `template <...>`, then launch bounds inside
    `#if !defined(USE_ROCM)`, then the kernel. The template must stay with its kernel."""
    from sftbuild.trial.harness import template_params

    (k,), skipped = extract_kernels(SPLIT_TEMPLATE)
    assert k.name == "split_kernel" and k.template and not skipped
    assert "template <int rows_per_block, typename T>" in k.code and "MY_LAUNCH_BOUNDS_1" in k.code
    assert k.params == ["const T* x", "T* y", "int n"]
    assert template_params(k.code, k.name) == ["rows_per_block", "T"]
    (tmp_path / "k.cu").write_text(k.code + "\ntemplate __global__ void demo::split_kernel<4, float>"
                                   "(const float*, float*, int);\n")
    ok, err = _nvcc(tmp_path / "k.cu")
    assert ok, err


def test_an_empty_macro_with_trailing_spaces_keeps_the_else_branch_dead_on_cuda():
    # causal-conv1d's `#define ROCM_ONLY(x) ` (a space after it) once swallowed the `#else` under it
    src = (b"#ifndef USE_ROCM\n#include <cub/cub.cuh>\n#define ROCM_ONLY(x) \n#else\n#include <hipcub/hipcub.hpp>\n"
           b"#define ROCM_ONLY(x) x\n#endif\n__global__ void k(float* y) {\n  ROCM_ONLY(1);\n  y[0] = 1.f;\n}\n")
    (k,), _ = extract_kernels(src)
    assert "cub/cub.cuh" in k.code and "hipcub" not in k.code and k.lines == (8, 11)


def test_a_header_naming_torch_types_its_includer_declares_gets_those_includes():
    # apex's scaled_masked_softmax.h names c10::BFloat16, declared by its .cu's <ATen/ATen.h>, not by itself
    header = b"#include <c10/macros/Macros.h>\n__global__ void k(c10::BFloat16* y) { y[0] = y[1]; }\n"
    cu = b'#include <ATen/ATen.h>\n#include <c10/macros/Macros.h>\n#include "soft.h"\n'
    plain = b'#include <cuda_fp16.h>\n#include "plain.h"\n'
    found = late_includes({"soft.h": header, "soft.cu": cu, "plain.h": header, "plain.cu": plain})
    assert found == {"soft.h": b"#include <ATen/ATen.h>\n#include <c10/macros/Macros.h>\n"}
    (k,), _ = extract_kernels(header, found["soft.h"])
    assert k.code.startswith("#include <ATen/ATen.h>")


def test_telling_a_folder_of_pairs_reads_a_bounded_number_of_files(tmp_path, monkeypatch):
    from sftbuild.harvest import kernelbench as KB

    for i in range(30):  # plain Python files, none a pair: recognising must stop, not read them all
        (tmp_path / f"m{i:02d}.py").write_text("x = 1\n")
    pair = tmp_path / "zz" / "solution.py"
    pair.parent.mkdir()
    pair.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n"
                    "class ModelNew(torch.nn.Module):\n    pass\n"
                    "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    read = []
    real = KB.Path.read_text
    monkeypatch.setattr(KB.Path, "read_text", lambda self, *a, **k: read.append(self) or real(self, *a, **k))
    assert KB.find_pairs(tmp_path, limit=1, max_files=10) == []
    assert len(read) == 10
    assert KB.find_pairs(tmp_path, limit=1) == [(pair, pair)]  # unbounded, it is found after the files beside it
