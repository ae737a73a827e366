"""Harvest speed: a generated corpus of ~1,500 CUDA files (~25 MB) on N cores.

The corpus is deterministic: the installed torch's ATen CUDA headers with their
kernels renamed per copy, padded with comment blocks to a realistic size, plus
synthetic kernel files. Usage:

    python bench/bench_harvest.py [--files 1500] [--workers 2] [--keep DIR]
"""
from __future__ import annotations

import argparse
import random
import re
import shutil
import tempfile
import time
from pathlib import Path

from sftbuild.config import Config
from sftbuild.context import Context
from sftbuild.executor import LocalExecutor
from sftbuild.harvest import sources as S
from sftbuild.harvest import stage
from sftbuild.store import Store

SYNTH = """// synthetic kernel file {i}
#include <cuda_runtime.h>
#define TILE_{i} {tile}

template <typename T>
__device__ __forceinline__ T op_{i}(T a, T b) {{ return a * {k} + b; }}

template <typename T, int BLOCK>
__launch_bounds__(BLOCK)
__global__ void synth_kernel_{i}(const T* x, const T* y, T* out, int n) {{
  int idx = blockIdx.x * BLOCK + threadIdx.x;
  for (int j = idx; j < n; j += gridDim.x * BLOCK) {{
    out[j] = op_{i}(x[j], y[j]) + TILE_{i};
  }}
}}

void launch_{i}(const float* x, const float* y, float* out, int n, cudaStream_t s) {{
  synth_kernel_{i}<float, 256><<<(n + 255) / 256, 256, 0, s>>>(x, y, out, n);
}}
"""


def make_corpus(root: Path, n_files: int, target_bytes: int) -> tuple[int, int]:
    rng = random.Random(0)
    inc = S.torch_root() / "include" / "ATen" / "native" / "cuda"
    aten = [(p.name, p.read_text(encoding="utf-8")) for p in sorted(inc.glob("*.cuh"))]
    aten = [(n, t) for n, t in aten if "__global__" in t]
    n_aten = n_files // 3
    per_file = target_bytes // n_files
    total = 0
    for i in range(n_files):
        if i < n_aten:
            name, text = aten[i % len(aten)]
            text = re.sub(r"\b(\w+_kernel|\w+KVInPlace|compute_mode)\b", lambda m: f"{m.group(1)}_v{i}", text)
            path = root / f"aten_{i:04d}" / name
        else:
            text = SYNTH.format(i=i, tile=rng.choice([16, 32, 64]), k=rng.randint(2, 9))
            path = root / f"synth_{i // 100:02d}" / f"kernel_{i:04d}.cu"
        pad = max(0, per_file - len(text))
        text += "\n/*\n" + ("  padding comment line for a realistic file size\n" * (pad // 50)) + "*/\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        total += len(text)
    return n_files, total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1500)
    ap.add_argument("--mb", type=float, default=25.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--keep", default="")
    args = ap.parse_args()
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="bench_harvest_"))
    corpus = tmp / "corpus"
    if corpus.exists():
        shutil.rmtree(corpus)
    n, size = make_corpus(corpus, args.files, int(args.mb * 1e6))
    ws = tmp / "ws"
    shutil.rmtree(ws, ignore_errors=True)
    store = Store(ws)
    cfg = Config()
    cfg.harvest.file_filters = {"oversize": {"max_bytes": 10_000_000}}
    ex = LocalExecutor(cpu_workers=args.workers, gpus="none", progress=False)
    ctx = Context(store=store, config=cfg, executor=ex, echo=print, progress=False)
    t0 = time.perf_counter()
    stats = stage.run(ctx, [str(corpus)])
    dt = time.perf_counter() - t0
    ex.close()
    kernels = stats["sources"].get(str(corpus), 0)
    print(f"corpus: {n} files, {size / 1e6:.1f} MB; harvested {kernels} kernels "
          f"({store.count_records()} records) in {dt:.2f} s on {args.workers} workers: "
          f"{n / dt:.0f} files/s, {size / 1e6 / dt:.1f} MB/s")
    store.close()
    if not args.keep:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
