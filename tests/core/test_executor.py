import os

import pytest
import torch

from sftbuild import sandbox
from sftbuild.executor import Executor, LocalExecutor, WorkerFailure
from tests import tasks


def test_map_cpu_returns_every_result():
    with LocalExecutor(cpu_workers=2, gpus="none", progress=False) as ex:
        out = dict(ex.map_cpu(tasks.square, range(20)))
    assert out == {i: i * i for i in range(20)}


def test_a_dead_pool_worker_costs_one_item_and_no_other():
    items = [1, 2, "crash", 3, 4, 5, 6]
    with LocalExecutor(cpu_workers=2, gpus="none", progress=False) as ex:
        got = dict(ex.map_cpu(tasks.misbehave, items))
    assert sorted(map(str, got)) == sorted(map(str, items))  # every item has its one result
    assert isinstance(got["crash"], WorkerFailure) or sum(isinstance(v, WorkerFailure) for v in got.values()) == 1
    assert all(got[x] == {"pid": got[x]["pid"], "x": x} for x in items if not isinstance(got[x], WorkerFailure))


def test_map_cpu_error_is_a_failure_not_an_exception():
    with LocalExecutor(cpu_workers=1, gpus="none", progress=False) as ex:
        out = dict(ex.map_cpu(tasks.misbehave, ["ok", "raise"]))
    assert isinstance(out["raise"], WorkerFailure) and "bad input" in out["raise"].detail
    assert out["ok"]["x"] == "ok"


def test_gpu_worker_recycles_after_hang_crash_and_fault():
    # the worker loop needs no real GPU: it only pins CUDA_VISIBLE_DEVICES
    with LocalExecutor(cpu_workers=1, gpus="0", progress=False) as ex:
        tasks.check_misbehave(dict(ex.map_gpu(tasks.misbehave, tasks.MISBEHAVE, timeout=3)))


def test_gpu_workers_stay_warm_across_calls_and_stop_on_close():
    # a reward server calls map_gpu every training step: the same processes (and CUDA contexts) serve
    # every call, a crashed one is replaced, and close() leaves none behind
    ex = LocalExecutor(cpu_workers=1, gpus="0,0", progress=False)
    first = set(dict(ex.map_gpu(tasks.pid, range(6), timeout=30)).values())
    second = set(dict(ex.map_gpu(tasks.pid, range(6), timeout=30)).values())
    assert len(first) == 2 and second == first
    out = dict(ex.map_gpu(tasks.pid, ["crash", 1, 2, 3], timeout=30))
    assert isinstance(out["crash"], WorkerFailure)
    after = set(dict(ex.map_gpu(tasks.pid, range(6), timeout=30)).values())
    assert len(after) == 2 and len(after & first) == 1  # the crashed worker alone was replaced
    other = set(dict(ex.map_gpu(tasks.pid2, range(6), timeout=30)).values())
    assert not other & after  # another task function gets fresh workers
    procs = [w.proc for w in ex._workers]
    ex.close()
    assert all(p.poll() is not None for p in procs)


def test_interpreter_workers_are_kept_and_replaced_as_gpu_workers_are(monkeypatch):
    # without a GPU, Triton candidates run in kept CPU workers under the interpreter: one long-lived
    # process serves item after item (torch is imported once), one that failed is replaced
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # one worker: the items run in order
    with LocalExecutor(cpu_workers=1, gpus="none", progress=False) as ex:
        tasks.check_misbehave(dict(ex.map_interpreted(tasks.misbehave, tasks.MISBEHAVE, timeout=3)))
        first = dict(ex.map_interpreted(tasks.interpreter_worker, [1, 2], timeout=30))
        again = dict(ex.map_interpreted(tasks.interpreter_worker, [3], timeout=30))
        assert first[1] == first[2] == again[3] and again[3]["interpret"] == "1"
        # a step's bound is a GPU worker's: the interpreter is far slower than the reference it was set by
        ((_, hung),) = list(ex.map_interpreted(tasks.bounded_steps, ["hang"], timeout=3))
        assert hung.kind == "timeout" and "no result within" in hung.detail
        procs = [w.proc for w in ex._interpreters]
    assert all(p.poll() is not None for p in procs)


def test_an_interpreter_worker_renews_by_a_fork_of_its_untouched_first_process(monkeypatch):
    """After an item that asked for a fresh process, the next runs in a fork of the worker's first
    process, which ran no item: nothing the dirty item left is there (in memory or in its scratch
    folder), and no new sandbox started."""
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    with LocalExecutor(cpu_workers=1, gpus="none", progress=False) as ex:
        out = dict(ex.map_interpreted(tasks.taint, ["a", "dirty", "b", "c"], timeout=30))
        (w,) = ex._interpreters
        started = w.proc
        crash = dict(ex.map_interpreted(tasks.taint, ["crash", "d"], timeout=30))
        assert w.proc is started  # neither the renewal nor the crash started a sandbox
    assert out["a"]["seen"] == ["a"] and out["dirty"]["seen"] == ["a", "dirty"]
    assert out["b"]["seen"] == ["b"] and out["c"]["seen"] == ["b", "c"]  # kept until it asks again
    assert out["dirty"]["files"] == ["left-by-a"] and out["b"]["files"] == []  # its scratch folder is emptied
    assert out["b"]["pid"] != out["a"]["pid"] == out["dirty"]["pid"] and out["c"]["pid"] == out["b"]["pid"]
    assert crash["crash"].kind == "crash" and "exit code 3" in crash["crash"].detail and crash["d"]["seen"] == ["d"]


