"""Harvest a Triton package, bind its records by probing, validate them, print the funnel.

One command on a GPU machine (probes and validation run in the GPU workers):

    python bench/bench_probe.py /work/pkgs/liger_kernel-0.8.5-py3-none-any.whl
    python bench/bench_probe.py /work/pkgs/flag_gems-5.0.2-py3-none-any.whl --sample 400 --budget 300

`--budget` stops probing after that many seconds (the rest count as unprobed) so the run fits a
time limit; `--sample N` probes a seeded random sample (flag_gems has ~1500 records).

Without a GPU (`--cpu`) every probe and validation runs in the Triton interpreter in a
one-shot sandbox (fp32 and fp16), one record at a time, `--seconds` each.

The harvest goes into `--workspace` (a fresh temporary one by default) through the
harvest stage; bindings are attached to the records in memory (the bind stage stores
them); validate is the pipeline the validate stage runs. The funnel counts records:
harvested, with entry points, bound (by op), reached a verdict, validated ok, and the
drop reasons of the rest.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sftbuild import config as config_mod  # noqa: E402
from sftbuild.context import Context  # noqa: E402
from sftbuild.executor import LocalExecutor, WorkerFailure  # noqa: E402
from sftbuild.harvest import stage as harvest_stage  # noqa: E402
from sftbuild.bind.binders.probed import Probed  # noqa: E402
from sftbuild.store import Store  # noqa: E402
from sftbuild.validate import pipeline  # noqa: E402
from sftbuild.trial.compile import find_nvcc  # noqa: E402
from sftbuild.sandbox import run_isolated  # noqa: E402


def harvest(spec: str, workspace: str, quiet: bool):
    cfg = config_mod.load(None)
    store = Store(workspace)
    ex = LocalExecutor(progress=not quiet)
    ctx = Context(store=store, config=cfg, executor=ex, echo=print, progress=not quiet)
    harvest_stage.run(ctx, [spec])
    return ctx, [r for r in store.alive("describe") if r.language == "triton"]


def probe_all(ctx, records, cpu: bool, seconds: float, limit: int | None, budget: float | None = None):
    binder = Probed()
    stop = time.time() + budget if budget else None
    dtypes = ["float32", "float16"] if cpu else ["float32", "float16", "bfloat16"]
    plans = []
    out = {r.id: r for r in records[:limit]}  # records are frozen: each result is a new one

    def unbound(r, why):
        out[r.id] = dataclasses.replace(r, entry={**r.entry, "unbound": why})

    for r in records[:limit]:
        task = binder.plan(r, dtypes=dtypes, seconds=seconds)
        if task is None:
            unbound(r, "no entry point launches its kernels")
        elif not task.shortlist:  # the probe would say so too, after starting a process
            unbound(r, "no candidate reference")
        else:
            plans.append((r, task))
    by_id = {r.id: r for r, _ in plans}
    tasks = [t for _, t in plans]
    if cpu:
        results = ((t, run_isolated(binder.task_fn, t, seconds + 60, env={"TRITON_INTERPRET": "1"})) for t in tasks)
    else:
        from sftbuild.bind.probe import probe

        results = ctx.executor.map_gpu(probe, tasks, timeout=seconds + 60, desc="probe")
    done = set()
    for i, (task, res) in enumerate(results):
        rec = by_id[task.id]
        done.add(rec.id)
        if isinstance(res, WorkerFailure):
            res = {"unbound": f"probe {res.kind}: {res.detail[-200:]}"}
        b = binder.accept(rec, res)
        if b:
            out[rec.id] = dataclasses.replace(rec, binding=binder.binding(b))
        else:
            unbound(rec, str(res.get("unbound"))[:300])
        print(f"[{i + 1}/{len(tasks)}] {rec.name}: " + (f"bound {b['op']} via {b['call']['entry']} {b['evidence']}"
                                                        if b else f"unbound: {out[rec.id].entry['unbound'][:160]}"),
              flush=True)
        if stop and time.time() > stop:
            print(f"probe budget of {budget:.0f} s spent; the rest stay unprobed", flush=True)
            break
    for r, _ in plans:
        if r.id not in done:
            unbound(r, "not probed (time budget)")
    return list(out.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="a wheel, sdist, folder or pip:NAME==VER")
    ap.add_argument("--workspace", default=None)
    ap.add_argument("--cpu", action="store_true", help="interpreter only (no GPU)")
    ap.add_argument("--seconds", type=float, default=120.0, help="probe time per record")
    ap.add_argument("--limit", type=int, default=None, help="first N records only")
    ap.add_argument("--sample", type=int, default=None, help="a seeded random sample of N records")
    ap.add_argument("--budget", type=float, default=None, help="seconds for all probes; the rest stay unprobed")
    ap.add_argument("--no-validate", action="store_true")
    ap.add_argument("--json", default=None, help="write per-record results here")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    workspace = args.workspace or tempfile.mkdtemp(prefix="sftbuild_probe_bench_")
    t0 = time.time()
    ctx, records = harvest(args.source, workspace, args.quiet)
    print(f"harvested {len(records)} Triton records into {workspace} ({time.time() - t0:.0f} s)")
    if args.sample and args.sample < len(records):
        records = random.Random(0).sample(records, args.sample)
        print(f"probing a sample of {len(records)} records")
    records = probe_all(ctx, records, args.cpu, args.seconds, args.limit, args.budget)
    t1 = time.time()
    verdicts = {}
    if not args.no_validate:
        cfg = ctx.config.validate
        if args.cpu:
            cfg = dataclasses.replace(cfg, cpu_interpret=True, timing=False)
        cache = os.path.join(workspace, "cache", "compile")
        nvcc = "" if args.cpu else _nvcc(cfg.nvcc)
        for rec, status, reason, payload in pipeline.validate(records, cfg, ctx.executor, cache, nvcc):
            verdicts[rec.id] = (status, reason, str(payload.get("detail") or payload.get("why") or "")[:200])
    report(records, verdicts, time.time() - t0, time.time() - t1, args.json)
    ctx.executor.close()


def report(records, verdicts, total_s, validate_s, path) -> None:
    n = len(records)
    with_entry = sum(1 for r in records if r.entry.get("entry_points"))
    bound = [r for r in records if r.binding]
    ops = collections.Counter(r.binding.op for r in bound)
    reasons = collections.Counter((v[0], v[1]) for v in verdicts.values())
    gpu_verdict = sum(1 for r in bound if verdicts.get(r.id, ("", ""))[0] in ("ok", "dropped")
                      and verdicts[r.id][1] not in ("unbound",))
    ok = sum(1 for v in verdicts.values() if v[0] == "ok")
    pct = (lambda k: f"{k} ({100 * k / n:.0f}%)") if n else str
    print("\n=== funnel ===")
    print(f"records            {n}")
    print(f"with entry points  {pct(with_entry)}")
    print(f"bound by probing   {pct(len(bound))}  {dict(ops.most_common())}")
    print(f"reached a verdict  {pct(gpu_verdict)}  (bound, then judged past the static checks and compile)")
    print(f"validated ok       {pct(ok)}")
    print(f"verdicts           {dict(reasons.most_common())}")
    unb = collections.Counter(_short(r.entry.get("unbound", "")) for r in records if not r.binding)
    print(f"unbound reasons    {dict(unb.most_common(12))}")
    print(f"time               {total_s:.0f} s total, {validate_s:.0f} s validate")
    if path:
        rows = [{"id": r.id, "name": r.name, "path": r.provenance.get("path"), "binding": r.binding.to_dict() if r.binding else None,
                 "unbound": r.entry.get("unbound"), "verdict": verdicts.get(r.id)} for r in records]
        with open(path, "w") as f:
            json.dump(rows, f, indent=1, default=str)


def _nvcc(configured: str) -> str:
    """nvcc when present (the compile gate reads resources with cuobjdump); Triton runs without it."""
    try:
        return find_nvcc(configured) or ""
    except Exception:
        return ""


def _short(reason: str) -> str:
    reason = reason.split(": ", 1)[-1] if " vs " in reason else reason
    return reason.split(":")[0][:60]


if __name__ == "__main__":
    main()
