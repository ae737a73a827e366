"""The validate stage: compile gate and resource checks on CPUs, correctness and timing on GPUs.

Outcome per record (status, reason):
  ok                      compiled, bound, correct on every trial (and fast enough)
  dropped compile_error   nvcc failed; compile_timeout past the limit
  dropped resources       registers, spills, shared memory or block size over the limits
  dropped unbound         compiles, but nothing to check it against
  dropped incorrect | cheat | cuda_error | illegal_address | timeout | too_slow
  waiting needs_gpu       bound and compiled; correctness needs a GPU this machine lacks
"""
from __future__ import annotations

import dataclasses

from sftbuild.context import Context, StageRun, UserError, environment
from sftbuild.executor import WorkerFailure
from sftbuild.validate import compile as C
from sftbuild.validate import harness as H
from sftbuild.validate import trials


def run(ctx: Context) -> dict:
    cfg = ctx.config.validate
    try:
        nvcc = C.find_nvcc(cfg.nvcc)
    except C.NvccMissing as e:
        raise UserError(str(e)) from e
    gpus = ctx.executor.gpu_count
    conf = dataclasses.asdict(cfg)
    alive = ctx.store.alive("validate")
    records = [r for r in alive if r.language == "cuda"]
    with StageRun(ctx, "validate", conf) as run:
        for r in alive:
            if r.language != "cuda" and r.id not in run.done():
                run.put(r.id, "waiting", "needs_gpu" if not gpus else "unsupported_language")
        # a record waiting for a GPU is retried once one is there
        todo = [r for r in records if r.id not in run.done()]
        cache = str((ctx.workspace / "cache" / "compile").resolve())
        tasks = [_compile_task(r, cfg, nvcc, cache) for r in todo]
        by_id = {r.id: r for r in todo}
        gpu_queue = []
        for task, res in ctx.executor.map_cpu(_compile_all, tasks, desc="compile"):
            rec = by_id[task["id"]]
            verdict = _after_compile(rec, res, cfg)
            if verdict is None:
                if gpus:
                    gpu_queue.append((rec, res))
                    continue
                verdict = ("waiting", "needs_gpu", {"compile": _brief(res)})
            _record(ctx, run, rec, *verdict)
        if gpu_queue:
            items = [_gpu_task(rec, res, cfg) for rec, res in gpu_queue]
            comp = {rec.id: res for rec, res in gpu_queue}
            for item, out in ctx.executor.map_gpu(trials.run_record, items, timeout=cfg.sample_timeout,
                                                  desc="correctness"):
                rec = by_id[item["id"]]
                if isinstance(out, WorkerFailure):
                    out = {"status": "dropped", "reason": out.kind if out.kind == "timeout" else "crash",
                           "detail": out.detail}
                status, reason = out.pop("status"), out.pop("reason")
                out.pop("recycle", None)
                if status == "ok" and cfg.max_slowdown and out.get("speedup") and \
                        out["speedup"] < 1.0 / cfg.max_slowdown:
                    status, reason = "dropped", "too_slow"
                out["compile"] = _brief(comp[rec.id])
                _record(ctx, run, rec, status, reason, out)
    return run.stats


def _compile_task(rec, cfg, nvcc, cache) -> dict:
    harnesses = []
    if rec.binding and rec.binding.get("harness"):
        dtypes = rec.binding.get("dtypes") or ["float32", "float16", "bfloat16"]
        harnesses = [H.render(rec, check, dtypes) for check in H.checks(rec.binding)]
    return {"id": rec.id, "code": rec.code, "harnesses": harnesses,
            "include_sets": rec.entry.get("include_sets", []), "arch": cfg.arch,
            "timeout": cfg.compile_timeout, "nvcc": nvcc, "cache_dir": cache}


def _compile_all(task: dict) -> dict:
    """Compile the kernel alone (the gate), then one launchable .so per check."""
    base = {k: v for k, v in task.items() if k != "harnesses"}
    gate = C.compile_task({**base, "harness": None})
    if not gate["ok"] or not task["harnesses"]:
        return {**gate, "sos": []}
    sos, resources, seconds = [], gate["resources"], gate["seconds"]
    for src in task["harnesses"]:
        res = C.compile_task({**base, "harness": src})
        seconds += res["seconds"]
        if not res["ok"]:
            return {**res, "reason": res["reason"], "sos": [], "harness_failed": True}
        sos.append(res["so"])
        resources = _merge(resources, res["resources"])
    return {**gate, "sos": sos, "resources": resources, "seconds": round(seconds, 3)}


def _merge(a: dict, b: dict) -> dict:
    out = {k: max(a.get(k, 0), b.get(k, 0)) for k in ("registers", "smem", "stack", "spill_stores", "spill_loads")}
    out["kernels"] = {**a.get("kernels", {}), **b.get("kernels", {})}
    return out


def _after_compile(rec, res, cfg):
    if isinstance(res, WorkerFailure):
        return ("dropped", "compile_error", {"detail": res.detail})
    if not res["ok"]:
        reason = res["reason"] if not res.get("harness_failed") else "harness_error"
        return ("dropped", reason, {"log": res.get("log", "")[-4000:]})
    r = res["resources"]
    over = []
    if r["registers"] > cfg.max_registers:
        over.append(f"{r['registers']} registers > {cfg.max_registers}")
    if r["spill_stores"] + r["spill_loads"] > cfg.max_spill_bytes:
        over.append(f"{r['spill_stores'] + r['spill_loads']} spill bytes > {cfg.max_spill_bytes}")
    if r["smem"] > cfg.shared_memory_budget:
        over.append(f"{r['smem']} bytes shared memory > {cfg.shared_memory_budget}")
    if over:
        return ("dropped", "resources", {"compile": _brief(res), "why": "; ".join(over)})
    if not res["sos"]:
        return ("dropped", "unbound", {"compile": _brief(res)})
    return None


def _brief(res) -> dict:
    if isinstance(res, WorkerFailure):
        return {"failure": res.kind}
    return {"seconds": res.get("seconds"), "cached": res.get("cached"), "resources": res.get("resources")}


def _gpu_task(rec, res, cfg) -> dict:
    return {"id": rec.id, "sos": res["sos"], "binding": rec.binding, "entry": rec.entry,
            "dtypes": rec.binding.get("dtypes") or ["float32", "float16", "bfloat16"],
            "shapes": cfg.shapes, "seeds": cfg.seeds, "timing": cfg.timing,
            "warmup": cfg.warmup, "runs": cfg.runs}


def _record(ctx, run, rec, status, reason, payload):
    run.flush()
    ctx.store.put_verdict(rec.id, "validate", run.chash, status, reason, payload, environment())
    key = status if status == "ok" else f"{status}:{reason}"
    run.stats[key] = run.stats.get(key, 0) + 1
