"""The validate stage on the ATen softmax kernel: compile gate on CPU, correctness on a GPU."""
import pytest

from sftbuild.config import Config
from sftbuild.record import Record
from sftbuild.validate import stage as validate

pytestmark = pytest.mark.nvcc

BROKEN = ("int local_batches = batch_size - first_batch;",
          "int local_batches = batch_size - first_batch - 1;")


def _softmax_and_broken_twin(ctx, twin=True):
    """On a harvest of the ATen headers, keep only the bound softmax kernel, add a copy with an off-by-one
    (unless not `twin`: without a GPU it would only double the builds)."""
    (soft,) = [r for r in ctx.store.records() if r.binding and r.binding.op == "softmax"]
    assert BROKEN[0] in soft.code
    broken = Record(language="cuda", code=soft.code.replace(*BROKEN), source="broken-copy",
                    entry=soft.entry, binding=soft.binding, provenance=soft.provenance)
    if twin:
        ctx.store.add_records([broken])
        ctx.store.put_result(broken.id, "harvest", ctx.store.stage_config("harvest"), "ok")
    for r in ctx.store.records():  # bind and describe are not under test here
        ctx.store.set_stage_config("bind", "b", {})
        ctx.store.put_result(r.id, "bind", "b", "ok")
        ctx.store.set_stage_config("describe", "d", {})
        ctx.store.put_result(r.id, "describe", "d", "ok" if r.id in (soft.id, broken.id) else "dropped", "skip")
    return soft, broken


def test_without_gpu_bound_kernels_wait_for_one(aten_copy, make_ctx):
    cfg = Config()
    cfg.validate.compile_timeout = 300  # a build against torch's headers may pass 30 s on a busy machine
    ctx = make_ctx(aten_copy.name, gpus="none", cpu_workers=2, config=cfg)
    soft, _ = _softmax_and_broken_twin(ctx, twin=False)
    validate.run(ctx)
    res = ctx.store.result(soft.id, "validate")
    assert (res["status"], res["reason"]) == ("waiting", "needs_gpu")
    assert res["payload"]["compile"]["resources"]["registers"] > 0
    # a rerun finds the compile cache
    validate.run(ctx)
    assert ctx.store.result(soft.id, "validate")["payload"]["compile"]["cached"] is True


@pytest.mark.gpu
def test_aten_softmax_passes_and_broken_copy_fails(aten_copy, make_ctx):
    ctx = make_ctx(aten_copy.name, gpus="auto", cpu_workers=2)
    soft, broken = _softmax_and_broken_twin(ctx)
    validate.run(ctx)
    good = ctx.store.result(soft.id, "validate")
    bad = ctx.store.result(broken.id, "validate")
    print("softmax:", good["status"], good["reason"], good["payload"].get("errors"),
          good["payload"].get("speedup"))
    print("broken:", bad["status"], bad["reason"], bad["payload"].get("detail"))
    assert good["status"] == "ok", good
    ops_tried = {t["op"] for t in good["payload"]["trials"]}
    dtypes_tried = {t["dtype"] for t in good["payload"]["trials"]}
    assert ops_tried == {"softmax", "log_softmax"}
    assert dtypes_tried == {"float32", "float16", "bfloat16"}
    assert len({tuple(t["shape"]) for t in good["payload"]["trials"]}) >= 3
    assert (bad["status"], bad["reason"]) == ("dropped", "incorrect")
    env = ctx.store.verdicts(soft.id)[-1]["env"]
    assert env["torch"] and env["gpus"]
