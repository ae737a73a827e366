"""Timed loops are sized by time: a slow call gets fewer runs, so the GPU's timing lock, which every
other worker's timing waits on, is held for seconds."""
from sftbuild.trial import timing


def _loop(monkeypatch, ms: float, warmup: int = 10, runs: int = 100):
    calls = {"untimed": 0, "timed": 0}

    def timed(fn, flush, prep=None):
        calls["timed"] += 1
        return ms

    monkeypatch.setattr(timing, "_timed", timed)
    out = timing._events(lambda: calls.__setitem__("untimed", calls["untimed"] + 1), warmup, runs, None)
    return out, calls


def test_fast_calls_get_every_run_asked(monkeypatch):
    out, calls = _loop(monkeypatch, 0.02)
    assert out["runs"] == 100 and calls == {"untimed": 10, "timed": 100} and "runs_cut" not in out


def test_slow_calls_fit_the_budget_with_a_floor(monkeypatch):
    out, calls = _loop(monkeypatch, 250.0)  # 2 s fit 8 runs of 250 ms
    assert out["runs"] == 8 and calls["timed"] == 8 and calls["untimed"] <= 1 + 8
    assert out["runs_cut"] == "100 asked; 8 fit in 2 s" and out["median"] == 250.0
    out, calls = _loop(monkeypatch, 5000.0)
    assert out["runs"] == timing.MIN_RUNS == calls["timed"]


def test_no_warmup_asked_means_no_untimed_call(monkeypatch):
    out, calls = _loop(monkeypatch, 0.02, warmup=0, runs=7)
    assert calls == {"untimed": 0, "timed": 7} and out["runs"] == 7
