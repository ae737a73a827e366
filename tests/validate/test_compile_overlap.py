"""The pipeline hands compiled records to the trials in batches while the rest compile
(pipeline._compiled): every result once, a batch fills the workers unless the compiles are done, and a
failure of the compile pool reaches the caller; the pool's processes outlive the call (they die with the
thread that started them)."""
import os
import time

import pytest

from sftbuild.executor import LocalExecutor
from sftbuild.validate import pipeline


class Compiles:
    """An executor whose compile pool finishes one task every `step` seconds."""

    def __init__(self, step=0.01, fail_after=None):
        self.step, self.fail_after = step, fail_after

    def map_cpu(self, fn, tasks, desc="", unit=""):
        for i, task in enumerate(tasks):
            if i == self.fail_after:
                raise RuntimeError("the pool broke")
            time.sleep(self.step)
            yield task, {"ok": True}


def test_batches_fill_the_workers_and_give_every_result_once():
    tasks = [{"id": i} for i in range(10)]
    batches = []
    for batch in pipeline._compiled(Compiles(), tasks, slots=3):
        batches.append([t["id"] for t, _ in batch])
        time.sleep(0.05)  # trials under way while more compile
    assert sorted(i for b in batches for i in b) == list(range(10))
    assert all(len(b) >= 3 for b in batches[:-1]) and len(batches) < 10


def test_a_broken_compile_pool_is_raised_to_the_caller():
    with pytest.raises(RuntimeError, match="the pool broke"):
        for _ in pipeline._compiled(Compiles(fail_after=2), [{"id": i} for i in range(5)], slots=1):
            pass


def worker_pid(task) -> int:
    return os.getpid()


def test_the_cpu_pool_started_for_one_call_serves_the_next():
    with LocalExecutor(cpu_workers=2, gpus="none", progress=False) as ex:
        runs = [{pid for batch in pipeline._compiled(ex, [{"id": i} for i in range(4)], 2, worker_pid)
                 for _, pid in batch} for _ in range(2)]
    assert runs[0] & runs[1]  # the same processes: none was ended with the thread of the first call
