"""Bind's probes receive typed tasks (sftbuild.bind.tasks): what a binder plans is what its probe reads."""
import dataclasses
import pickle

import pytest

from sftbuild import sandbox
from sftbuild.bind.stage import _within
from sftbuild.bind.tasks import ExtensionProbe, LauncherProbe, TritonProbe


def test_a_probe_task_crosses_as_a_pickle_and_a_dict_becomes_one_only_when_well_formed():
    task = LauncherProbe(id="r", code="k", harnesses={"float16": "src"}, roles=[{"name": "x", "role": "in"}])
    assert pickle.loads(pickle.dumps(task)) == task
    assert LauncherProbe.of({"id": "r", "code": "k", "harnesses": {"float16": "src"}}).harnesses == {"float16": "src"}
    for bad, said in [({"id": "r", "code": "k", "nonsense": 1}, "no field 'nonsense'"),
                      ({"code": "k"}, "needs id"),
                      ({"id": "r", "code": "k", "shapes": "3"}, "'shapes' must be int")]:
        with pytest.raises(ValueError, match=said):
            ExtensionProbe.of(bad)


def test_the_stage_narrows_a_typed_tasks_device_and_time_limit_and_merges_a_plug_ins_dict():
    typed = _within(TritonProbe(id="r", code="k", time_limit=240), "cpu", 100)
    assert (typed.device, typed.time_limit) == ("cpu", 80.0)
    own = _within(dataclasses.replace(typed, device="cuda"), "cpu", 1000)
    assert own.device == "cuda" and own.time_limit == 80.0
    assert _within({"id": "r", "time_limit": 240}, "cuda", 100) == {"device": "cuda", "id": "r", "time_limit": 80.0}


def test_the_sandbox_binds_the_package_tree_a_wrapped_typed_probe_task_names(tmp_path):
    """A probe's record imports its package from its tree: the sandbox must show that folder."""
    item = {"task_fn": "sftbuild.bind.probe:probe", "task": TritonProbe(id="r", code="k", tree=str(tmp_path))}
    ro, _ = sandbox.task_paths([item])
    assert str(tmp_path) in ro
