"""A candidate cannot touch the reference, and nothing it changes in its process reaches another sample.

CPU: the snapshot (sftbuild.trial.pristine) driven directly, each change undone by monkeypatch;
then the real executor path with one long-lived worker (LocalExecutor.map_gpu, here with the
candidates in the Triton interpreter on the CPU): a tamperer between honest samples, whose
verdicts must be those they get alone. GPU: the same samples on the GPU.
Run on a GPU machine with:  pytest -m gpu -s -n 0 tests/validate/test_validate_isolation.py
"""
import dataclasses

import pytest
import torch
import torch.nn.functional as F
import triton

from sftbuild.config import ValidateConfig
from sftbuild.executor import LocalExecutor
from sftbuild.record import Record
from sftbuild.trial import checks as C
from sftbuild.trial import guards, pristine
from sftbuild.validate import pipeline
from tests.redteam import cases as R


@pytest.fixture
def world():
    guards.set_strict()
    return pristine.Pristine()


def test_rebinding_through_any_entry_point_is_named(world, monkeypatch):
    assert world.changes() == []
    fake = lambda *a, **k: None  # noqa: E731
    monkeypatch.setattr(torch, "softmax", fake)
    monkeypatch.setattr(torch.Tensor, "softmax", fake, raising=False)
    monkeypatch.setattr(F, "softmax", fake)
    monkeypatch.setattr(torch.Tensor, "__add__", fake)
    assert set(world.changes()) == {"torch.softmax rebound", "torch.Tensor.softmax rebound",
                                    "torch.nn.functional.softmax rebound", "torch.Tensor.__add__ rebound"}
    monkeypatch.undo()
    assert world.changes() == []


def test_a_swapped_code_object_or_a_patched_validator_is_seen(world, monkeypatch):
    from sftbuild import ops

    monkeypatch.setattr(F.softmax, "__code__", (lambda input, dim=None, _stacklevel=3, dtype=None: input).__code__)
    monkeypatch.setattr(ops, "compare", lambda *a, **k: (True, {}))
    monkeypatch.setattr(triton, "jit", lambda f: f)
    assert set(world.changes()) == {"torch.nn.functional.softmax code replaced", "sftbuild.ops.compare rebound",
                                    "triton.jit rebound"}


def test_process_state_left_behind_is_named(world):
    try:
        torch.set_default_dtype(torch.float64)
        torch.backends.cuda.matmul.allow_tf32 = True
        changed = world.changes()
        assert "default dtype: float32 -> float64" in changed
        assert "cuda.matmul.allow_tf32: False -> True" in changed
    finally:
        torch.set_default_dtype(torch.float32)
        guards.set_strict()
    assert world.changes() == []


def test_rng_is_compared_around_a_call():
    before = pristine.rng_state()
    assert pristine.rng_changes(before) == []
    torch.rand(3)
    assert pristine.rng_changes(before) == ["CPU RNG state changed"]


@pytest.mark.gpu
def test_stream_and_cuda_rng_changes_are_named():
    torch.zeros(1, device="cuda")  # the context first: the snapshot holds the stream only once CUDA is up
    guards.set_strict()
    world = pristine.Pristine()
    before = pristine.rng_state()
    torch.cuda.set_stream(torch.cuda.Stream())
    try:
        assert [c for c in world.changes() if c.startswith("current stream")]
    finally:
        torch.cuda.set_stream(torch.cuda.default_stream())
    assert world.changes() == []
    torch.randn(4, device="cuda")
    assert pristine.rng_changes(before) == ["CUDA RNG state changed"]


def test_new_names_are_no_change_but_overrides_are_and_custom_ops_make_a_worker_dirty(world):
    torch.nn.functional._sftbuild_test_helper = len  # a new name, nothing rebound
    try:
        assert world.changes() == [] and world.dirty() == []
        mine = torch.library.Library("sftbuild_test_ns", "DEF")
        mine.define("twice(Tensor x) -> Tensor")
        assert world.changes() == []  # an operator of its own is no change, but the next sample would clash
        assert world.dirty() == ["dispatcher operators registered: sftbuild_test_ns::twice"]
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("cosh", lambda x: x, "CPU")  # overrides torch's own: even the comparison could be fooled
        assert world.changes() == ["torch.library kernel registered for aten/cosh/CPU"]
        lib._destroy()
        mine._destroy()
    finally:
        del torch.nn.functional._sftbuild_test_helper


def test_globals_intact_turns_any_change_into_a_cheat():
    check = C.RUNTIME_CHECKS.create("globals_intact")
    assert check.after_call(C.Call([], [])) is None
    found = check.after_call(C.Call([], [], tampered=["torch.softmax rebound"]))
    assert (found.reason, found.why) == ("cheat", "the candidate changed its process: torch.softmax rebound")


def test_a_cuda_harness_that_changed_its_process_is_a_cheat_in_a_fresh_worker(world, monkeypatch):
    from sftbuild.trial import trials

    ok = {"status": "ok", "reason": None}
    assert trials._untouched(ok, world) == ok
    monkeypatch.setattr(torch, "relu", lambda x: x)
    got = trials._untouched(ok, world)
    assert (got["status"], got["reason"], got["recycle"]) == ("dropped", "cheat", True)
    assert got["detail"] == "the candidate changed its process: torch.relu rebound"


