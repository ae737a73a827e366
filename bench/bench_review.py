"""The review views on real GPU evidence: run the stages on a small real corpus on a GPU machine,
then print the sample's statement, `review show` for a few sampled records of each kind
(GPU-validated, interpreter-only, unbound) and a packet's size.

    python bench/bench_review.py [--workspace /tmp/review-bench] [--source /work/shared/corpora/llmc-dev-cuda]

Prints the first line of every sampled record (what it is and where it was checked), so a
headline that claims a GPU for a CPU-only record would show at a glance.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(*args: str, ws: str, cfg: str, check: bool = True) -> str:
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, "-m", "sftbuild.cli", *args, "-w", ws, "-c", cfg], env=env,
                       capture_output=True, text=True)
    if check and r.returncode:
        sys.exit(f"sftbuild {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workspace", default="/tmp/review-bench")
    ap.add_argument("--source", action="append",
                    default=None, help="harvest sources (default: llm.c dev/cuda and the liger wheel)")
    a = ap.parse_args()
    sources = a.source or ["/work/shared/corpora/llmc-dev-cuda", "/work/pkgs/liger_kernel-0.8.5-py3-none-any.whl"]
    os.makedirs(a.workspace, exist_ok=True)
    cfg = os.path.join(a.workspace, "bench.yaml")
    with open(cfg, "w") as f:
        f.write("validate: {compile_baseline: true}\nreview: {overlap: 0.1}\n")
    ws = os.path.join(a.workspace, "ws")
    t0 = time.time()
    for stage in (["harvest", *sources], ["describe"], ["validate"], ["dedupe"], ["review", "sample"]):
        print(cli(*stage, "-q", ws=ws, cfg=cfg).strip().splitlines()[0])
    print(f"stages: {time.time() - t0:.0f} s")
    print(cli("review", "status", ws=ws, cfg=cfg))
    rows = [line.split() for line in cli("review", "list", ws=ws, cfg=cfg).splitlines() if line.strip()]
    kinds: dict[str, list[str]] = {}
    for row in rows:
        kinds.setdefault(row[2], []).append(row[0])
    print("sampled by where validated: " + ", ".join(f"{k} {len(v)}" for k, v in sorted(kinds.items())))
    for row in rows:
        print("  " + cli("review", "show", row[0], ws=ws, cfg=cfg).splitlines()[0])
    for where, ids in sorted(kinds.items()):
        print(f"\n===== review show {ids[0]} ({where}) =====")
        print("\n".join(cli("review", "show", ids[0], ws=ws, cfg=cfg).splitlines()[:40]))
    out = os.path.join(a.workspace, "tasks.json")
    print(cli("review", "packet", "--format", "label-studio", out, ws=ws, cfg=cfg).strip())


if __name__ == "__main__":
    main()
