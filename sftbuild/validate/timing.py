"""Timing: CUDA events, warm-ups, L2 flushed between runs, median and spread, in the worker's process.

The candidate and its baselines (torch eager, optionally torch.compile) are timed
the same way in the same process. Speedups past `max_speedup` or a time under the
memory-bandwidth floor are flagged for review, not dropped.

Several workers may share a GPU (`validate.workers_per_gpu`): their correctness trials
overlap, but every timed loop holds the GPU's timing lock (an flock on a file named for
the GPU, SFTBUILD_TIMING_LOCK or the temp dir), so no measurement shares the GPU with
another worker's timing.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import statistics
import tempfile

import torch

L2_FLUSH_BYTES = 256 << 20
MAX_SPEEDUP = 50.0


def lock_path() -> str:
    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "all").replace(",", "_")
    return os.environ.get("SFTBUILD_TIMING_LOCK") or os.path.join(
        tempfile.gettempdir(), f"sftbuild-timing-{os.getuid()}-gpu{gpu}.lock")


@contextlib.contextmanager
def gpu_alone():
    """Hold this GPU's timing lock: other workers' timed loops wait; their trials go on."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # this worker's own queued work is not timed, nor waited for under the lock
    with open(lock_path(), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def events(fn, warmup: int, runs: int, flush: torch.Tensor) -> dict:
    with gpu_alone():
        return _events(fn, warmup, runs, flush)


def _events(fn, warmup: int, runs: int, flush: torch.Tensor) -> dict:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return {"median": statistics.median(times), "p10": times[len(times) // 10],
            "p90": times[(9 * len(times)) // 10], "runs": runs}


@functools.lru_cache(maxsize=1)
def peak_bandwidth() -> float:
    """Bytes per second of a large device copy here, a little generous: the floor no kernel beats."""
    a = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = events(lambda: b.copy_(a), 3, 10, torch.empty(1, device="cuda"))
    return 2 * a.numel() / (t["p10"] / 1e3) * 1.25


def compare_times(cand, eager, tensors, task: dict, compile_fn=None) -> dict:
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    warmup, runs = task.get("warmup", 10), task.get("runs", 100)
    c = events(cand, warmup, runs, flush)
    e = events(eager, warmup, runs, flush)
    out = {"candidate_ms": c, "eager_ms": e, "speedup": e["median"] / c["median"] if c["median"] > 0 else 0.0}
    if compile_fn is not None:
        try:
            out["compile_ms"] = events(lambda: compile_fn(*tensors), warmup, runs, flush)
        except Exception as ex:  # torch.compile may not handle every reference; it is a baseline only
            out["compile_error"] = repr(ex)[:300]
    flags = {}
    if out["speedup"] > task.get("max_speedup", MAX_SPEEDUP):
        flags["impossible_speedup"] = round(out["speedup"], 1)
    nbytes = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    floor_ms = nbytes / peak_bandwidth() * 1e3
    if c["median"] < floor_ms:
        flags["below_bandwidth_floor"] = {"ms": c["median"], "floor_ms": floor_ms}
    if flags:
        out["flags"] = flags
    return out
