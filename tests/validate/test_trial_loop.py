"""The one trial loop (sftbuild.trial.loop): its plan with a fake adapter, and the same verdict for a
cheat through the Python path (pyrun) and the CUDA harness path (trials.HarnessOp, a Python launch
standing in for the compiled .so), both on the CPU."""
import dataclasses
import types

import pytest
import torch

from sftbuild import ops
from sftbuild.trial_types import TrialTask
from sftbuild.trial import loop


class Fake(loop.Adapter):
    """An adapter whose trials pass except where `fail` says; it records what the loop asked."""

    name = "op fake"
    dtypes = ["float32", "float16"]

    def __init__(self, variants=("a", "b", "big"), fail=None, notes=None, constant=None):
        self._variants, self.fail, self.seen = list(variants), fail, []
        self.notes = notes or {}
        self.constant = constant  # trials whose reference did not move (marked uninformative)

    def variants(self):
        return self._variants

    def layouts_for(self, dtype):
        return ["contiguous", "transposed"] if dtype == self.dtypes[0] else ["contiguous"]

    def grown(self, variant):
        return variant == "big"

    def describe(self, variant):
        return {"shape": variant}

    def trial(self, t):
        self.seen.append(t)
        if self.fail and self.fail(t):
            return False, {"reason": "incorrect", "why": "off", "max_abs": 1.0}
        if self.constant and self.constant(t):
            return True, {"max_abs": 0.5, "uninformative": "the reference's result did not change"}
        return True, {"max_abs": 0.5}

    def summary(self):
        return {"launches": len(self.seen)}


def test_the_loop_plans_variants_dtypes_layouts_seeds_and_one_seed_past_the_caps():
    fake = Fake()
    out = loop.run([fake], TrialTask("t", "triton", "", seeds=2))
    points = [(t.variant, t.dtype, t.layout, t.seed) for t in fake.seen]
    assert points == [
        ("a", "float32", "contiguous", 0), ("a", "float32", "contiguous", 1),
        ("a", "float32", "transposed", 0), ("a", "float32", "transposed", 1),
        ("a", "float16", "contiguous", 0), ("a", "float16", "contiguous", 1),
        ("b", "float32", "contiguous", 0), ("b", "float32", "contiguous", 1),
        ("b", "float32", "transposed", 0), ("b", "float32", "transposed", 1),
        ("b", "float16", "contiguous", 0), ("b", "float16", "contiguous", 1),
        ("big", "float32", "contiguous", 0), ("big", "float16", "contiguous", 0)]  # grown: one seed, first layout
    assert [t.profile for t in fake.seen] == [False] * 12 + [True, False]  # the first trial past the caps
    assert [t.vi for t in fake.seen][-2:] == [2, 2]
    assert out["status"] == "ok" and out["launches"] == 14 and out["errors"] == {"max_abs": 0.5}
    assert out["trials"][0] == {"shape": "a", "dtype": "float32", "layout": "contiguous", "seed": 0, "ok": True,
                                "max_abs": 0.5, "max_rel": None, "norm_rel": None}
    assert "timing" not in out and "flags" not in out


def test_without_a_grown_variant_the_first_trial_is_profiled():
    fake = Fake(variants=("a", "b"))
    loop.run([fake], TrialTask("t", "triton", "", seeds=1))
    assert [t.profile for t in fake.seen] == [True] + [False] * (len(fake.seen) - 1)


def test_the_first_failed_trial_drops_the_record_with_the_rows_so_far():
    fake = Fake(fail=lambda t: t.variant == "b")
    out = loop.run([fake, Fake()], TrialTask("t", "triton", "", seeds=1))
    assert out["status"] == "dropped" and out["reason"] == "incorrect" and out["detail"] == "off"
    assert len(fake.seen) == 4 and [r["ok"] for r in out["trials"]] == [True, True, True, False]
    assert out["errors"] == {"max_abs": 1.0}


