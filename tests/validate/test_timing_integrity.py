"""Timing nobody can fake: the timer's clocks are the process's own from before any candidate, a
candidate rebinding one is a cheat, and a refused timing drops the record."""
from __future__ import annotations

import time

import pytest
import torch

from sftbuild.validate import loop, pristine, timing
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

    out = loop.run([Timed()], {"seeds": 1, "timing": True})
    assert (out["status"], out["reason"], out["detail"]) == ("dropped", "cheat", "its kernels ran 3 ms")
    assert loop.run([Fake()], {"seeds": 1, "timing": True})["status"] == "ok"


@pytest.mark.gpu
def test_work_on_a_stream_the_caller_never_waits_on_disagrees_with_the_events():
    x = torch.randn(1 << 24, device="cuda")
    y = torch.empty_like(x)
    side = torch.cuda.Stream()

    def hidden():
        with torch.cuda.stream(side):  # the caller's stream never waits for it
            torch.mul(x, 2.0, out=y)

    assert timing.disagreement(lambda: torch.mul(x, 2.0, out=y)) is None
    assert "never waits on" in timing.disagreement(hidden)
    torch.cuda.synchronize()
