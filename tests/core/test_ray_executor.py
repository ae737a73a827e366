"""RayExecutor on a local Ray instance (skipped when ray is not installed): CPU tasks, the GPU
actors' recycling on a declared GPU resource, and, on a GPU machine, real GPUs and the
validate stage."""
import importlib.util
from pathlib import Path

import pytest
import torch

from sftbuild.executor import WorkerFailure
from tests import tasks

# ray is imported by the fixtures, when a test runs: importing it costs about a second of every collection
pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")

# Ray's workers import the task functions from this checkout's `tests` package
RUNTIME_ENV = {"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}}


@pytest.fixture
def local_ray():
    """A local instance with the resources Ray detects (not the shared one below)."""
    import ray

    ray.shutdown()
    ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False, runtime_env=RUNTIME_ENV)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def declared_gpu_ray():
    """A local instance with 2 CPUs and a declared (fake) GPU, shared: starting one takes seconds."""
    import ray

    ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False, num_cpus=2, num_gpus=1,
             runtime_env=RUNTIME_ENV)
    yield
    ray.shutdown()


def test_ray_map_cpu(declared_gpu_ray):
    from sftbuild.ray_executor import RayExecutor

    ex = RayExecutor(progress=False)
    out = dict(ex.map_cpu(tasks.misbehave, ["a", "raise", "b"]))
    assert out["a"]["x"] == "a" and out["b"]["x"] == "b"
    assert isinstance(out["raise"], WorkerFailure) and out["raise"].kind == "error"


def test_ray_gpu_actor_recycles_after_hang_crash_and_fault(declared_gpu_ray):
    """The GPU path on a local instance that declares a (fake) GPU resource."""
    from sftbuild.ray_executor import RayExecutor

    ex = RayExecutor(progress=False)
    assert ex.gpu_count == 1
    tasks.check_misbehave(dict(ex.map_gpu(tasks.misbehave, tasks.MISBEHAVE, timeout=5)))


@pytest.mark.gpu
def test_ray_one_actor_per_real_gpu(local_ray):
    from sftbuild.ray_executor import RayExecutor

    ex = RayExecutor(progress=False)
    assert ex.gpu_count == torch.cuda.device_count()
    out = dict(ex.map_gpu(tasks.gpu_identity, list(range(8)), timeout=120))
    print({k: (v["visible"], v["name"]) for k, v in out.items()})
    assert len({v["visible"] for v in out.values()}) == ex.gpu_count
    assert all(v["count"] == 1 for v in out.values())  # each actor is pinned to its own GPU
    assert all(out[i]["sum"] == float(i) * (1 << 20) for i in range(8))


@pytest.mark.gpu
@pytest.mark.nvcc
def test_ray_validate_stage_on_real_gpus(aten_copy, make_ctx, local_ray):
    """The validate stage with --executor ray: the ATen softmax passes, its off-by-one copy fails."""
    from sftbuild.ray_executor import RayExecutor
    from sftbuild.validate import stage as validate
    from tests.validate.test_validate_foundation import _softmax_and_broken_twin

    ctx = make_ctx(aten_copy.name, executor=RayExecutor(progress=False))
    soft, broken = _softmax_and_broken_twin(ctx)
    validate.run(ctx)
    good, bad = ctx.store.result(soft.id, "validate"), ctx.store.result(broken.id, "validate")
    print("ray softmax:", good["status"], good["reason"], "broken:", bad["status"], bad["reason"])
    assert good["status"] == "ok", good
    assert (bad["status"], bad["reason"]) == ("dropped", "incorrect")
