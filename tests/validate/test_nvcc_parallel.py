"""nvcc with its two front ends side by side: same output as plain nvcc, errors and timeouts kept."""
import os
import subprocess

import pytest

from sftbuild.context import find_nvcc
from sftbuild.trial import compile as gate
from sftbuild.trial import nvcc_parallel

pytestmark = pytest.mark.nvcc

KERNEL = """
namespace { __device__ float twice(float v) { return 2.f * v; } }
__global__ void scale(const float* x, float* y, int n) {
  __shared__ float tile[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  if (i < n) y[i] = twice(tile[threadIdx.x]);
}
void launch(const float* x, float* y, int n) { scale<<<(n + 127) / 128, 128>>>(x, y, n); }
"""


@pytest.fixture
def src(tmp_path):
    (tmp_path / "k.cu").write_text(KERNEL)
    return tmp_path


def _symbols(path) -> set[str]:
    out = subprocess.run(["nm", "-C", "--defined-only", str(path)], capture_output=True, text=True).stdout
    return {line.split(maxsplit=2)[-1] for line in out.splitlines() if " T " in line}


def test_object_matches_plain_nvcc(src):
    nvcc = find_nvcc()
    cmd = [nvcc, "-c", "-arch=sm_90", "-Xcompiler", "-fPIC", "k.cu"]
    assert nvcc_parallel._plan(cmd + ["-o", "a.o"], src, dict(os.environ), str(src)) is not None  # split, not fallen back
    code, log = nvcc_parallel.run(cmd + ["-o", "a.o"], src, 60)
    assert code == 0, log
    subprocess.run(cmd + ["-o", "b.o"], cwd=src, check=True)
    assert _symbols(src / "a.o") == _symbols(src / "b.o")
    assert {"scale(float const*, float*, int)", "launch(float const*, float*, int)"} <= _symbols(src / "a.o")


def test_shared_library_keeps_the_ptxas_report(src):
    cmd = [find_nvcc(), "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", "-arch=sm_90", "k.cu", "-o", "k.so"]
    assert nvcc_parallel._plan(cmd, src, dict(os.environ), str(src)) is not None
    code, log = nvcc_parallel.run(cmd, src, 60)
    assert code == 0, log
    assert (src / "k.so").exists()
    res = gate.parse_ptxas(log)
    assert res["smem"] == 512 and res["registers"] > 0


def test_compile_error_reported_once(src):
    (src / "bad.cu").write_text("__global__ void f(float* x) { x[0] = not_declared; }\n")
    code, log = nvcc_parallel.run([find_nvcc(), "-c", "-arch=sm_90", "bad.cu", "-o", "bad.o"], src, 60)
    assert code != 0
    assert log.count('identifier "not_declared" is undefined') == 1
    assert not (src / "bad.o").exists()


def test_timeout_kills_the_front_ends(src):
    code, log = nvcc_parallel.run([find_nvcc(), "-c", "-arch=sm_90", "k.cu", "-o", "k.o"], src, 0.05)
    assert code == -9 and "time limit" in log
    assert _running_with(str(src)) == []


def _running_with(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (read from /proc)."""
    found = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if d.isdigit() and text in cmd:
            found.append(cmd)
    return found


def test_unfamiliar_plans_run_as_plain_nvcc(src):
    cmd = [find_nvcc(), "-c", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
           "k.cu", "-o", "two.o"]
    assert nvcc_parallel._plan(cmd, src, dict(os.environ), str(src)) is None
    code, log = nvcc_parallel.run(cmd, src, 120)
    assert code == 0, log and (src / "two.o").exists()


def test_switched_off_by_environment(src, monkeypatch):
    monkeypatch.setenv("SFTBUILD_NVCC_PARALLEL", "0")
    calls = []
    monkeypatch.setattr(nvcc_parallel, "_plan", lambda *a: calls.append(a))
    code, _ = nvcc_parallel.run([find_nvcc(), "-c", "-arch=sm_90", "k.cu", "-o", "k.o"], src, 60)
    assert code == 0 and calls == []
