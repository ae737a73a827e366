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


BUDGET_MS = 2000.0  # timed GPU time per timed loop: a slow call gets fewer runs, never fewer than MIN_RUNS
MIN_RUNS = 5


def events(fn, warmup: int, runs: int, flush: torch.Tensor, budget_ms: float = BUDGET_MS) -> dict:
    with gpu_alone():
        return _events(fn, warmup, runs, flush, budget_ms)


def _events(fn, warmup: int, runs: int, flush: torch.Tensor, budget_ms: float = BUDGET_MS) -> dict:
    """Median, p10 and p90 of `runs` timed calls after `warmup` untimed ones, as do_bench sizes its loop
    by time: the first timed call sets how many fit in `budget_ms` (the lock every other worker's timing
    waits on is held for seconds, not minutes, when a call is slow)."""
    if warmup:
        fn()  # the first call may compile, autotune or load lazily
    times = [_timed(fn, flush)]
    n = max(MIN_RUNS, min(runs, int(budget_ms / max(times[0], 1e-3))))
    for _ in range(min(warmup - 1, n)):
        fn()
    times += [_timed(fn, flush) for _ in range(n - 1)]
    times.sort()
    out = {"median": statistics.median(times), "p10": times[len(times) // 10],
           "p90": times[(9 * len(times)) // 10], "runs": n}
    if n < runs:
        out["runs_cut"] = f"{runs} asked; {n} fit in {budget_ms / 1e3:g} s"
    return out


def _timed(fn, flush: torch.Tensor) -> float:
    flush.zero_()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


@functools.lru_cache(maxsize=1)
def peak_bandwidth() -> float:
    """Bytes per second of a large device copy here, a little generous: the floor no kernel beats."""
    a = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = events(lambda: b.copy_(a), 3, 10, torch.empty(1, device="cuda"))
    return 2 * a.numel() / (t["p10"] / 1e3) * 1.25


def compare_times(cand, eager, tensors, task: dict, compile_fn=None) -> dict:
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    warmup, runs, budget = task.get("warmup", 10), task.get("runs", 100), task.get("timing_budget_ms", BUDGET_MS)
    c = events(cand, warmup, runs, flush, budget)
    e = events(eager, warmup, runs, flush, budget)
    out = {"candidate_ms": c, "eager_ms": e, "speedup": e["median"] / c["median"] if c["median"] > 0 else 0.0}
    if compile_fn is not None:
        try:
            out["compile_ms"] = events(lambda: compile_fn(*tensors), warmup, runs, flush, budget)
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