def test_every_adapter_runs_in_turn_and_nothing_to_try_is_unbound():
    made = []

    def adapters():  # each made once the one before it has passed
        for variants in (("a",), ()):
            made.append(variants)
            yield Fake(variants, notes={"degenerate": ["near_zero"]})

    out = loop.run(adapters(), TrialTask("t", "triton", "", seeds=1))
    assert made == [("a",), ()]
    assert out == {"status": "dropped", "reason": "unbound", "detail": "no shape or dtype of op fake fits the binding",
                   "trials": out["trials"]} and len(out["trials"]) == 3
    out = loop.run([Fake(("a",), notes={"degenerate": ["near_zero"]}),
                    Fake(("b",), notes={"degenerate": ["constant"]})], TrialTask("t", "triton", "", seeds=1))
    assert out["flags"] == {"degenerate": ["constant", "near_zero"]} and len(out["trials"]) == 6


def test_a_record_no_trial_of_which_moved_its_reference_is_uninformative_not_the_candidates_fault():
    # one shape moved it
    out = loop.run([Fake(constant=lambda t: t.variant != "b")], TrialTask("t", "triton", "", seeds=1))
    assert out["status"] == "ok"
    out = loop.run([Fake(), Fake(constant=lambda t: True)], TrialTask("t", "triton", "", seeds=1))
    assert (out["status"], out["reason"]) == ("dropped", "uninformative") and len(out["trials"]) == 16
    assert out["detail"].startswith("op fake: the reference's result did not change in any of its trials")
    assert "cannot tell a kernel from a constant" in out["detail"]


# ---- one verdict for a cheat, whichever kind of candidate ------------------------------------------

def _negatives(shape, dtype, layout, gen, params):
    """relu's inputs, all negative: the result is zeros whatever the values."""
    return [-(torch.rand(shape, generator=gen) + 0.5).to(getattr(torch, dtype))]


@pytest.fixture
def negative_relu(monkeypatch):
    ops.get("relu")  # the registry is loaded
    # its domain is the negatives: no value class (a shift would leave it)
    op = dataclasses.replace(ops.get("relu"), name="test_negative_relu", make_inputs=_negatives, values=())
    monkeypatch.setitem(ops.OPS, op.name, op)
    return op.name


CACHED = """
import torch

_seen = {}


def wrapper(x):
    if x.data_ptr() not in _seen:  # the answer is keyed on where the input lives
        _seen[x.data_ptr()] = torch.relu(x)
    return _seen[x.data_ptr()].clone()
"""

HONEST = "import torch\n\n\ndef wrapper(x):\n    return torch.relu(x)\n"


def _python(code, op):
    from sftbuild.trial import pyrun

    task = {"id": "t", "language": "triton", "code": code, "binding": {"op": op}, "entry": {"wrapper": "wrapper"},
            "dtypes": ["float32"], "shapes": 1, "seeds": 1, "timing": False, "device": "cpu",
            "runtime_checks": {"triton_decoy": False}}  # the stand-in launches no Triton kernel
    return pyrun.run_python(task)


def _harness(monkeypatch, kernel, op):
    from sftbuild.trial import checks as C
    from sftbuild.trial import trials

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(trials, "load_harness", lambda path: None)
    monkeypatch.setattr(trials, "_launch", lambda lib, dtype, contract, i, o, params=None: kernel(i, o) or 0)
    task = TrialTask.of({"id": "t", "language": "cuda", "code": "", "sos": ["fake.so"], "binding": {"op": op},
                         "dtypes": ["float32"], "shapes": 1, "seeds": 1})
    adapter = trials.HarnessOp(task, 0, trials.H.checks(task.binding)[0], torch.device("cpu"), C.selected())
    return loop.run([adapter], task)


def _exact(i, o):
    o[0].copy_(torch.relu(i[0]))


def _cached_kernel():
    seen = {}

    def kernel(i, o):
        if i[0].data_ptr() not in seen:
            seen[i[0].data_ptr()] = torch.relu(i[0])
        o[0].copy_(seen[i[0].data_ptr()])
    return kernel


