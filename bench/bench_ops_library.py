"""Check of the reference library on a device (not a test): every op's inputs made on the host and
moved to the device, its reference run at each dtype and in float64 there, and torch's own result
at the dtype compared with the float64 one under the op's tolerance.

    python bench/bench_ops_library.py [--device cuda] [--shapes 2] [--only opdb|hand|all]

Prints the op_db load and scan times, then counts: ops checked, passed, and each failure (an
exception on the device, or torch's own kernel out of the op's tolerance at a dtype) with its
reason, and the seconds taken. On a torch version with no cached catalogue the first load scans
op_db (about a minute on 2 CPU cores).
"""
from __future__ import annotations

import argparse
import math
import time
import warnings

import torch

from sftbuild import ops
from sftbuild.ops import opdb


def check(op, dev, shapes: int) -> str | None:
    pool = sorted(op.shape_pool, key=math.prod)[:shapes]
    for shape in pool:
        for dtype in op.dtypes:
            params = dict(op.params)
            inputs = [t.to(dev) for t in op.make_inputs(shape, dtype, "contiguous", torch.Generator().manual_seed(0),
                                                        params)]
            nat = ops.as_outputs(op.run_reference(inputs, params))
            r64 = ops.as_outputs(op.run_reference(ops.upcast(inputs), params))
            for o, r in zip(nat, r64):
                ok, stats = ops.compare(o, r, dtype, op.tolerance, native=o)
                if not ok:
                    return f"{dtype} {list(shape)}: {stats.get('why')}"
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shapes", type=int, default=2)
    ap.add_argument("--only", choices=["opdb", "hand", "all"], default="all")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    t = time.time()
    db = opdb.load()
    print(f"op_db: {len(db)} ops, {len(opdb.SKIPPED)} skipped, loaded in {time.time() - t:.1f}s "
          f"(catalogue {opdb.cache_path()})")
    pool = {**(db if a.only in ("opdb", "all") else {}), **(ops.all_ops() if a.only in ("hand", "all") else {})}
    t, bad = time.time(), {}
    for name in sorted(pool):
        try:
            why = check(pool[name], a.device, a.shapes)
        except Exception as e:  # a reference that cannot run on this device
            why = f"{type(e).__name__}: {str(e)[:160]}"
        if why:
            bad[name] = why
    print(f"device {a.device}: {len(pool)} ops checked, {len(pool) - len(bad)} passed, {len(bad)} failed, "
          f"{time.time() - t:.1f}s")
    for name, why in bad.items():
        print(f"  {name}: {why}")


if __name__ == "__main__":
    main()
