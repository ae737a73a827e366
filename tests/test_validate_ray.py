"""RayExecutor on a local Ray instance (skipped when ray is not installed): CPU tasks, the GPU
actors' recycling on a declared GPU resource, and, on a GPU machine, real GPUs and the
validate stage."""
import pytest
import torch

from sftbuild.executor import WorkerFailure
from tests import tasks
from tests.conftest import HAS_GPU, HAS_NVCC

ray = pytest.importorskip("ray")


@pytest.fixture
def local_ray(request):
    kw = getattr(request, "param", {})
    ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False, **kw)
    yield
    ray.shutdown()


@pytest.mark.parametrize("local_ray", [{"num_cpus": 2}], indirect=True)
def test_ray_map_cpu(local_ray):
    from sftbuild.ray_executor import RayExecutor

    ex = RayExecutor(progress=False)
    out = dict(ex.map_cpu(tasks.misbehave, ["a", "raise", "b"]))
    assert out["a"]["x"] == "a" and out["b"]["x"] == "b"
    assert isinstance(out["raise"], WorkerFailure) and out["raise"].kind == "error"
    assert ex.gpu_count == 0


@pytest.mark.parametrize("local_ray", [{"num_cpus": 2, "num_gpus": 1}], indirect=True)
def test_ray_gpu_actor_recycles_after_hang_crash_and_fault(local_ray):
    """The GPU path on a local instance that declares a (fake) GPU resource."""
    from sftbuild.ray_executor import RayExecutor

    ex = RayExecutor(progress=False)
    assert ex.gpu_count == 1
    tasks.check_misbehave(dict(ex.map_gpu(tasks.misbehave, tasks.MISBEHAVE, timeout=5)))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
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
@pytest.mark.skipif(not HAS_GPU or not HAS_NVCC, reason="needs a CUDA GPU and nvcc")
def test_ray_validate_stage_on_real_gpus(tmp_path, local_ray):
    """The validate stage with --executor ray: the ATen softmax passes, its off-by-one copy fails."""
    from sftbuild.config import Config
    from sftbuild.context import Context
    from sftbuild.ray_executor import RayExecutor
    from sftbuild.store import Store
    from sftbuild.validate import stage as validate
    from tests.test_validate_foundation import _softmax_and_broken_twin

    ctx = Context(store=Store(tmp_path / "ws"), config=Config(), executor=RayExecutor(progress=False),
                  echo=lambda s: None, progress=False)
    soft, broken = _softmax_and_broken_twin(ctx)
    validate.run(ctx)
    good, bad = ctx.store.result(soft.id, "validate"), ctx.store.result(broken.id, "validate")
    print("ray softmax:", good["status"], good["reason"], "broken:", bad["status"], bad["reason"])
    assert good["status"] == "ok", good
    assert (bad["status"], bad["reason"]) == ("dropped", "incorrect")