def _file_reference(monkeypatch, tmp_path, kernel, constant=False):
    """The file-reference adapter on llm.c-like `scale1` (test_file_reference's repo), its launcher and
    CPU function stood in by Python (`constant`: a CPU function whose result is zeros for any input)."""
    from sftbuild.trial import checks as C
    from sftbuild.trial import trials
    from tests.validate.test_file_reference import REPO_FILE, REPO_HEADER, _record

    (tmp_path / "common.h").write_text(REPO_HEADER)
    (tmp_path / "scale.cu").write_text(REPO_FILE)
    binding = _record(tmp_path, "scale.cu", "scale_kernel").binding

    def cpu(lib, ref, p, host):  # scale_cpu: out = 2 * inp + i % C
        out = [t.clone() for t in host]
        out[0] = torch.zeros_like(out[1]) if constant else \
            2 * out[1] + (torch.arange(out[1].numel()) % p["env"]["C"]).float()
        return out

    def launcher(*args):
        return 0
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(trials, "load_file_harness", lambda path: types.SimpleNamespace(
        sftbuild_file_launch=launcher, sftbuild_file_reference=launcher, sftbuild_file_elem_bytes=lambda k: 4))
    monkeypatch.setattr(trials, "file_reference_outputs", cpu)
    monkeypatch.setattr(trials, "_file_call", lambda lib, ref, p, d, block: kernel(p, d, block) or 0)
    task = TrialTask("t", "cuda", "", sos=["fake.so"], binding=binding, shapes=2, seeds=1)
    return loop.run([trials.FileReference(task, torch.device("cpu"), C.selected())], task)


def _scale(p, d, block=None):
    d[0].copy_(2 * d[1] + (torch.arange(d[1].numel()) % p["env"]["C"]).float())


def test_a_result_cached_by_pointer_is_the_same_cheat_in_every_path(monkeypatch, tmp_path):
    py, cu = _python(CACHED, "relu"), _harness(monkeypatch, _cached_kernel(), "relu")
    seen = {}

    def cached_scale(p, d, block):
        if d[1].data_ptr() not in seen:
            _scale(p, d)
            seen[d[1].data_ptr()] = d[0].clone()
        d[0].copy_(seen[d[1].data_ptr()])
    fr = _file_reference(monkeypatch, tmp_path, cached_scale)
    assert py["reason"] == cu["reason"] == fr["reason"] == "cheat"
    assert py["detail"] == cu["detail"] == fr["detail"] == \
        "the same result for new values in the same buffers (cached by pointer)"
    assert _harness(monkeypatch, _exact, "relu")["status"] == "ok"


def test_the_file_reference_path_runs_in_the_loop(monkeypatch, tmp_path):
    out = _file_reference(monkeypatch, tmp_path, _scale)
    # two sizes x one seed x the block sizes C=384 is a multiple of (64, 128: main() runs its sizes,
    # N=4096 and C=768, only with block sizes they are multiples of, so 256 is no pair for C=384)
    assert out["status"] == "ok" and len(out["trials"]) == 4
    assert out["trials"][0]["block_size"] == 64 and "dtype" not in out["trials"][0]

    def writes_its_input(p, d, block):
        _scale(p, d)
        d[1].add_(1)
    out = _file_reference(monkeypatch, tmp_path, writes_its_input)
    assert (out["reason"], out["detail"]) == ("cheat", "the candidate modified input 1")


def test_a_file_reference_constant_in_every_trial_is_uninformative(monkeypatch, tmp_path):
    def zeros(p, d, block):
        d[0].zero_()
    out = _file_reference(monkeypatch, tmp_path, zeros, constant=True)
    # every trial ran and none moved the reference: two sizes x one seed x the two block sizes C=384 pairs with
    assert (out["status"], out["reason"]) == ("dropped", "uninformative") and len(out["trials"]) == 4
    assert out["detail"].startswith("launcher scale1: the CPU reference's result did not change")

    def refuses_64(p, d, block):  # cudaErrorInvalidConfiguration: that block size's trials are skipped
        return 9 if block == 64 else _scale(p, d)
    out = _file_reference(monkeypatch, tmp_path, refuses_64)
    assert out["status"] == "ok" and len(out["trials"]) == 2 and list(out["refused_block_sizes"]) == [64]
    out = _file_reference(monkeypatch, tmp_path, lambda p, d, block: 9)
    assert (out["reason"], out["trials"]) == ("cuda_error", [])
    assert out["detail"].startswith("the launcher refused every block size: launcher scale1 returned 9")


def test_an_input_independent_result_is_the_same_drop_in_both_paths(monkeypatch, negative_relu):
    py = _python(HONEST, negative_relu)
    cu = _harness(monkeypatch, _exact, negative_relu)
    # the reference is zeros for every input drawn: the inputs cannot tell a kernel from a constant
    assert py["reason"] == cu["reason"] == "uninformative"
    assert py["detail"] == cu["detail"]
    assert "the reference's result did not change when the inputs did in any of its" in py["detail"]
