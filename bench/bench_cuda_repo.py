"""Funnel of a real CUDA repo (default: llm.c dev/cuda) through harvest, describe and validate (not a test).

    python bench/bench_cuda_repo.py [--repo /work/shared/corpora/llmc-dev-cuda] [--workspace DIR]

One command: harvests the folder as a `dir` source into a fresh workspace, runs describe (which
binds) and validate, and prints kernels harvested (records; kernels merged into one record
count once), compiled %, bound by how, the validate verdicts and the validated-ok count, with
the reasons of what failed. Without a GPU, compiled and bound records wait with `needs_gpu`.
Exits 0; the numbers are the result. Run on the GPU machine from the repository root.
"""
from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
import time
from pathlib import Path

from sftbuild.config import Config
from sftbuild.context import Context
from sftbuild.bind import stage as bind
from sftbuild.describe import stage as describe
from sftbuild.executor import LocalExecutor
from sftbuild.harvest import stage as harvest
from sftbuild.store import Store
from sftbuild.validate import stage as validate

COMPILED_FAILS = {"compile_error", "compile_timeout", "unsafe_include", "compiled_out"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default="/work/shared/corpora/llmc-dev-cuda")
    ap.add_argument("--workspace", default="")
    ap.add_argument("--workers", type=int, default=0, help="CPU workers (0: all cores)")
    args = ap.parse_args()
    ws = Path(args.workspace or tempfile.mkdtemp(prefix="sftbuild-cuda-repo-"))
    if ws.exists() and args.workspace:
        shutil.rmtree(ws)
    ex = LocalExecutor(cpu_workers=args.workers, gpus="auto", progress=False)
    ctx = Context(store=Store(ws), config=Config(), executor=ex, echo=print, progress=False)
    t0 = time.time()
    stats = harvest.run(ctx, [args.repo])
    if stats["errors"]:
        print("harvest errors:", stats["errors"])
    bind.run(ctx)
    describe.run(ctx)
    validate.run(ctx)
    recs = [r for r in ctx.store.records() if r.language == "cuda"]
    res = ctx.store.results_for("validate")
    kernels = sum(len(r.entry.get("kernels") or [r.name]) for r in recs)
    by_how = collections.Counter(r.binding.how if r.binding else "unbound" for r in recs)
    verdicts = collections.Counter((res.get(r.id, {}).get("status"), res.get(r.id, {}).get("reason")) for r in recs)
    failed_compile = sum(1 for r in recs if res.get(r.id, {}).get("reason") in COMPILED_FAILS)
    static = sum(1 for r in recs if res.get(r.id, {}).get("reason") in ("cheat", "forbidden_call", "bad_launch"))
    ok = [r for r in recs if res.get(r.id, {}).get("status") == "ok"]
    ok_kernels = sum(len(r.entry.get("kernels") or [r.name]) for r in ok)
    print(f"\nrepo {args.repo}  workspace {ws}  ({time.time() - t0:.0f} s, gpus: {ex.gpu_count})")
    print(f"records {len(recs)} ({kernels} kernels)")
    print(f"compiled {len(recs) - failed_compile - static}/{len(recs) - static} records "
          f"({100 * (len(recs) - failed_compile - static) / max(1, len(recs) - static):.1f}%), "
          f"{static} dropped by a static rule")
    print("bound by how:", dict(by_how))
    print(f"validated ok: {len(ok)} records ({ok_kernels} kernels)")
    print("verdicts:", {f"{s}:{r}" if r else s: n for (s, r), n in verdicts.most_common()})
    for r in recs:
        v = res.get(r.id, {})
        if v.get("status") == "dropped" and r.binding and r.binding.how == "file_reference":
            detail = (v.get("payload") or {}).get("detail", "")
            print(f"  {r.name:40s} {v.get('reason'):16s} {str(detail)[:150]}")
    ex.close()
    ctx.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
