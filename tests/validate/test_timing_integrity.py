"""Timing nobody can fake: the timer's clocks are the process's own from before any candidate, a
candidate rebinding one is a cheat, and a refused timing drops the record."""
from __future__ import annotations

import contextlib
import time
import types

import pytest
import torch

from sftbuild.trial_types import TrialTask
from sftbuild.trial import loop, pristine, timing
from tests.validate.test_trial_loop import Fake


@pytest.mark.parametrize("owner, attr", [(torch.cuda.Event, "elapsed_time"), (torch.cuda, "synchronize"),
                                         (time, "perf_counter"), (timing.CLOCKS, "elapsed_time")])
def test_rebinding_a_timing_or_sync_callable_is_a_change(monkeypatch, owner, attr):
    world = pristine.Pristine()
    if isinstance(owner, dict):
        monkeypatch.setitem(owner, attr, lambda *a: 0.1)
    else:
        monkeypatch.setattr(owner, attr, lambda *a: 0.1)
    assert any(attr in c and "rebound" in c for c in world.changes())


def test_a_refused_timing_drops_the_record_with_its_reason():
    class Timed(Fake):
        def timed(self):
            return "main", {"speedup": 9.0, "refused": {"reason": "cheat", "why": "its kernels ran 3 ms"}}

    out = loop.run([Timed()], TrialTask("t", "triton", "", seeds=1, timing=True))
    assert (out["status"], out["reason"], out["detail"]) == ("dropped", "cheat", "its kernels ran 3 ms")
    assert loop.run([Fake()], TrialTask("t", "triton", "", seeds=1, timing=True))["status"] == "ok"


MARK = "at::cuda::(anonymous namespace)::spin_kernel(long)"


def _calls(*calls):
    """A GPU timeline of bracketed calls, each [(name, start us, end us)] of its own work from t=0, with
    the end marker where the caller's stream finished (`finish`); calls 1 ms apart."""
    work = []
    for i, (finish, mine) in enumerate(calls):
        t = i * 1000.0
        work += [(MARK, t, t + 1), (MARK, t + finish, t + finish + 1)]
        work += [(n, t + a, t + b) for n, a, b in mine]
    return work


def test_the_gpu_timeline_refuses_work_the_caller_never_waited_for():
    honest = _calls((60, [("relu", 10, 55)]), (58, [("relu", 9, 54)]))
    assert timing.judge(honest, [0.05, 0.05]) is None
    # a side stream the caller waited on, overlapping its own kernel: sums would pass the events, spans do not
    waited = _calls((260, [("a", 10, 250), ("b_on_side", 12, 255)]))
    assert timing.judge(waited, [0.25]) is None
    # launched on a stream nobody waits for: the events (host launch overhead) see 20 us, the kernel runs 400
    hidden = _calls((30, [("relu_on_side", 12, 412)]))
    assert "never waits on" in timing.judge(hidden, [0.02])
    # an honest first call, then a hidden kernel in the second: blamed on the call that launched it
    assert "call 2's kernel late" in timing.judge(_calls((60, [("relu", 10, 55)]), (30, [("late", 10, 450)])),
                                                  [0.05, 0.02])
    # the events saw less than the kernels took (a clock the candidate reached): the two clocks disagree
    assert "events saw 0.010 ms" in timing.judge(_calls((500, [("k", 5, 495)])), [0.01])
    # kernels named like the timer's markers: nothing can be attributed
    forged = _calls((60, [(MARK, 10, 55)]))
    assert "cannot be told apart" in timing.judge(forged, [0.05])
    assert timing.judge([], [0.05]) is None  # a profiler blind to the GPU: no second clock


class _Gpu:
    """A GPU's timeline in us for `disagreement`'s clocks: the caller's stream runs in order at `now`,
    a side stream's kernel runs from its launch; the profiler reports every kernel."""

    def __init__(self):
        self.now, self.work = 0.0, []

    def launch(self, name, us, side=False):
        self.work.append(types.SimpleNamespace(name=name, device_type="DeviceType.CUDA",
                                               time_range=types.SimpleNamespace(start=self.now, end=self.now + us)))
        self.now += 2.0 if side else us  # the caller's stream moves on at once past a side stream's launch

    def clocks(self):
        gpu = self

        @contextlib.contextmanager
        def profile(activities):
            gpu.work = []  # a session sees what ran within it
            yield types.SimpleNamespace(events=lambda: list(gpu.work))

        def synchronize():
            gpu.now = max([gpu.now] + [w.time_range.end for w in gpu.work]) + 5

        return {"Event": lambda enable_timing: types.SimpleNamespace(t=None),
                "record": lambda e: setattr(e, "t", gpu.now), "event_synchronize": lambda e: None,
                "elapsed_time": lambda a, b: (b.t - a.t) / 1e3, "synchronize": synchronize, "profile": profile,
                "sleep": lambda cycles: gpu.launch(MARK, 1.0)}


def test_disagreement_brackets_each_call_with_markers_on_the_callers_stream(monkeypatch):
    gpu = _Gpu()
    monkeypatch.setattr(timing, "CLOCKS", {**timing.CLOCKS, **gpu.clocks()})
    assert timing.disagreement(lambda: gpu.launch("relu", 50)) is None
    assert "call 1's kernel relu ended" in timing.disagreement(lambda: gpu.launch("relu", 400, side=True))


@pytest.mark.gpu
def test_work_on_a_stream_the_caller_never_waits_on_disagrees_with_the_events(monkeypatch):
    x = torch.randn(1 << 26, device="cuda")  # 256 MB: each kernel runs far past any launch's host overhead
    y = torch.empty_like(x)
    side = torch.cuda.Stream()
    seen = []  # each judged timeline, for the failure's message
    judge = timing.judge
    monkeypatch.setattr(timing, "judge", lambda work, times: seen.append((work, times)) or judge(work, times))

    def hidden():
        with torch.cuda.stream(side):  # the caller's stream never waits for it
            torch.mul(x, 2.0, out=y)

    def waited():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.mul(x, 2.0, out=y)
        torch.cuda.current_stream().wait_stream(side)

    assert timing.disagreement(lambda: torch.mul(x, 2.0, out=y)) is None, seen[-1]
    assert timing.disagreement(waited) is None, seen[-1]
    assert "never waits on" in (timing.disagreement(hidden) or ""), seen[-1]
    torch.cuda.synchronize()
