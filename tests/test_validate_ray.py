"""RayExecutor on a local Ray instance with CPU tasks (skipped when ray is not installed)."""
import pytest

ray = pytest.importorskip("ray")


def _square(x):
    if x == 3:
        raise ValueError("boom")
    return x * x


def test_ray_map_cpu():
    from sftbuild.executor import WorkerFailure
    from sftbuild.ray_executor import RayExecutor

    ray.init(num_cpus=2, ignore_reinit_error=True, include_dashboard=False)
    try:
        ex = RayExecutor(progress=False)
        out = dict(ex.map_cpu(_square, [1, 2, 3, 4]))
        assert out[1] == 1 and out[4] == 16
        assert isinstance(out[3], WorkerFailure) and out[3].kind == "error"
        assert ex.gpu_count == 0
    finally:
        ray.shutdown()


def _slow(x):
    import time

    if x == "hang":
        time.sleep(600)
    return x


def test_ray_gpu_path_times_out_a_hang(monkeypatch):
    """The GPU path's timeout logic on a local instance that declares a (fake) GPU resource."""
    from sftbuild.executor import WorkerFailure
    from sftbuild.ray_executor import RayExecutor

    ray.init(num_cpus=2, num_gpus=1, ignore_reinit_error=True, include_dashboard=False)
    try:
        ex = RayExecutor(progress=False)
        assert ex.gpu_count == 1
        out = dict(ex.map_gpu(_slow, ["a", "hang", "b"], timeout=5))
        assert out["a"] == "a" and out["b"] == "b"
        assert isinstance(out["hang"], WorkerFailure) and out["hang"].kind == "timeout"
    finally:
        ray.shutdown()
