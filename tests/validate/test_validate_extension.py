"""The inline-extension builder: lean torch header first, full one on failure, cached objects.

Compiles to object files only (linking needs the CUDA build of torch)."""
import re

import pytest

from sftbuild.trial import extension, inline_sources
from tests.redteam import cases as RT


def _sources(name):
    return inline_sources.extract(next(c for c in RT.cases() if c.name == name).record["code"])


@pytest.fixture(scope="module")
def cache(tmp_path_factory, compile_cache):
    """A fresh build cache for this module, whose precompiled headers (keyed by toolchain) are the
    run's, where the validate stage keeps them: built once, by whichever test or CI step needs one first."""
    path = tmp_path_factory.mktemp("ext")
    pch = compile_cache / "ext" / "pch"
    pch.mkdir(parents=True, exist_ok=True)
    (path / "pch").symlink_to(pch, target_is_directory=True)
    return str(path)


def test_lean_source_rewrites_the_copy_only():
    cu = "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n__global__ void k() {}\n"
    lean = extension.lean_source(cu)
    assert '#include "torch_lean.cuh"' in lean and "c10/cuda/CUDAStream.h" in lean and "CUDAContext" not in lean
    assert extension.lean_source("__global__ void k() {}\n") is None


@pytest.mark.nvcc
def test_twin_compiles_lean_and_rerun_is_cached(cache):
    f = _sources("twin_matmul_cuda")
    res = extension.compile_only(f["cpp_sources"], f["cuda_sources"], cache, arch="sm_90")
    assert res["ok"], res["log"]
    assert (res["header"], res["main_header"], res["cached"]) == ("lean", "lean", False)
    again = extension.compile_only(f["cpp_sources"], f["cuda_sources"], cache, arch="sm_90")
    assert again["ok"] and again["cached"] and again["seconds"] == 0.0


@pytest.mark.nvcc
def test_compile_error_is_cached_too(cache, monkeypatch):
    f = _sources("twin_relu_cuda")
    cu = f["cuda_sources"].replace("#include <torch/extension.h>", "").replace("torch::Tensor run", "int run")
    calls = []
    monkeypatch.setattr(extension.nvcc_parallel, "run_command",
                        lambda cmd, cwd, t, *a: calls.append(cmd) or (1, "error: boom"))
    monkeypatch.setattr(extension, "precompiled_header", lambda *a, **k: cache + "/none/torch_ext.h")
    res = extension.compile_only(f["cpp_sources"], cu, cache, arch="sm_90")
    assert res["reason"] == "compile_error" and "boom" in res["log"]
    n = len(calls)
    again = extension.compile_only(f["cpp_sources"], cu, cache, arch="sm_90")
    assert again["cached"] and again["reason"] == "compile_error" and len(calls) == n


@pytest.mark.nvcc
def test_falls_back_to_the_full_header_when_the_lean_one_lacks_something(cache, monkeypatch):
    # a stand-in "umbrella" header the lean one does not cover, so the fallback is cheap to exercise
    monkeypatch.setattr(extension, "FULL", re.compile(r"#include <cooperative_groups.h>"))
    cu = ("#include <cooperative_groups.h>\n"
          "__global__ void k(float* x) { cooperative_groups::this_thread_block().sync(); x[0] = 1.f; }\n")
    # and a stand-in lean copy of it, which lacks what the kernel uses: the failed lean build costs no
    # parse of torch's headers (the twin's test builds the real lean header)
    lean_source = extension.lean_source
    monkeypatch.setattr(extension, "lean_source", lambda src: "// lean\n" + src.split("\n", 1)[1] if src == cu
                        else lean_source(src))
    # the twin's host declarations: its pybind module is shared with the twin's build, not compiled again
    cpp = _sources("twin_matmul_cuda")["cpp_sources"]
    res = extension.compile_only(cpp, cu, cache, arch="sm_90")
    assert res["ok"], res["log"]
    assert res["header"] == "full" and "cuda_lean" in res["phases"]


@pytest.mark.nvcc
def test_the_pybind_module_is_compiled_once_for_the_same_declarations(cache, monkeypatch):
    f = _sources("twin_matmul_cuda")
    extension.compile_only(f["cpp_sources"], f["cuda_sources"], cache, arch="sm_90")  # cached by now
    calls = []
    run = extension.nvcc_parallel.run_command
    monkeypatch.setattr(extension.nvcc_parallel, "run_command",
                        lambda cmd, *a, **k: calls.append(cmd[0]) or run(cmd, *a, **k))
    # another answer to the same task: the same declarations and module name, a CUDA source of its own
    res = extension.compile_only(f["cpp_sources"], "__global__ void k(float* x) { x[0] = 2.f; }\n", cache,
                                 arch="sm_90")
    assert res["ok"] and not res["cached"], res["log"]
    assert "g++" not in calls  # the module's object came from the first answer's build


# cuBLAS called without its header, and 1 MB of static shared memory: errors under either header
GENUINE_COMPILE_ERRORS = {"cublas_host", "smem_over_budget"}


# Some 20 builds, a few of them against all of torch/extension.h (a minute each on 2 cores): a sweep.
# On the CPU CI, test_twin_compiles_lean_and_rerun_is_cached builds a red-team solution against the
# lean header, and the fallback test above takes the full header's path.
@pytest.mark.nvcc
@pytest.mark.sweep
def test_red_team_cuda_solutions_compile_lean(cache):
    seen = set()
    for case in RT.cases():
        f = inline_sources.extract(case.record["code"])
        if case.record["language"] != "kernelbench" or not f or f["cuda_sources"] in seen:
            continue
        seen.add(f["cuda_sources"])
        res = extension.compile_only(f["cpp_sources"], f["cuda_sources"], cache, arch="sm_90")
        if case.name in GENUINE_COMPILE_ERRORS:
            assert not res["ok"], case.name
            continue
        # ATen ops in the host wrapper, or std headers the full one pulls in by chance (std::thread),
        # are beyond the lean header: those compile against the full one
        want = "full" if ("at::matmul" in f["cuda_sources"] or "std::thread" in f["cuda_sources"]) else "lean"
        assert res["ok"] and res["header"] == want, (case.name, res["log"][-2000:])


def test_build_slots_bound_concurrent_builds(tmp_path, monkeypatch):
    """With one slot the second build waits for the first, and reports the wait apart from its build."""
    import threading
    import time

    monkeypatch.setenv("SFTBUILD_EXT_SLOTS", "1")
    held, waits = threading.Event(), []

    def first():
        with extension.build_slot(str(tmp_path)) as queued:
            waits.append(("first", queued))
            held.set()
            time.sleep(0.6)

    t = threading.Thread(target=first)
    t.start()
    held.wait(5)
    with extension.build_slot(str(tmp_path)) as queued:
        waits.append(("second", queued))
    t.join()
    assert waits[0][1] < 0.3 and waits[1][1] >= 0.4
    monkeypatch.setenv("SFTBUILD_EXT_SLOTS", "2")  # a second slot: no wait while one is held
    with extension.build_slot(str(tmp_path)):
        with extension.build_slot(str(tmp_path)) as queued:
            assert queued < 0.3
