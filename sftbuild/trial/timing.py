"""Timing: CUDA events, warm-ups, L2 flushed between runs, median and spread, in the worker's process.

The candidate and its baselines (torch eager, optionally torch.compile) are timed
the same way in the same process. Speedups past `max_speedup` or a time under the
memory-bandwidth floor are flagged for review, not dropped.

Each timed run is measured by CUDA events through the callables `CLOCKS` captured when this module
was imported (before any candidate), so a candidate that rebinds `Event.elapsed_time` or
`synchronize` fools no measurement (and is a cheat: sftbuild.trial.pristine holds them). The
candidate is measured a second way, on the GPU's own timeline: a few calls profiled, each alone on
the GPU between two marker kernels on the caller's stream (the end marker right behind the end event).
A kernel, copy or set of the call that ends after the end marker started is work the caller never
waited for (a stream it does not wait on, however made; a helper thread's launch), and a call whose
kernels span more than its events' time disagrees with them: either refuses the record (`refused`).
Timestamps from one GPU clock are compared, never sums of durations: a host's launch overhead hides
a short kernel in a sum, and honest concurrent streams overlap in one. A caller's `prep` writes new
values into the candidate's inputs before each timed run (outside the events, before the L2 flush), and its
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
import warnings

import torch
import torch.profiler

from sftbuild.trial_types import TrialTask

# the timing and synchronisation callables, as the process had them before any candidate was imported
CLOCKS = {"Event": torch.cuda.Event, "record": torch.cuda.Event.record, "elapsed_time": torch.cuda.Event.elapsed_time,
          "event_synchronize": torch.cuda.Event.synchronize, "synchronize": torch.cuda.synchronize,
          "perf_counter": time.perf_counter, "profile": torch.profiler.profile, "sleep": torch.cuda._sleep}
AGREE, AGREE_MS, PROFILED = 1.5, 0.02, 3  # a call's kernels may span its events' time x 1.5 + 20 us
SLACK_MS = 0.005  # a call's kernel may end this long after the caller's stream finished it: timestamps' jitter
MARK_CYCLES = 1000  # a marker kernel spins ~1 us

L2_FLUSH_BYTES = 256 << 20


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
    """Why the events' time of `fn` cannot be trusted, or None: PROFILED calls under the profiler, each
    timed by events and bracketed by marker kernels on the caller's stream (module doc); `judge` reads
    the GPU's timeline."""
    from torch.profiler import ProfilerActivity

    times = []
    CLOCKS["synchronize"]()
    with warnings.catch_warnings():
        # torch 2.10-2.11 warn of profiling cycles where none are used (fixed upstream); the events are whole
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        with CLOCKS["profile"](activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(PROFILED):
                CLOCKS["sleep"](MARK_CYCLES)  # the call's start marker, alone on an idle GPU...
                CLOCKS["synchronize"]()  # ...and over before the call launches anything
                start, end = CLOCKS["Event"](enable_timing=True), CLOCKS["Event"](enable_timing=True)
                CLOCKS["record"](start)
                fn()
                CLOCKS["record"](end)
                CLOCKS["sleep"](MARK_CYCLES)  # the end marker starts once the caller's stream has done the call
                CLOCKS["event_synchronize"](end)
                times.append(CLOCKS["elapsed_time"](start, end))
                CLOCKS["synchronize"]()  # every stream idle: this call's work, waited for or not, is over
    return judge(_device_work(prof), times)


def _device_work(prof) -> list[tuple[str, float, float]]:
    """(name, start us, end us) of every kernel, copy and set the profiler saw on the GPU; its waits
    ("Context Sync", "Stream Wait Event", ...: CUPTI's synchronisation records) are no work."""
    return [(e.name, float(e.time_range.start), float(e.time_range.end)) for e in prof.events()
            if "CUDA" in str(getattr(e, "device_type", "")) and not e.name.endswith((" Sync", " Wait Event"))]


def judge(work: list[tuple[str, float, float]], times: list[float]) -> str | None:
    """Why the GPU's timeline (`work`: (name, start us, end us)) of len(times) bracketed calls disagrees
    with their events' `times` (ms), or None. The earliest work is the first start marker (it ran alone),
    so markers are the work of its name: two a call, in order. A call's work starts after its start
    marker; none of it may end more than SLACK_MS after its end marker starts (the caller's stream had
    finished the call there), and its span may not pass the events' time by more than AGREE x + AGREE_MS.
    No work at all: the profiler cannot see this GPU, and there is no second clock (None)."""
    if not work:
        return None
    work = sorted(work, key=lambda w: w[1])
    mark = work[0][0]
    marks = [w for w in work if w[0] == mark]
    if len(marks) != 2 * len(times):
        return (f"the profiler saw {len(marks)} kernels named as the timer's {2 * len(times)} markers "
                f"({mark[:60]}): the calls' own kernels cannot be told apart")
    calls = [w for w in work if w[0] != mark]
    for i, ms in enumerate(times):
        begin, finish = marks[2 * i][1], marks[2 * i + 1][1]
        until = marks[2 * i + 2][1] if 2 * i + 2 < len(marks) else float("inf")
        mine = [w for w in calls if begin <= w[1] < until]
        if not mine:
            continue
        last = max(mine, key=lambda w: w[2])
        if last[2] - finish > SLACK_MS * 1e3:
            return (f"call {i + 1}'s kernel {last[0][:80]} ended {(last[2] - finish) / 1e3:.3f} ms after the "
                    "caller's stream had finished the call (its events saw "
                    f"{ms:.3f} ms): work the caller never waits on, on a stream it does not wait for or "
                    "launched after the call returned")
        span = (last[2] - min(w[1] for w in mine)) / 1e3
        if span > AGREE * ms + AGREE_MS:
            return f"call {i + 1}'s kernels ran {span:.3f} ms on the GPU where its events saw {ms:.3f} ms"
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


def compare_times(cand, eager, tensors, task: TrialTask, compile_fn=None, check=None, prep=None) -> dict:
    """Candidate, eager (and compiled) timed alike; `refused` ({reason, why}) where the candidate's times
    cannot be trusted (`disagreement`) or `check(output)` finds the last timed run's output wrong
    (`prep()` runs before each timed candidate run: module doc)."""
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    warmup, runs, budget = task.warmup, task.runs, task.timing_budget_ms or BUDGET_MS
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
            out["refused"] = {"reason": "cheat", "why": f"the timing disagrees with the GPU's own timeline: {why}"}
    if compile_fn is not None:
        try:
            out["compile_ms"] = events(lambda: compile_fn(*tensors), warmup, runs, flush, budget)
        except Exception as ex:  # torch.compile may not handle every reference; it is a baseline only
            out["compile_error"] = repr(ex)[:300]
    flags = {}
    if out["speedup"] > task.max_speedup:
        flags["impossible_speedup"] = round(out["speedup"], 1)
    nbytes = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    floor_ms = nbytes / peak_bandwidth() * 1e3
    if c["median"] < floor_ms:
        flags["below_bandwidth_floor"] = {"ms": c["median"], "floor_ms": floor_ms}
    if flags:
        out["flags"] = flags
    return out