# ---- the executor path: a tamperer between honest samples in one long-lived worker -------------------

def _fp32(record: dict) -> dict:
    return {**record, "binding": {**record["binding"], "dtypes": ["float32"]}}


# a right kernel that also overrides torch's own CPU and CUDA softmax with a wrong one: its own
# reference was computed before its import, but a worker that kept it would poison the next reference
OVERRIDER = R.TRITON_SOFTMAX + '''

def _wrong(x, dim, half_to_float):
    return softmax(x) * 1.01


_lib = torch.library.Library("aten", "IMPL")
_lib.impl("_softmax", _wrong, "CPU")
_lib.impl("_softmax", _wrong, "CUDA")
torch.nn._sftbuild_keep = _lib
'''


def _sequence() -> list[tuple[str, dict]]:
    honest = _fp32(R.triton(R.TRITON_SOFTMAX, "softmax"))
    again = lambda n: {**honest, "code": honest["code"] + f"\n# copy {n}\n"}  # noqa: E731  another record
    return [("honest_1", honest), ("tamperer", _fp32(R.triton(R.TAMPER_SOFTMAX, "softmax"))),
            ("honest_2", again(2)), ("overrider", _fp32(R.triton(OVERRIDER, "softmax"))), ("honest_3", again(3))]


def _validate(named, gpus, cache, cfg) -> dict:
    recs = [Record(source="isolation", **rec) for _, rec in named]
    names = {r.id: n for r, (n, _) in zip(recs, named)}
    with LocalExecutor(cpu_workers=1, gpus=gpus, progress=False) as ex:
        return {names[r.id]: (status, reason, payload) for r, status, reason, payload
                in pipeline.validate(recs, cfg, ex, cache)}


def _check_sequence(got):
    print({n: (s, r, str(p.get("detail") or "")[:100], p.get("left_behind")) for n, (s, r, p) in got.items()})
    for name in ("honest_1", "honest_2", "honest_3"):
        assert got[name][:2] == ("ok", None), name
    assert got["tamperer"][:2] == ("dropped", "cheat") and "torch.softmax rebound" in got["tamperer"][2]["detail"]
    assert got["overrider"][:2] == ("dropped", "cheat") and "aten/_softmax/CPU" in got["overrider"][2]["detail"]


def test_a_tamperer_between_honest_samples_in_one_worker(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the worker runs the candidates in the interpreter
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    gpu_task = pipeline.gpu_task
    monkeypatch.setattr(pipeline, "gpu_task", lambda *a: dataclasses.replace(gpu_task(*a), max_numel=1 << 14,
                                                                                     device="cpu"))
    # torch_override would drop the overrider unread: here it must run, to show the worker is replaced
    cfg = ValidateConfig(shapes=2, seeds=1, sample_timeout=300, memcheck="off", timing=False,
                         static_checks={"torch_override": False})
    got = _validate(_sequence(), "0", str(tmp_path), cfg)  # "0": one long-lived worker, run in order
    _check_sequence(got)


@pytest.mark.gpu
def test_a_tamperer_between_honest_samples_on_the_gpu(tmp_path):
    cfg = ValidateConfig(sample_timeout=120, memcheck="off", timing=False, static_checks={"torch_override": False})
    named = _sequence()
    _check_sequence(_validate(named, "0", str(tmp_path), cfg))
    alone = {n: _validate([(n, rec)], "0", str(tmp_path / n), cfg)[n][:2] for n, rec in named}
    got = _validate(list(reversed(named)), "0", str(tmp_path / "reversed"), cfg)
    assert {n: v[:2] for n, v in got.items()} == alone  # the order of samples decides nothing


def _pkg(root, name, body="STATE = []\n"):
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(body)
    (root / name / "ops.py").write_text("from . import STATE\n")
    return str(root)


def test_a_kept_package_tree_is_imported_once_and_forgotten_by_the_next_tree_or_a_verdict(tmp_path):
    import sys

    from sftbuild.trial import pyrun

    a, b = _pkg(tmp_path / "a", "pkg_kept_a"), _pkg(tmp_path / "b", "pkg_kept_b")
    with pyrun.package_tree(a, "pkg_kept_a/ops.py", keep=True) as package:
        first = sys.modules[package]
        pyrun.load_module("x = 1\n", "probe", str(tmp_path), package)
        first.STATE.append("left by the first probe")
    assert "pkg_kept_a" in sys.modules and not any("sftbuild_cand_" in m for m in sys.modules)
    with pyrun.package_tree(a, "pkg_kept_a/ops.py", keep=True) as package:  # the next probe of the package
        assert sys.modules[package] is first
    with pyrun.package_tree(b, "pkg_kept_b/ops.py", keep=True):  # another package: the first is forgotten
        assert "pkg_kept_a" not in sys.modules and a not in sys.path
    with pyrun.package_tree(a, "pkg_kept_a/ops.py") as package:  # validation imports afresh, keeps nothing
        assert "pkg_kept_b" not in sys.modules and sys.modules[package].STATE == []
    assert "pkg_kept_a" not in sys.modules and a not in sys.path and b not in sys.path
