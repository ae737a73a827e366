"""The sandbox on a GPU machine: GPU workers are sandboxed processes that still reach the GPU, and a
compute-sanitizer run nests its own sandbox inside a worker's."""
from __future__ import annotations

import pytest

from sftbuild import sandbox
from sftbuild.executor import LocalExecutor
from tests import tasks
from tests.sandbox import payloads


@pytest.mark.gpu
def test_a_sandboxed_gpu_worker_launches_kernels_and_sees_no_host_file(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    with LocalExecutor(cpu_workers=1, gpus="auto", progress=False) as ex:
        ex.gpus = ex.gpus[:1]
        out = dict(ex.map_gpu(tasks.gpu_identity, [1, 2, 3], timeout=300))
        assert [out[i]["sum"] for i in (1, 2, 3)] == [float(i) * (1 << 20) for i in (1, 2, 3)], out
        ((_, read),) = list(ex.map_gpu(payloads.read_host_file, [{"secret": str(secret)}], timeout=120))
    if sandbox.layers()["filesystem"].startswith("read-only view"):
        assert read["read"] is None
    else:
        assert sandbox.unavailable()


@pytest.mark.gpu
def test_a_sandbox_inside_a_gpu_worker_reaches_the_gpu():
    with LocalExecutor(cpu_workers=1, gpus="auto", progress=False) as ex:
        ex.gpus = ex.gpus[:1]
        (res,) = dict(ex.map_gpu(payloads.nested_gpu, [7], timeout=300)).values()
    assert res["sum"] == 7.0 * (1 << 20), res
