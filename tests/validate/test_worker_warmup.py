"""What a GPU worker does before its first sample: torch's first-use patches made before the
process snapshot, and torch's op catalogue scanned once in the parent rather than in each worker."""
from sftbuild import ops
from sftbuild.binding import Binding
from sftbuild.trial_types import TrialTask
from sftbuild.validate import pipeline
from sftbuild.trial import pristine, trials


def test_a_harness_sample_warms_torch_before_the_snapshot(monkeypatch):
    # a worker whose first sample is a CUDA harness saw Dynamo's later import as the harness's change
    # (torch.manual_seed rebound, _c10d_functional kernels registered): every ATen record was a cheat
    order = []
    monkeypatch.setattr(pristine, "warm", lambda compiler=False: order.append("warm"))

    class Snapshot:
        def __init__(self):
            order.append("snapshot")

        def changes(self):
            return []

        def dirty(self):
            return []
    monkeypatch.setattr(pristine, "Pristine", Snapshot)
    monkeypatch.setattr(trials, "_guarded_run", lambda task: order.append("run") or {"status": "ok"})
    trials.run_record({"id": "x", "language": "cuda", "code": ""})
    assert order[:3] == ["warm", "snapshot", "run"]


def _bound(op):
    return TrialTask("t", "cuda", "", binding=Binding.from_dict({"op": op}) if op else None)


def test_the_op_catalogue_is_loaded_in_the_parent_only_for_op_db_bindings(monkeypatch):
    asked = []
    monkeypatch.setattr(ops, "get", lambda name: asked.append(name))
    pipeline._prepare_ops([_bound("softmax"), _bound(None)])
    assert asked == []
    pipeline._prepare_ops([_bound("softmax"), _bound("opdb.isinf")])
    assert asked == ["opdb.isinf"]


def test_an_op_missing_from_this_torch_is_left_to_its_sample(monkeypatch):
    def missing(name):
        raise KeyError(name)
    monkeypatch.setattr(ops, "get", missing)
    pipeline._prepare_ops([_bound("opdb.no_such_op")])  # no exception
