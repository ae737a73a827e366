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
