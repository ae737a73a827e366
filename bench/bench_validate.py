"""Validate one mixed set (CUDA and Triton) with sftbuild and with a KernelBench-style load_inline
harness, side by side, on a GPU machine. Prints samples/hour for each, the ratio, and CUDA compile p50.

    python bench/bench_validate.py [--n 48] [--baseline-subset 4]

The load_inline side runs a subset (each sample a fresh process and a fresh build dir, as
KernelBench does) and is extrapolated to the full set; the output says so.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sftbuild.config import ValidateConfig  # noqa: E402
from sftbuild.executor import LocalExecutor  # noqa: E402
from sftbuild.record import Record  # noqa: E402
from sftbuild.validate import compile as C  # noqa: E402
from sftbuild.validate import pipeline  # noqa: E402
from tests.redteam import cases as RT  # noqa: E402


def samples(n: int) -> list[dict]:
    """Twins and red-team cases, renamed and re-blocked so every sample is distinct code."""
    base = [c.record for c in RT.cases() if c.name not in ("hang",)]
    out, i = [], 0
    while len(out) < n:
        rec = dict(base[i % len(base)])
        k = i // len(base)
        if k:
            rec["code"] = rec["code"].replace('name="rt_', f'name="v{k}_rt_') + f"\n# variant {k}\n"
        out.append(rec)
        i += 1
    return out


KB_RUNNER = r'''
import sys, tempfile, torch
src, ref = open(sys.argv[1]).read(), open(sys.argv[2]).read()
from torch.utils import cpp_extension
ns, rns = {}, {}
exec(ref, rns)
exec(src, ns)
torch.manual_seed(0); m = rns["Model"](*rns["get_init_inputs"]()).cuda()
torch.manual_seed(0); c = ns["ModelNew"](*rns["get_init_inputs"]()).cuda()
for s in range(5):
    torch.manual_seed(s); xs = [x.cuda() for x in rns["get_inputs"]()]
    torch.testing.assert_close(c(*xs), m(*xs), atol=1e-2, rtol=1e-2)
'''


def kernelbench_style(recs, timeout=300) -> list[float]:
    times = []
    for rec in recs:
        with tempfile.TemporaryDirectory() as d:
            for name, text in (("cand.py", rec["code"]), ("ref.py", rec["binding"]["reference"]),
                               ("run.py", KB_RUNNER)):
                open(os.path.join(d, name), "w").write(text)
            t = time.monotonic()
            env = {**os.environ, "TORCH_EXTENSIONS_DIR": os.path.join(d, "ext")}  # cold, like a fresh sample
            try:
                subprocess.run([sys.executable, "run.py", "cand.py", "ref.py"], cwd=d, env=env, timeout=timeout,
                               capture_output=True)
            except subprocess.TimeoutExpired:
                pass
            times.append(time.monotonic() - t)
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--baseline-subset", type=int, default=4)
    args = ap.parse_args()
    recs = samples(args.n)
    cfg = ValidateConfig(memcheck="off", sample_timeout=60, runs=30, warmup=5)
    with tempfile.TemporaryDirectory() as cache:
        t = time.monotonic()
        verdicts = {}
        with LocalExecutor(progress=False) as ex:
            for rec, status, reason, payload in pipeline.validate([Record(source="bench", **r) for r in recs],
                                                                  cfg, ex, cache):
                verdicts[rec.id] = (status, reason, (payload.get("compile") or {}).get("seconds"))
        ours = time.monotonic() - t
        # CUDA compile p50: standalone kernels (cubin) and torch-header samples (inline extensions)
        kernels = [RT.RELU_KERNEL, RT.ROWSUM_KERNEL, RT.MATMUL_KERNEL]
        standalone = []
        for i, k in enumerate(kernels * 3):
            r = C.compile_task({"code": f"#include <cuda_runtime.h>\n// {i}\n{k}", "harness": None,
                                "include_sets": [], "arch": "sm_90", "timeout": 30, "nvcc": "",
                                "cache_dir": cache})
            standalone.append(r["seconds"])
    torch_hdr = [v[2] for v in verdicts.values() if v[2]]
    kb_recs = [r for r in recs if r["language"] == "kernelbench" and "load_inline" in r["code"]][
        : args.baseline_subset]
    kb = kernelbench_style(kb_recs)
    kb_per = statistics.mean(kb) if kb else float("nan")
    ours_per = ours / len(recs)
    print(f"samples: {len(recs)} ({sum(r['language'] == 'triton' for r in recs)} Triton, "
          f"{sum(r['language'] == 'kernelbench' for r in recs)} KernelBench/CUDA)")
    print(f"sftbuild:          {ours:8.1f} s total, {3600 / ours_per:8.0f} samples/hour")
    print(f"load_inline style: {kb_per:8.1f} s/sample on {len(kb)} samples, extrapolated to {len(recs)}: "
          f"{kb_per * len(recs):.0f} s, {3600 / kb_per:8.0f} samples/hour")
    print(f"ratio:             {kb_per / ours_per:8.1f}x (target >= 20x)")
    print(f"CUDA compile p50:  standalone {statistics.median(standalone):.2f} s, "
          f"torch headers {statistics.median(torch_hdr) if torch_hdr else float('nan'):.2f} s (per record, "
          "includes cache hits)")
    outcomes = {}
    for s, r, _ in verdicts.values():
        outcomes[r or s] = outcomes.get(r or s, 0) + 1
    print("verdicts:", outcomes)


if __name__ == "__main__":
    main()
