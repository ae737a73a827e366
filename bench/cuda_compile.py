"""How many records of a harvested CUDA workspace compile on this machine (no GPU needed): each
record's own code through the compile gate validate uses (its headers, include sets and stand-ins),
with the reasons of those that do not. For the compile column of the CUDA yield table on a CPU host
(validate drops an unbound record before compiling it).

    sftbuild harvest SOURCE_DIR -w WS && python bench/cuda_compile.py WS [--arch sm_90] [--workers 2] [--timeout S]
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor

from sftbuild.config import Config
from sftbuild.context import find_nvcc
from sftbuild.store import Store
from sftbuild.validate.pipeline import compile_any, compile_task


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workspace")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=0, help="seconds per compile (default: validate's)")
    args = ap.parse_args()
    cfg = Config().validate
    cfg.arch = args.arch
    cfg.compile_timeout = args.timeout or cfg.compile_timeout
    cache = os.path.join(tempfile.gettempdir(), "sftbuild-compile-bench")
    s = Store(args.workspace)
    recs = [r for r in s.records() if r.language == "cuda"]
    s.close()
    nvcc = find_nvcc()
    # the record's own code, as harvested (no harness)
    tasks = [dataclasses.replace(compile_task(r, cfg, nvcc, cache), harnesses=[]) for r in recs]
    with ThreadPoolExecutor(args.workers) as pool:
        results = list(pool.map(compile_any, tasks))
    why = collections.Counter(res.get("reason") for res in results if not res.get("ok"))
    ok = sum(bool(res.get("ok")) for res in results)
    print(f"records {len(recs)}, compile {ok} ({100 * ok / max(1, len(recs)):.0f}%)"
          + "".join(f", {k} {v}" for k, v in why.most_common()))
    for r, res in zip(recs, results):
        if not res.get("ok"):
            print(f"  {r.provenance.get('path')}: {r.entry['kernels'][0]}: {res.get('reason')}: "
                  f"{str(res.get('where') or res.get('log') or '')[:160]}")


if __name__ == "__main__":
    main()
