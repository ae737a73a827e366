"""The bind stage: every kernel that harvest did not bind gets a binding, or an `unbound` reason.

Between harvest and describe. Records whose source declared a binding, or that harvest bound
exactly (Inductor, KernelBench), keep it. Every other record goes through the configured
binders (`sftbuild.bind.binders`, `bind.binders`) in order; the first binding found is stored
(`store.put_binding`, a `sftbuild.binding.Binding`), and when every binder declines the record
is stored `unbound` with the reason. Either way the record moves on (status ok): validate still
compiles an unbound kernel and drops it as `unbound`.

Static binders answer in this process from the record's text. Binders that must run code
return a task from `plan(record)`; the task runs through `task_fn` in a GPU worker
(`executor.map_gpu`), or without a GPU, for Triton, in an interpreter worker
(`executor.map_interpreted`); harvested code never runs here. The task's result goes to the binder's
`accept(record, result)`; a declined task passes the record on to the next binder.

Resumable like every stage: the key holds the selection, the binders' parameters and data
files (a registry or table change rebinds) and where probes can run (none, interpreter, GPU).
Describe and validate key their results on the binding, so only records whose binding
changed are described and validated again.
"""
from __future__ import annotations

import dataclasses

import importlib
import os

from sftbuild import sandbox
from sftbuild.binding import Binding
from sftbuild.context import Context, StageRun
from sftbuild.executor import WorkerFailure
from sftbuild.bind import binders as B


def run(ctx: Context) -> dict:
    cfg = ctx.config.bind
    binders = B.BINDERS.configured(cfg.binders, "bind.binders")
    conf = {"binders": cfg.binders} if cfg.binders else {}
    if any(b.runs_code for b in binders):
        conf["probe"] = "gpu" if ctx.executor.gpu_count else (
            "interpreter" if ctx.config.validate.cpu_interpret else "none")
    with StageRun(ctx, "bind", conf, extra_key=B.data_hash(binders)) as run:
        done = run.done()
        stored = ctx.store.binding_rows()
        todo = []
        for rec in ctx.store.alive("bind"):
            if rec.id in done:
                continue
            row = stored.get(rec.id)
            if row and row["origin"] == "harvest":  # declared or exact: the source knows best
                run.put(rec.id, "ok", None, {"how": row["how"], "by": "harvest"})
                _tally(run, row["how"])
                continue
            todo.append(rec)
        for rec, found, reason, evidence in bind(todo, binders, ctx, conf.get("probe", "none"), cfg.probe_timeout):
            # a probe's error quotes what the record's code raised: no host secret is stored with it
            reason, evidence = sandbox.without_secrets(reason), sandbox.without_secrets(evidence)
            ctx.store.put_binding(rec.id, found, "bind", reason, evidence)
            payload = {"how": found.how, "by": found.by, "key": found.key} if found else {"unbound": reason}
            run.put(rec.id, "ok", None, payload)
            if found:
                _tally(run, found.how)
            else:
                run.stats["unbound"] = run.stats.get("unbound", 0) + 1
    # every record bind handles ends `ok`, an unbound one too (validate drops it, with the reason): the
    # summary says how many records were handled, then how each ended, not `ok=N` beside `unbound=M`
    stats = dict(run.stats)
    if "ok" in stats:
        stats["records"] = stats.pop("ok")
    return stats


def _tally(run: StageRun, how: str) -> None:
    """Bound records by how, under the names `sftbuild status` shows (declared, exact, inferred, ...)."""
    bound = run.stats.setdefault("bound", {})
    bound[how] = bound.get(how, 0) + 1


def bind(records, binders, ctx=None, probe: str = "none", timeout: float = 300.0):
    """Yield (record, Binding | None, unbound reason | None, evidence) for each record; an unbound
    record's evidence holds `cause`, the cause code of the binder that got furthest (`B.furthest`).

    Binders are tried in order; a running binder's tasks for all waiting records go out as one
    batch, and a record its task did not bind moves on to the next binder."""
    cursor = {r.id: 0 for r in records}  # the next binder each record tries
    declined: dict[str, list[str]] = {r.id: [] for r in records}
    causes: dict[str, list[str]] = {r.id: [] for r in records}  # each decline's cause code (B.CAUSES)
    evidence: dict[str, dict] = {r.id: {} for r in records}
    pending = list(records)
    while pending:
        queued = []  # (record, binder, task): records waiting on a running binder
        for rec in pending:
            found = None
            while cursor[rec.id] < len(binders):
                b = binders[cursor[rec.id]]
                cursor[rec.id] += 1
                if not b.applies(rec):
                    continue
                try:
                    if b.runs_code:
                        task = b.plan(rec)
                        if task is not None:
                            queued.append((rec, b, task))
                            break
                    else:
                        answer = b.bind(rec)
                        if answer:
                            found = b.binding(answer)
                            break
                except Exception as e:  # a binder failing on one record declines it, with the error
                    declined[rec.id].append(f"{b.name} failed: {type(e).__name__}: {e}"[:200])
                    continue
                why = b.why_not(rec)
                declined[rec.id].append(f"{b.name}: {why}" if why else b.name)
                if b.runs_code:  # a static binder's reading of names says less than a probe's plan could
                    causes[rec.id].append(b.cause(rec))
            else:
                cause = B.furthest(causes[rec.id]) if (rec.entry or {}).get("kernels") else "no_entry_point"
                yield rec, None, _reason(rec, declined[rec.id]), {**evidence[rec.id], "cause": cause}
                continue
            if found is not None:
                yield rec, found, None, found.evidence
        pending = []
        for n, result in _run_tasks(queued, ctx, probe, timeout):  # as they finish: each is stored at once
            rec, b, _ = queued[n]
            found, why, ev = _accept(rec, b, result)
            if found is not None:
                yield rec, found, None, found.evidence or ev
                continue
            declined[rec.id].append(f"{b.name}: {why}")
            causes[rec.id].append(result.get("cause") or "no_op_matched" if isinstance(result, dict)
                                  else "no_op_matched")  # a probe that ran and found nothing, or died
            evidence[rec.id] = ev or evidence[rec.id]
            pending.append(rec)


