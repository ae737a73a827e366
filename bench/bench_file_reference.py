"""What a file-reference record costs before its GPU work (not a test). Runs without a GPU.

    PYTHONPATH=$PWD /work/venv/bin/python bench/bench_file_reference.py WORKSPACE [NAME ...] [--all]

For the file-reference records of a bound workspace (`sftbuild harvest`, `bind`), one per source
file unless --all, or those NAMEd, prints a JSON line each:
  compile_s        the harness's build (nvcc, a launchable .so), as validate's compile stage runs it;
  plans, blocks    the trial sizes and block sizes (file_reference.plans, block_sizes);
  trials           sizes x block sizes x seeds (each trial runs the launcher twice, on new values);
  reference_calls  the CPU function's runs: sizes x seeds x 2 (trials.ReferenceCache), and
                   `per_block`: what they were when each block size ran its own;
  reference_s      one CPU run at each size (the harness's host code, as built), and
  reference_total  their sum over every call the trials make.
"""
from __future__ import annotations

import argparse
import json
import time

from sftbuild.trial import file_reference as FR
from sftbuild.store import Store
from sftbuild.trial import compile as C
from sftbuild.trial import harness as H
from sftbuild.trial import trials as T

SEEDS = 2  # validate.seeds' default


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workspace")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--all", action="store_true", help="every record, not one per source file")
    ap.add_argument("--cache", default="/tmp/bench-file-reference", help="the compile cache to use")
    args = ap.parse_args()
    files = set()
    for rec in Store(args.workspace, create=False).records():
        path = (rec.provenance or {}).get("path", "")
        if not rec.binding or rec.binding.how != "file_reference" or (args.names and rec.name not in args.names):
            continue
        if not (args.all or args.names) and path in files:
            continue
        files.add(path)
        print(json.dumps({"name": rec.name, "file": path, **measure(rec, args.cache)}), flush=True)


def measure(rec, cache: str) -> dict:
    b = rec.binding
    ref = b["harness_args"]["ref"]
    res = C.compile_task({"id": rec.id, "code": rec.code, "harness": H.render(rec, H.checks(b)[0], b["dtypes"]),
                          "include_sets": rec.entry.get("include_sets", []), "arch": "sm_90",
                          "headers": rec.entry.get("headers") or {}, "include_dirs": rec.entry.get("include_dirs") or [],
                          "timeout": 300, "nvcc": "", "cache_dir": cache, "link": True})
    if not res["ok"]:
        return {"compile_error": res.get("log", "")[-600:]}
    lib = T.load_file_harness(res["so"])
    plans, blocks = FR.plans(ref, 3), FR.block_sizes(ref)
    seconds = []
    for p in plans:
        host, _ = T._file_buffers(ref, p, 0)
        t0 = time.perf_counter()
        T.file_reference_outputs(lib, ref, p, host)
        seconds.append(round(time.perf_counter() - t0, 3))
    calls = len(plans) * SEEDS * 2
    return {"compile_s": res["seconds"], "cached": res.get("cached"), "plans": len(plans), "blocks": blocks,
            "trials": len(plans) * len(blocks) * SEEDS, "reference_calls": calls,
            "per_block": calls * len(blocks), "reference_s": seconds,
            "reference_total": round(sum(seconds) * SEEDS * 2, 2),
            "per_block_total": round(sum(seconds) * SEEDS * 2 * len(blocks), 2)}


if __name__ == "__main__":
    main()
