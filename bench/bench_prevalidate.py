"""What dedupe before validation costs and saves (not a test).

    /work/venv/bin/python bench/bench_prevalidate.py [--n 5000] [--dup-rate 0.3] [--workers 2] [--join 1]

Puts N synthetic kernels (bench_dedupe's generator: CUDA and Triton, with planted near duplicates)
in a fresh workspace as if harvest, bind and describe had passed them, then times:
  cluster      `sftbuild dedupe` before validation: filters, signatures, LSH, clusters, stored
               (with --workers > 1 this includes starting the CPU pool, which validate's compile
               step then reuses);
  unchanged    the same again, which `sftbuild validate` does first on every run;
  validate     the validate stage's own bookkeeping with every check replaced by an instant ok
               verdict (the GPU's work is not timed): rounds, verdicts and held-back results;
  without      the same bookkeeping with no clusters stored, every record checked.
and prints how many records reach the GPU with and without clusters, and the peak memory of this
process and of its largest child. `--join K` makes each record K kernels long (about 2 KB each), as
records that carry a whole module are.
"""
from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time

from bench_dedupe import OPS, make_docs

from sftbuild.config import Config
from sftbuild.context import Context
from sftbuild.dedupe import prevalidate
from sftbuild.executor import LocalExecutor
from sftbuild.record import Record
from sftbuild.store import Store
from sftbuild.trial import compile as C
from sftbuild.validate import pipeline
from sftbuild.validate import stage as validate


def instant(records, cfg, executor, cache_dir, nvcc=""):
    """Every record ok at once: only the stage's bookkeeping is timed."""
    for r in records:
        yield r, "ok", None, {"speedup": 1.0}


def workspace(root: str, n: int, dup_rate: float, workers: int, join: int = 1) -> Context:
    docs, _ = make_docs(n, dup_rate=dup_rate)
    if join > 1:  # each record its own text, then others' (duplicates stay duplicates: same start, same others)
        texts = [d.text for d in docs]
        for i, d in enumerate(docs):
            d.text = texts[i] + "".join(texts[(i * 7 + j * 13) % n] for j in range(1, join))
    recs = [Record(language="cuda" if d.language == "cuda" else "triton", code=d.text, source="bench",
                   entry={"kernels": [d.id]}, binding={"kind": "op", "op": d.op or OPS[0], "how": "declared"},
                   provenance={"license": "MIT", "source_kind": "git"}) for d in docs]
    store = Store(root)
    store.add_records(recs)
    for st in ("harvest", "bind", "describe"):
        store.set_stage_config(st, "bench", {})
        store.put_results([(r.id, st, "bench", "ok", None, {}) for r in recs])
    ex = LocalExecutor(cpu_workers=workers, gpus="none", progress=False)
    return Context(store=store, config=Config(), executor=ex, echo=lambda s: None, progress=False)


def timed(label: str, fn):
    t = time.perf_counter()
    out = fn()
    print(f"{label:10s} {time.perf_counter() - t:7.2f} s", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--dup-rate", type=float, default=0.3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--join", type=int, default=1, help="kernels per record")
    args = ap.parse_args(argv)
    pipeline.validate = instant
    C.find_nvcc = lambda configured="": "nvcc"
    with tempfile.TemporaryDirectory() as tmp:
        ctx = workspace(tmp + "/with", args.n, args.dup_rate, args.workers, args.join)
        report = timed("cluster", lambda: prevalidate.run(ctx))
        timed("unchanged", lambda: prevalidate.run(ctx))
        stats = timed("validate", lambda: validate.run(ctx))
        bare = workspace(tmp + "/without", args.n, args.dup_rate, args.workers, args.join)
        plain = timed("without", lambda: validate.run(bare))
        for c in (ctx, bare):
            c.executor.close()
            c.store.close()
    c = report["counts"]
    print(f"{c['input']} records, {c['in_clusters']} in {c['clusters']} clusters: the GPU checks "
          f"{stats.get('ok', 0)} (without clusters {plain.get('ok', 0)}); "
          f"held back {stats.get('waiting:duplicate', 0)}")
    peak = {w: resource.getrusage(getattr(resource, f"RUSAGE_{w.upper()}")).ru_maxrss // 1024 for w in ("self", "children")}
    print(f"peak memory: this process {peak['self']} MB, its largest child {peak['children']} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
