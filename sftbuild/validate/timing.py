"""Timing: CUDA events, warm-ups, L2 flushed between runs, median and spread, in the worker's process.

The candidate and its baselines (torch eager, optionally torch.compile) are timed
the same way in the same process. Speedups past `max_speedup` or a time under the
memory-bandwidth floor are flagged for review, not dropped.

Each timed run is measured by CUDA events through the callables `CLOCKS` captured when this module
was imported (before any candidate), so a candidate that rebinds `Event.elapsed_time` or
`synchronize` fools no measurement (and is a cheat: sftbuild.validate.pristine holds them). The
candidate's loop is measured a second way: a few calls profiled, the sum of every kernel's own
duration on any stream against the events' time on the caller's stream; work the events did not
wait for (a stream the caller never waits on, a helper thread's launches) makes the kernels' time
exceed the events' and the record is refused (`refused`). A caller's `prep` writes new values into
the candidate's inputs before each timed run (outside the events, before the L2 flush), and its
`check` judges the output of the last timed run against the reference for the values it got: a
result cached once the loop warmed up is a stale one there.

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
import time

import torch
import torch.profiler

# the timing and synchronisation callables, as the process had them before any candidate was imported
CLOCKS = {"Event": torch.cuda.Event, "record": torch.cuda.Event.record, "elapsed_time": torch.cuda.Event.elapsed_time,
          "event_synchronize": torch.cuda.Event.synchronize, "synchronize": torch.cuda.synchronize,
          "perf_counter": time.perf_counter, "profile": torch.profiler.profile}
AGREE, AGREE_MS, PROFILED = 1.5, 0.02, 3  # kernels' own time may pass the events' by 1.5x + 20 us a call

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


def events(fn, warmup: int, runs: int, flush: torch.Tensor, budget_ms: float = BUDGET_MS, prep=None) -> dict:
    with gpu_alone():
        return _events(fn, warmup, runs, flush, budget_ms, prep)


def _events(fn, warmup: int, runs: int, flush: torch.Tensor, budget_ms: float = BUDGET_MS, prep=None) -> dict:
    """Median, p10 and p90 of `runs` timed calls after `warmup` untimed ones, as do_bench sizes its loop
    by time: the first timed call sets how many fit in `budget_ms` (the lock every other worker's timing
    waits on is held for seconds, not minutes, when a call is slow)."""
    if warmup:
        fn()  # the first call may compile, autotune or load lazily
    times = [_timed(fn, flush, prep)]
    n = max(MIN_RUNS, min(runs, int(budget_ms / max(times[0], 1e-3))))
    for _ in range(min(warmup - 1, n)):
        fn()
    times += [_timed(fn, flush, prep) for _ in range(n - 1)]
    times.sort()
    out = {"median": statistics.median(times), "p10": times[len(times) // 10],
           "p90": times[(9 * len(times)) // 10], "runs": n}
    if n < runs:
        out["runs_cut"] = f"{runs} asked; {n} fit in {budget_ms / 1e3:g} s"
    return out


def _timed(fn, flush: torch.Tensor | None, prep=None) -> float:
    if prep is not None:
        prep()
    if flush is not None:
        flush.zero_()
    start, end = CLOCKS["Event"](enable_timing=True), CLOCKS["Event"](enable_timing=True)
    CLOCKS["record"](start)
    fn()
    CLOCKS["record"](end)
    CLOCKS["event_synchronize"](end)
    return CLOCKS["elapsed_time"](start, end)


def disagreement(fn) -> str | None:
    """Why the events' time of `fn` cannot be trusted, or None: PROFILED calls, each timed by events,
    under the profiler; the sum of every kernel's own duration (any stream) may not pass the events'
    sum by more than AGREE x + AGREE_MS a call (module doc)."""
    from torch.profiler import ProfilerActivity

    CLOCKS["synchronize"]()
    with CLOCKS["profile"](activities=[ProfilerActivity.CUDA]) as prof:
        events_ms = sum(_timed(fn, None) for _ in range(PROFILED))
        CLOCKS["synchronize"]()
    kernels_ms = sum(float(getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0) or 0.0)
                     for e in prof.events() if "CUDA" in str(getattr(e, "device_type", ""))) / 1e3
    if kernels_ms > AGREE * events_ms + AGREE_MS * PROFILED:
        return (f"its kernels ran {kernels_ms:.3f} ms on the GPU where the events on the caller's stream saw "
                f"{events_ms:.3f} ms ({PROFILED} calls): work the caller never waits on")
    return None


def _keeping(fn, last: list):
    """`fn` that keeps its latest result in `last` (one element)."""
    def run():
        last[:] = [fn()]
    return run


@functools.lru_cache(maxsize=1)
def peak_bandwidth() -> float:
    """Bytes per second of a large device copy here, a little generous: the floor no kernel beats."""
    a = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = events(lambda: b.copy_(a), 3, 10, torch.empty(1, device="cuda"))
    return 2 * a.numel() / (t["p10"] / 1e3) * 1.25


def compare_times(cand, eager, tensors, task: dict, compile_fn=None, check=None, prep=None) -> dict:
    """Candidate, eager (and compiled) timed alike; `refused` ({reason, why}) where the candidate's times
    cannot be trusted (`disagreement`) or `check(output)` finds the last timed run's output wrong
    (`prep()` runs before each timed candidate run: module doc)."""
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    warmup, runs, budget = task.get("warmup", 10), task.get("runs", 100), task.get("timing_budget_ms", BUDGET_MS)
    last: list = []
    c = events(_keeping(cand, last), warmup, runs, flush, budget, prep)
    e = events(eager, warmup, runs, flush, budget)
    out = {"candidate_ms": c, "eager_ms": e, "speedup": e["median"] / c["median"] if c["median"] > 0 else 0.0}
    why = check(last[-1]) if check is not None and last else None
    if why:
        out["refused"] = {"reason": "cheat", "why": f"the output of the last timed run is wrong ({why}): a result "
                                                    "the timing loop got that the trials did not"}
    else:
        with gpu_alone():
            why = disagreement(cand)
        if why:
            out["refused"] = {"reason": "cheat", "why": f"timing disagrees with the kernels' own durations: {why}"}
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