def test_a_worker_that_exits_says_what_it_printed_last(monkeypatch):
    """A worker that exits (a repo's check macro calling exit(1)) is a crash whose detail quotes the
    item's last lines of output: the macro's file:line and CUDA error, not only `exit code 1`."""
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    with LocalExecutor(cpu_workers=1, gpus="none", progress=False) as ex:
        out = dict(ex.map_interpreted(tasks.say_and_exit, ["a", "exit", "b"], timeout=30))
    assert out["a"] == {"x": "a"} and out["b"] == {"x": "b"}
    assert out["exit"].kind == "crash" and out["exit"].detail.startswith("worker exit code 1: ")
    assert out["exit"].detail.endswith("exit: about to run | [CUDA ERROR] at file kernel.cuh:12: | invalid argument")


def test_last_lines_of_output():
    assert sandbox.last_lines("\n a \n\nb\nc\nd\n") == "b | c | d"
    assert sandbox.last_lines("x" * 1000, chars=10) == "..." + "x" * 10 and sandbox.last_lines("") == ""


def test_the_base_executor_interprets_each_item_in_a_fresh_process():
    out = dict(Executor().map_interpreted(tasks.interpreter_worker, [1, 2], timeout=60))
    assert out[1]["pid"] != out[2]["pid"] and out[1]["interpret"] == out[2]["interpret"] == "1"


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_one_worker_per_gpu_on_two_gpus():
    ex = LocalExecutor(cpu_workers=1, gpus="auto", progress=False)
    assert ex.gpu_count == torch.cuda.device_count()
    out = dict(ex.map_gpu(tasks.gpu_identity, list(range(8)), timeout=120))
    print({k: v["visible"] for k, v in out.items()})
    assert {v["visible"] for v in out.values()} == set(ex.gpus)
    assert all(v["count"] == 1 for v in out.values())  # each worker is pinned to its own GPU
    assert all(out[i]["sum"] == float(i) * (1 << 20) for i in range(8))


def test_workers_sharing_a_gpu_take_turns_at_timing(tmp_path, monkeypatch):
    # several workers per GPU overlap their trials; timed loops hold the GPU's lock one at a time
    monkeypatch.setenv("SFTBUILD_TIMING_LOCK", str(tmp_path / "gpu0.lock"))
    with LocalExecutor(cpu_workers=1, gpus="0", progress=False) as ex:
        spans = sorted(dict(ex.map_gpu(tasks.hold_timing_lock, range(4), timeout=60, per_gpu=4)).values())
    assert len(spans) == 4
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no two overlap


def test_forked_calls_share_imports_but_never_a_process():
    """sandbox.run_forked: each call runs in a fresh fork of one kept sandboxed process, so what a call
    leaves (in memory or in its scratch folder) no later call sees; a crash or a hang costs that call."""
    calls = [sandbox.run_forked("tests.tasks:taint", x, timeout=30) for x in ("a", "b", "crash", "c")]
    a, b, crash, c = calls
    assert a["seen"] == ["a"] and b["seen"] == ["b"] and c["seen"] == ["c"] and b["files"] == []
    assert len({a["pid"], b["pid"], c["pid"]}) == 3
    assert a["pid"].split(":")[0] == c["pid"].split(":")[0]  # forks of one process: the module was imported once
    assert isinstance(crash, sandbox.WorkerFailure) and crash.kind == "crash" and "exit code 3" in crash.detail
    hung = sandbox.run_forked("tests.tasks:misbehave", "hang", timeout=2)
    assert isinstance(hung, sandbox.WorkerFailure) and hung.kind == "timeout"
    assert sandbox.run_forked("tests.tasks:misbehave", "e", timeout=30)["x"] == "e"
    raised = sandbox.run_forked("tests.tasks:misbehave", "raise", timeout=30)
    assert raised["status"] == "dropped" and "bad input" in raised["detail"]  # as run_isolated reports it


def test_a_kept_process_that_ended_while_idle_is_not_handed_a_call():
    """A Forks that died between calls (its starting thread ended, and PR_SET_PDEATHSIG with it) is
    replaced, not sent the next call, which would come back as a crash of a call that never ran."""
    first = sandbox.run_forked("tests.tasks:taint", "a", timeout=30)
    for kept in sandbox._FORKS.values():
        for forks in kept:
            forks.proc.kill()
            forks.proc.wait(10)
    again = sandbox.run_forked("tests.tasks:taint", "b", timeout=30)
    assert again["seen"] == ["b"] and again["pid"].split(":")[0] != first["pid"].split(":")[0]