def _reason(rec, declined: list[str]) -> str:
    if not (rec.entry or {}).get("kernels"):
        return "no kernel entry to bind"
    if not declined:
        return f"no binder handles {rec.language} kernels"
    return "no binder found a binding: " + "; ".join(declined)


def _accept(rec, binder, result) -> tuple[Binding | None, str, dict]:
    """(binding, why not, evidence) from one task's result."""
    if isinstance(result, WorkerFailure):
        last = (result.detail.strip().splitlines() or [""])[-1]
        return None, f"probe {result.kind}: {last}"[:300], {}
    if not isinstance(result, dict):
        return None, f"probe returned {type(result).__name__}, not a result", {}
    ev = result.get("evidence") or {}
    if result.get("status") == "dropped":  # the sandbox's own failure report
        return None, f"probe error: {result.get('detail', '')}"[:300], ev
    if result.get("unbound") and not result.get("binding"):
        return None, str(result["unbound"]), ev
    try:
        found = binder.accept(rec, result)
    except Exception as e:
        return None, f"accept failed: {type(e).__name__}: {e}"[:300], ev
    if found is None:
        return None, "its result was not accepted", ev
    return binder.binding(found, ev), "", ev


def _run_tasks(queued, ctx, probe: str, timeout: float):
    """(index into `queued`, result or WorkerFailure) for each task, in the order they finish: GPU
    workers, else the Triton interpreter, else none."""
    device = "cuda" if probe == "gpu" else "cpu"  # where the task runs, for a task that allocates inputs
    items = [{"task_fn": b.task_fn, "task": _within(task, device, timeout), "language": rec.language, "n": n}
             for n, (rec, b, task) in enumerate(queued)]
    if not items:
        return
    if probe == "gpu":
        for item, res in ctx.executor.map_gpu(run_task, items, timeout=timeout, desc="bind", unit="records",
                                              per_gpu=probe_workers(ctx.config.bind, ctx.executor.gpu_count)):
            yield item["n"], res
        return

    runnable = []
    for item in items:  # without a GPU only Triton runs, in the interpreter
        if probe == "interpreter" and item["language"] == "triton":
            runnable.append(item)
        else:
            yield item["n"], {"unbound": "probing this kernel needs a GPU", "cause": "needs_gpu_to_probe"}
    for item, res in ctx.executor.map_interpreted(run_task, runnable, timeout=timeout, desc="bind", unit="records"):
        yield item["n"], res


def _within(task, device: str, timeout: float):
    """A task with the device it runs on (unless it names its own), its own time limit cut to 80% of
    the worker's timeout: it ends itself, unbound, before that timeout would kill the worker (and the
    package it imported). A typed task (sftbuild.bind.tasks) is replaced; a plug-in's dict is merged."""
    cap = round(timeout * 0.8, 1)
    if isinstance(task, dict):
        return {"device": device, **task, **({"time_limit": cap} if task.get("time_limit", 0) > cap else {})}
    if dataclasses.is_dataclass(task):
        return dataclasses.replace(task, device=task.device or device, time_limit=min(task.time_limit, cap))
    return task


def probe_workers(cfg, n_gpus: int) -> int:
    """`bind.probe_workers_per_gpu`, or when 0 three quarters of the cores per GPU, at most 12: a probe
    spends its time in Triton's JIT and the package's import on the CPU, hardly on the GPU (FlagGems'
    488 records bound in well under 300 s with 12 workers on a 16-core H200 host)."""
    return cfg.probe_workers_per_gpu or max(1, min(12, (os.cpu_count() or 2) * 3 // 4 // max(1, n_gpus)))


def run_task(item: dict):
    """In a GPU or interpreter worker: call the binder's `module:function` on its task."""
    mod, _, name = item["task_fn"].partition(":")
    return getattr(importlib.import_module(mod), name)(item["task"])


def _prefork(item: dict) -> None:
    """In a renewing worker's first process: the binder's module imported once, before the processes
    that run the probes are forked from it."""
    importlib.import_module(item["task_fn"].partition(":")[0])


run_task.prefork = _prefork
