"""Programs at scale: a slice of the Inductor program catalog from harvest through dedupe, on one GPU.

    python bench/bench_programs.py [--programs 300] [--seed 0] [--workspace /tmp/bench-programs]
                                   [--default-size N]

Runs the command line as a user does, in a fresh workspace, each stage timed:

  harvest    Inductor codegen: torch.compile of every program, records built
  bind, describe
  validate   our compile (CPU pool) and GPU validation
  dedupe     near-duplicates collapsed: what is left is what export can ship

Prints the share of the slice's program pairs validated ok, per-kernel records validated ok,
verified and deduped samples per GPU-hour end to end (the whole wall time counts, Inductor's
codegen included), and the projection for the catalog at its default size.
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sftbuild.store import Store  # noqa: E402


def stage(ws: str, *args: str, budget: float | None = None) -> float:
    """Run one stage as a user does; with a `budget`, stop it after that many seconds (stages resume,
    so what it finished stays in the store and is counted)."""
    t = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "sftbuild.cli", *args, "-w", ws, "-q"], capture_output=True,
                           text=True, timeout=budget)
        out, rc = p.stdout + p.stderr, p.returncode
        first = (p.stdout.strip().splitlines() or [''])[0][:150]
    except subprocess.TimeoutExpired:
        out, rc = "", 0
        first = f"stopped at its budget of {budget:.0f} s; what it finished is counted"
    dt = time.monotonic() - t
    print(f"  {args[0]:<9} {dt:7.1f} s  {first}", flush=True)
    if rc:
        print(out[-1500:])
    return dt


def kind_of(rec) -> str:
    kind = rec.binding.kind if rec.binding else None
    return "program pair" if kind in ("kernelbench", "program") else f"{kind or 'unbound'} kernel"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workspace", default="/tmp/bench-programs")
    ap.add_argument("--default-size", type=int, default=0, help="catalog size to project to (default: read it)")
    ap.add_argument("--validate-budget", type=float, default=None,
                    help="seconds validation may take; the rate then counts what it finished in that time")
    a = ap.parse_args()
    shutil.rmtree(a.workspace, ignore_errors=True)
    spec = f"torch-inductor?programs={a.programs}&seed={a.seed}"
    print(f"slice: {spec}")
    t = {"harvest": stage(a.workspace, "harvest", spec)}
    for name in ("bind", "describe", "validate", "dedupe"):
        t[name] = stage(a.workspace, name, budget=a.validate_budget if name == "validate" else None)
    report(a.workspace, a.programs, a.default_size, t)


def report(workspace: str, programs: int, default_size: int, t: dict) -> None:
    """The slice's funnel, time breakdown, rate and projection, from the workspace's store."""
    wall = sum(t.values())
    s = Store(workspace)
    recs = list(s.records())
    val, ded = s.results_for("validate"), s.results_for("dedupe")
    by = collections.defaultdict(collections.Counter)
    for r in recs:
        v = val.get(r.id) or {}
        by[kind_of(r)][v.get("reason") or v.get("status") or "not validated"] += 1
    compile_s = sum(((v.get("payload") or {}).get("compile") or {}).get("seconds", 0) for v in val.values())
    kept = sum(1 for r in recs if (ded.get(r.id) or {}).get("status") == "ok")
    skips = collections.Counter(k["reason"] for k in s.skips())
    # each sample's time in its GPU worker, by phase (pipeline.run_on_gpu), summed over the workers
    phases = collections.Counter()
    for v in val.values():
        phases.update((v.get("payload") or {}).get("seconds") or {})
    n_mc = sum(1 for v in val.values() if "memcheck" in ((v.get("payload") or {}).get("seconds") or {}))
    held = {rid for rid, c in s.clusters().items() if c.get("rank", 0) > 0}  # wait for their cluster's head
    pending = sum(1 for r in recs if r.id not in val and r.id not in held)
    s.close()
    print(f"programs in the slice: {programs}; not made into a pair at harvest: {dict(skips.most_common())}")
    print(f"records: {len(recs)}")
    for k, c in sorted(by.items()):
        n = sum(c.values())
        print(f"  {k}: {n}, ok {c['ok']} ({100 * c['ok'] / max(1, n):.0f}%); {dict(c.most_common(6))}")
    print(f"time: {wall:.0f} s = harvest (Inductor codegen) {t['harvest']:.0f} s + bind/describe "
          f"{t['bind'] + t['describe']:.0f} s + validate {t['validate']:.0f} s (compile, summed over records on "
          f"{os.cpu_count()} CPUs: {compile_s:.0f} s) + dedupe {t['dedupe']:.0f} s")
    done = sum(1 for v in val.values() if "seconds" in (v.get("payload") or {}))
    print(f"GPU worker time, summed over {done} samples that reached a worker: trials {phases['trials']:.0f} s "
          f"({phases['trials'] / max(1, done):.1f} s each), memcheck {phases['memcheck']:.0f} s over {n_mc} samples")
    per_hour = kept / (wall / 3600) if wall else 0
    print(f"verified and deduped samples: {kept}, {per_hour:.0f} per GPU-hour end to end (target >= 1000)")
    if pending:  # validation stopped at its budget: extrapolate the rest at the rate it ran
        f = (len(val) + pending) / max(1, len(val))
        wall, kept = wall + t["validate"] * (f - 1), kept * f
        print(f"validation stopped at its budget with {len(val)} verdicts and {pending} records to go (near "
              f"duplicates held back excluded); at the same rate the whole slice takes {wall:.0f} s and yields "
              f"{kept:.0f} samples")
    if default_size:
        k = default_size / programs
        print(f"projected for the default catalog ({default_size} programs): {kept * k:.0f} samples in "
              f"{wall * k / 3600:.1f} h on one GPU")


if __name__ == "__main__":
    main()
