"""The typed boundary to the workers (sftbuild.trial_types): what a worker receives is a TrialTask that
crosses as a pickle; a malformed task is refused in one sentence; a worker's reply is read as a Verdict."""
import dataclasses
import pickle

import pytest

from sftbuild import sandbox
from sftbuild.binding import Binding
from sftbuild.config import ValidateConfig
from sftbuild.record import Record
from sftbuild.trial_types import CompileTask, TrialTask, Verdict
from sftbuild.validate import pipeline

CODE = "__global__ void relu_kernel(float* y, const float* x, int n) { int i = threadIdx.x; if (i < n) y[i] = x[i]; }\n"


def _task() -> TrialTask:
    rec = Record(language="cuda", code=CODE, source="t", entry={"kernels": ["relu_kernel"]},
                 binding={"op": "relu", "harness": "generic_launch", "dtypes": ["float32"]})
    return pipeline.gpu_task(rec, {"sos": ["relu.so"]}, ValidateConfig(), "/tmp/cache")


def test_the_task_a_worker_receives_is_typed_and_crosses_as_a_pickle():
    task = _task()
    assert isinstance(task.binding, Binding) and task.binding.op == "relu" and task.dtypes == ["float32"]
    assert task.sos == ["relu.so"] and task.ext_cache == "/tmp/cache/ext"
    assert pickle.loads(pickle.dumps(task)) == task  # executor, Ray and the one-shot sandbox all pickle it
    assert TrialTask.of(task) is task
    # a dict (a test's, a script's) is read field by field, its binding as a Binding
    as_dict = {**dataclasses.asdict(task), "binding": task.binding.to_dict()}
    assert TrialTask.of(as_dict) == task


@pytest.mark.parametrize("task, said", [
    ({"id": "t", "language": "cuda", "code": "", "shape": 3}, "a trial task has no field 'shape'"),
    ({"id": "t", "language": "cuda"}, "a trial task needs code as text"),
    ({"id": "t", "language": "cuda", "code": "", "shapes": "3"}, "trial task field 'shapes' must be int, got str"),
    ({"id": "t", "language": "cuda", "code": "", "seeds": True}, "trial task field 'seeds' must be int, got bool"),
    (["t"], "a trial task must be a TrialTask or a mapping, got list"),
])
def test_a_malformed_task_is_refused_at_the_boundary_in_one_sentence(task, said):
    with pytest.raises(ValueError) as e:
        TrialTask.of(task)
    assert str(e.value).startswith(said) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="trial task"):  # the worker's entry refuses it before any work
        pipeline.run_on_gpu(task)


def test_a_workers_reply_is_read_as_a_verdict_and_a_forged_one_never_passes():
    ok = Verdict.of({"status": "ok", "reason": None, "trials": [1], "recycle": True, "_exit": 0, "_log": "x"})
    assert ok == Verdict("ok", None, {"trials": [1]})
    assert Verdict.of({"status": "dropped", "reason": "incorrect", "detail": "d"}).payload == {"detail": "d"}
    assert Verdict.of({"status": "dropped"}).reason == "worker_error"
    for forged in ({"status": "passed", "reason": None}, {"status": "ok", "reason": 3}, ["ok"], None):
        v = Verdict.of(forged)
        assert (v.status, v.reason) == ("dropped", "worker_error") and "no verdict" in v.payload["detail"]


def test_the_sandbox_binds_the_folders_a_typed_task_names(tmp_path):
    tree, built = tmp_path / "tree", tmp_path / "cache" / "0a1b"
    tree.mkdir()
    built.mkdir(parents=True)
    task = dataclasses.replace(_task(), tree=str(tree), sos=[str(built / "harness.so")],
                               ext_cache=str(tmp_path / "ext"))
    ro, rw = sandbox.task_paths([task])  # the harness's build folder is bound as its cache, read-only
    assert sorted(ro) == sorted([str(tree), str(tmp_path / "cache")]) and rw == [str(tmp_path / "ext")]
    assert (ro, rw) == sandbox.task_paths([dataclasses.asdict(task)])  # as it was bound as a dict


def test_the_compile_pools_task_is_typed_too_and_refuses_a_malformed_one():
    rec = Record(language="cuda", code=CODE, source="t", entry={"kernels": ["relu_kernel"], "include_dirs": ["k"]})
    task = pipeline.compile_task(rec, ValidateConfig(), "", "/tmp/cache")
    assert isinstance(task, CompileTask) and (task.id, task.name, task.harnesses) == (rec.id, "relu_kernel", [])
    assert task.include_dirs == ["k"] and pickle.loads(pickle.dumps(task)) == task
    assert CompileTask.of({"code": CODE, "cache_dir": "/tmp/cache"}).link is True  # a launchable .so by default
    with pytest.raises(ValueError, match="^a compile task needs cache_dir as text$"):
        CompileTask.of({"code": CODE})
    with pytest.raises(ValueError, match="^compile task field 'link' must be bool, got str$"):
        pipeline.compile_any({"code": CODE, "cache_dir": "/tmp/cache", "link": "yes"})
