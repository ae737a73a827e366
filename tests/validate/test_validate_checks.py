"""Run-time checks as plug-ins, driven directly with CPU tensors, and the trial loop's adapters that call them."""
import pkgutil
import types

import pytest
import torch

from sftbuild import ops
from sftbuild.plugins import PluginError
from sftbuild.trial_types import TrialTask
from sftbuild.trial import checks as C
from sftbuild.trial import harness as H


def _check(name):
    return C.RUNTIME_CHECKS.create(name)


def test_every_module_is_one_registered_check_in_order():
    modules = {m.name for m in pkgutil.iter_modules(C.__path__) if not m.name.startswith("_")}
    assert {c.__module__.rsplit(".", 1)[1] for c in C.RUNTIME_CHECKS} == modules
    builtin = ["globals_intact", "strict_precision", "triton_decoy", "real_outputs", "inputs_unchanged", "output_type",
               "library_kernels", "own_kernels_ran", "pointer_cache", "input_independent", "degenerate_reference"]
    assert [n for n in (c.name for c in C.selected()) if n in builtin] == builtin  # any new one runs too
    assert "triton_decoy" not in [c.name for c in C.selected({"triton_decoy": False})]
    with pytest.raises(PluginError, match="validate.runtime_checks.nope"):
        C.selected({"nope": False})


def test_judge_returns_the_first_drop_and_collects_notes():
    refs = [torch.zeros(4)]
    notes = {}
    assert C.judge(C.selected(), C.Outcome(False, False, refs), notes) is None
    assert notes == {"degenerate": ["near_zero"]}
    assert C.judge(C.selected(), C.Outcome(True, True, [torch.ones(4)]), notes) is None  # the inputs' fault
    assert notes["uninformative"] == ["the reference's result did not change when the inputs did"]


def test_strict_precision_and_triton_decoy():
    x = torch.randn(4)
    flipped = C.Call([x], [x.clone()], flags_changed=["cuda.matmul.allow_tf32: False -> True"])
    assert _check("strict_precision").after_call(flipped).reason == "cheat"
    assert _check("strict_precision").after_call(C.Call([x], [x.clone()])) is None
    decoy = _check("triton_decoy")
    assert decoy.after_call(C.Call([x], [x.clone()], launches=0)).why == \
        "a Triton candidate that launched no Triton kernel (decoy)"
    assert decoy.after_call(C.Call([x], [x.clone()], launches=2)) is None
    assert decoy.after_call(C.Call([x], [x.clone()], launches=None)) is None  # CUDA harness: not counted


def test_real_outputs():
    x = torch.randn(4, 4)
    real = _check("real_outputs")
    assert real.after_call(C.Call([x], [x[1]])).why == "output 0 is a view of an input"
    assert real.after_call(C.Call([x], [x], mutates=(0,))) is None  # an in-place op's output is its input
    assert real.after_call(C.Call([x], [torch.empty(4, device="meta")])).reason == "cheat"
    assert "not a plain tensor" in real.after_call(C.Call([x], [x.numpy()])).why
    assert real.after_call(C.Call([x], [x + 1])) is None


def test_inputs_unchanged():
    a, b = torch.randn(3), torch.tensor([1.0, float("nan")])
    before = [a.clone(), b.clone()]
    same = _check("inputs_unchanged")
    assert same.after_call(C.Call([a, b], [], before=before)) is None  # NaN that stays NaN is no change
    b[0] = 2.0
    assert same.after_call(C.Call([a, b], [], before=before)).why == "the candidate modified input 1"
    assert same.after_call(C.Call([a, b], [], before=before, mutates=(1,))) is None
    assert same.after_call(C.Call([a, b], [])) is None  # no snapshot for this call


def test_output_type_rejects_a_wider_or_host_result_but_not_index_width():
    half = torch.randn(8).half()
    want = C.specs([half.relu()])
    typed = _check("output_type")
    found = typed.after_call(C.Call([half], [half.float().relu()], expected=want))
    assert (found.reason, found.why) == ("incorrect", "output 0 is float32, the reference's is float16")
    assert typed.after_call(C.Call([half], [half.relu()], expected=want)) is None
    idx = C.specs([torch.zeros(3, dtype=torch.int64)])
    assert typed.after_call(C.Call([half], [torch.zeros(3, dtype=torch.int32)], expected=idx)) is None
    assert typed.after_call(C.Call([half], [torch.zeros(3)], expected=idx)).reason == "incorrect"
    moved = typed.after_call(C.Call([half], [torch.empty(8, dtype=torch.float16, device="meta")], expected=want))
    assert (moved.reason, moved.why) == ("cheat", "output 0 is on meta, the reference's on cpu")
    assert typed.after_call(C.Call([half], [half.float()], expected=None)) is None  # nothing to hold it to


def test_output_type_holds_shape_and_memory_format():
    typed = _check("output_type")
    x = torch.randn(4, 6)
    plain = C.specs([x.relu()])
    assert typed.after_call(C.Call([x], [x.relu()], expected=plain)) is None
    found = typed.after_call(C.Call([x], [x.relu().reshape(6, 4)], expected=plain))
    assert (found.reason, found.why) == ("incorrect", "output 0 has shape (6, 4), the reference's (4, 6)")
    column = x.relu().t().contiguous().t()
    found = typed.after_call(C.Call([x], [column], expected=plain))
    assert found.reason == "incorrect" and found.why == (
        "output 0 has strides (1, 4) (dense in dimension order (1, 0)), the reference's (6, 1) (contiguous): "
        "wrong memory format")
    # an elementwise reference keeps a transposed input's strides: there a contiguous result is right too
    xt = x.t().contiguous().t()
    follows = C.specs([xt.relu()], free=plain)
    assert follows[0].free and follows[0].stride == (1, 4)
    assert typed.after_call(C.Call([xt], [x.relu()], expected=follows)) is None
    assert typed.after_call(C.Call([xt], [xt.relu()], expected=follows)) is None
    assert typed.after_call(C.Call([xt], [x.relu()[:, ::1].t().contiguous().t()], expected=follows)) is None
    # a reference that returns a view with no memory format of its own (expanded) holds no strides
    wide = C.specs([x[:, :1].expand(4, 6)])
    assert wide[0].free and typed.after_call(C.Call([x], [x.relu()], expected=wide)) is None
    # but a layout the reference never has is wrong
    odd = torch.empty(4, 12)[:, ::2]
    assert typed.after_call(C.Call([xt], [odd.copy_(x.relu())], expected=follows)).reason == "incorrect"


def test_output_type_memory_format_names_and_size_one_dims():
    typed = _check("output_type")
    img = torch.randn(2, 3, 4, 5)
    want = C.specs([img])
    found = typed.after_call(C.Call([img], [img.contiguous(memory_format=torch.channels_last)], expected=want))
    assert "(channels_last)" in found.why and "(contiguous)" in found.why
    row = torch.randn(1, 7)
    assert typed.after_call(C.Call([row], [row.t().contiguous().t()], expected=C.specs([row]))) is None  # size 1
    empty = torch.empty(0, 3)
    assert typed.after_call(C.Call([empty], [empty.t().contiguous().t()], expected=C.specs([empty]))) is None
    half = torch.randn(4).half()
    assert typed.after_call(C.Call([half], [half.float()], expected=[(torch.float16, half.device)])).reason == \
        "incorrect"  # a bare (dtype, device) spec still holds the dtype


def test_profile_checks():
    gemm = C.Profile(["ampere_sgemm_128x64_nn", "my_kernel"], own={"my_kernel"})
    assert "library kernels do the work" in _check("library_kernels").after_profile(gemm).why
    assert _check("library_kernels").after_profile(C.Profile(["my_gemm_kernel"], own={"my_gemm"})) is None
    elsewhere = C.Profile(["vectorized_elementwise_kernel"], own={"relu_kernel"})
    assert _check("own_kernels_ran").after_profile(elsewhere).reason == "cheat"
    assert _check("own_kernels_ran").after_profile(C.Profile(["relu_kernel_0"], own={"relu_kernel"})) is None
    assert _check("own_kernels_ran").after_profile(C.Profile(["x"], own={"k"}, triton_launches=1)) is None


def test_input_independent_spares_single_element_results():
    dep = _check("input_independent")
    found = dep.after_trial(C.Outcome(True, True, [torch.ones(3, 3)]))
    assert (found.reason, found.note) == ("uninformative", True)  # a mark on the trial, no drop
    assert dep.after_trial(C.Outcome(False, True, [torch.ones(3, 3)])).reason == "uninformative"
    assert dep.after_trial(C.Outcome(True, True, [torch.ones(1, 1)])) is None  # softmax of one value
    assert dep.after_trial(C.Outcome(True, False, [torch.ones(3, 3)])) is None


def test_degenerate_reference_notes():
    note = _check("degenerate_reference")
    assert note.after_trial(C.Outcome(False, False, [torch.full((4,), 1e-9)])).why == "near_zero"
    assert note.after_trial(C.Outcome(False, False, [torch.full((4,), 2.0)])).why == "constant"
    assert note.after_trial(C.Outcome(False, True, [torch.arange(4.0)])).why == "input_independent"
    assert note.after_trial(C.Outcome(False, False, [torch.arange(4.0)])) is None


# ---- both trial loops hand the same observations to the same checks ---------------------------

class Spy(C.RuntimeCheck):
    name = "spy"

    def __init__(self):
        super().__init__()
        self.seen = []

    def after_call(self, call):
        self.seen.append(("call", call.before is not None, C.specs(call.outputs) == call.expected))

    def after_trial(self, outcome):
        self.seen.append(("trial", outcome.same_output, outcome.same_reference))


def test_cuda_trial_loop_calls_the_checks(monkeypatch):
    from sftbuild.trial import trials

    op = ops.get("relu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    def exact(lib, dtype, contract, i, o, params=None):
        for buf, val in zip(o, ops.as_outputs(op.run_reference(i, params))):
            buf.copy_(val)
        return 0
    monkeypatch.setattr(trials, "_launch", exact)
    contract = H.CONTRACTS[H.contract_for("", op.launch)]
    spy, notes = Spy(), {}
    ok, _ = trials._trial(None, op, contract, {}, op.shape_pool[2], "float32", 0, torch.device("cpu"),
                          [spy, *C.selected()], notes)
    assert ok and spy.seen == [("call", True, True), ("call", False, True), ("trial", False, False)]

    def constant(lib, dtype, contract, i, o, params=None):
        o[0].fill_(0.5)
        return 0
    monkeypatch.setattr(trials, "_launch", constant)
    ok, stats = trials._trial(None, op, contract, {}, op.shape_pool[2], "float32", 0, torch.device("cpu"))
    assert not ok and stats["reason"] == "incorrect"


def _python_run(fn, dtype="float32"):
    from sftbuild.trial import guards, pristine, pyrun, refbook

    counter = types.SimpleNamespace(count=0, names=set())

    def wrapper(x):
        counter.count += 1  # stands in for the candidate's own Triton launch
        return fn(x)
    task = TrialTask.of({"id": "t", "language": "triton", "code": "", "binding": {"op": "relu"},
                         "entry": {"wrapper": "wrapper"}, "dtypes": [dtype], "shapes": 1})
    cpu = torch.device("cpu")
    prob = pyrun.OpProblem(task, cpu)
    book = refbook.Book(prob, 1, cpu, pyrun.layout_of)
    prob.bind(types.SimpleNamespace(wrapper=wrapper))
    guards.set_strict()  # as run_python does before its snapshot
    return pyrun.Run(prob, cpu, counter, set(), [Spy(), *C.selected()], book, pristine.Pristine()), prob


def test_python_trial_loop_calls_the_same_checks():
    from sftbuild.trial import pyrun

    run, prob = _python_run(torch.relu)
    ok, _ = pyrun.trial(run, prob.variants()[0], "float32", "contiguous", 0)
    assert ok and run.checks[0].seen == [("call", True, True), ("call", False, True), ("trial", False, False)]


def test_python_candidate_returning_fp32_for_fp16_is_rejected():
    from sftbuild.trial import pyrun

    run, prob = _python_run(lambda x: torch.relu(x).float(), "float16")
    ok, stats = pyrun.trial(run, prob.variants()[0], "float16", "contiguous", 0)
    assert not ok and stats == {"reason": "incorrect", "why": "output 0 is float32, the reference's is float16"}
    run, prob = _python_run(torch.relu, "float16")
    assert pyrun.trial(run, prob.variants()[0], "float16", "contiguous", 0)[0]


def test_python_candidate_writing_its_input_is_a_cheat():
    from sftbuild.trial import pyrun

    run, prob = _python_run(lambda x: x.relu_().clone())
    ok, stats = pyrun.trial(run, prob.variants()[0], "float32", "contiguous", 0)
    assert not ok and stats == {"reason": "cheat", "why": "the candidate modified input 0"}


def test_python_candidate_updating_its_input_and_returning_it_is_an_in_place_op():
    from sftbuild.trial import pyrun

    run, prob = _python_run(lambda x: x.relu_())  # RoPE-style: the result is written where the input lay
    ok, stats = pyrun.trial(run, prob.variants()[0], "float32", "contiguous", 0)
    assert not ok and stats["reason"] == "cheat"  # relu's contract leaves the input alone
    prob.call = {"entry": "wrapper", "kind": "function", "args": [["input", 0]],
                 "outputs": [{"from": "return", "index": None}]}  # a package's entry point, as the probe binds it
    ok, stats = pyrun.trial(run, prob.variants()[0], "float32", "contiguous", 0)
    assert ok, stats
    assert run.in_place == (0,)
    run, prob = _python_run(lambda x: x[:])  # an untouched input handed back is still no output of its own
    ok, stats = pyrun.trial(run, prob.variants()[0], "float32", "contiguous", 0)
    assert not ok and stats["reason"] == "cheat" and "view of an input" in stats["why"]


def test_an_entry_handing_back_the_input_it_overwrote_is_in_place_too():
    """A fused loss leaves its gradient in the logits and returns them beside the compared result."""
    from sftbuild.trial import guards, pristine, pyrun, refbook

    counter = types.SimpleNamespace(count=0, names=set())

    def entry(x, keep):
        counter.count += 1
        y = torch.relu(x)
        x.mul_(2.0)  # scratch written into the input ...
        return (y, x) if keep else (y,)  # ... and handed back, or not
    for keep, ok_expected in ((True, True), (False, False)):
        call = {"entry": "entry", "kind": "function", "args": [["input", 0], ["value", keep]],
                "outputs": [{"from": "return", "index": 0}]}
        task = TrialTask.of({"id": "t", "language": "triton", "code": "", "binding": {"op": "relu", "call": call},
                             "dtypes": ["float32"], "shapes": 1})
        cpu = torch.device("cpu")
        prob = pyrun.OpProblem(task, cpu)
        book = refbook.Book(prob, 1, cpu, pyrun.layout_of)
        prob.bind(types.SimpleNamespace(entry=entry))
        guards.set_strict()
        run = pyrun.Run(prob, cpu, counter, set(), C.selected(), book, pristine.Pristine())
        ok, stats = pyrun.trial(run, prob.variants()[0], "float32", "contiguous", 0)
        assert ok is ok_expected, stats
        if not ok:
            assert stats["reason"] == "cheat" and "modified input 0" in stats["why"]


def test_input_gradients_may_come_back_contiguous_whatever_autograds_layout():
    """The reference's gradient of k in q @ k^T comes out transposed: that layout is autograd's, no
    contract, so a backward check's gradient outputs are `free` (their own layout or contiguous)."""
    from sftbuild.trial import pyrun, refbook

    class Grads:
        dtypes, layouts = ["float32"], ["contiguous"]

        def variants(self):
            return [(3, 5)]

        def grown(self, v):
            return False

        def layouts_for(self, dtype):
            return ["contiguous"]

        def inputs(self, v, dtype, seed, dev, value_class="normal"):
            return [torch.randn(v, generator=torch.Generator().manual_seed(seed))]

        def reference(self, v, dtype, inputs, double=False):
            x = inputs[0].double() if double else inputs[0]
            return [x * 2, (x * 3).t().contiguous().t()]  # an output, then a "gradient" laid out transposed

        def free_outputs(self):
            return (1,)
    book = refbook.Book(Grads(), 1, torch.device("cpu"), pyrun.layout_of)
    specs = book.get(0, "float32", 0).specs["contiguous"]
    assert not specs[0].free and specs[1].free
    check = _check("output_type")
    x = torch.randn(3, 5)
    assert check.after_call(C.Call([x], [x * 2, x * 3], expected=specs)) is None  # contiguous gradient
    assert check.after_call(C.Call([x], [(x * 2).t().contiguous().t(), x * 3], expected=specs)).reason == "incorrect"


# ---- config selects the checks: validate.runtime_checks travels in the task ----------------------

def test_task_selection_reaches_the_python_loop():
    from sftbuild.trial import pyrun

    task = {"id": "t", "language": "triton", "code": "import torch\n\ndef wrapper(x):\n    return torch.relu(x)\n",
            "binding": {"op": "relu"}, "entry": {"wrapper": "wrapper"}, "dtypes": ["float32"], "shapes": 1,
            "seeds": 1, "timing": False, "device": "cpu"}
    assert pyrun.run_python(task)["reason"] == "cheat"  # a wrapper that launches no Triton kernel
    assert pyrun.run_python({**task, "runtime_checks": {"triton_decoy": False}})["status"] == "ok"


def test_a_misspelt_check_fails_before_any_record():
    import dataclasses

    from sftbuild.config import ValidateConfig
    from sftbuild.validate import pipeline

    cfg = dataclasses.replace(ValidateConfig(), runtime_checks={"nope": False})
    with pytest.raises(PluginError, match="validate.runtime_checks.nope"):
        next(pipeline.validate([], cfg, types.SimpleNamespace(gpu_count=0), "/nonexistent"))


def test_tally_keeps_every_row_and_the_worst_errors_and_the_first_failure_decides():
    from sftbuild.trial.tally import Tally

    t = Tally()
    assert t.add({"shape": [4]}, True, {"max_abs": 0.1, "norm_rel": 1e-3}) is None
    assert t.add({"shape": [8]}, True, {"max_abs": 0.05, "max_rel": 0.2}) is None
    dropped = t.add({"shape": [16]}, False, {"max_abs": 3.0, "why": "NaN where the reference has none"})
    assert dropped["status"] == "dropped" and dropped["reason"] == "incorrect"
    assert dropped["detail"] == "NaN where the reference has none"
    assert [r["ok"] for r in dropped["trials"]] == [True, True, False]
    assert dropped["errors"] == {"max_abs": 3.0, "norm_rel": 1e-3, "max_rel": 0.2}
    assert t.add({}, False, {"reason": "cheat"})["reason"] == "cheat"


def test_a_probed_entrys_recorded_contract_replaces_the_references_and_only_there():
    """A package's own entry returns what its callers get (a loss in the logits' dtype, a transposed
    view of its own buffer): the probe records that, validation holds the entry to it; a candidate for
    the op itself keeps the reference's dtype and memory format."""
    from sftbuild.bind import probe
    from sftbuild.trial import pyrun

    typed = _check("output_type")
    x = torch.randn(2, 3, 4, 5).half()
    ref = x.float().sum(-1)  # the reference's loss is float32, its output contiguous
    theirs = x.sum(-1)  # the entry's is in the input's dtype
    rot = x.transpose(1, 2).contiguous().transpose(1, 2)  # (B, H, S, D) as a view of (B, S, H, D)
    trials = [("float16", theirs, ref), ("float32", x.float().sum(-1), x.double().sum(-1).float())]
    assert probe._one_contract(trials) == {"dtype": "input"}
    assert probe._one_contract([("float16", rot, x.clone())]) == {"order": [0, 2, 1, 3]}
    assert probe._one_contract([("float16", x.clone(), x.clone())]) is None
    # an order that is not the same at every dtype is no contract
    assert probe._one_contract([("float16", rot, x.clone()), ("float32", x.float().permute(0, 1, 3, 2).contiguous()
                                                              .permute(0, 1, 3, 2), x.float())]) is None

    op_pair = pyrun.OpProblem.__new__(pyrun.OpProblem)
    op_pair.call = None
    entry = pyrun.OpProblem.__new__(pyrun.OpProblem)
    entry.call = {"entry": "f", "outputs": [{"from": "return", "index": 0}, {"from": "return", "index": 1}],
                  "contract": [{"dtype": "input"}, {"order": [0, 2, 1, 3]}]}
    want = C.specs([ref, x.clone()])
    assert op_pair.expected(want, "float16") == want
    held = entry.expected(want, "float16")
    assert typed.after_call(C.Call([x], [theirs, rot], expected=held)) is None
    # the candidate for the op keeps the exact contract
    assert "float16, the reference's is float32" in typed.after_call(C.Call([x], [theirs, rot], expected=want)).why
    assert "wrong memory format" in typed.after_call(C.Call([x], [ref, rot], expected=want)).why
    # and the entry's contract is held too: the reference's dtype or layout is now the wrong one
    assert "float32, the reference's is float16" in typed.after_call(C.Call([x], [ref, rot], expected=held)).why
    assert "wrong memory format" in typed.after_call(C.Call([x], [theirs, x.clone()], expected=held)).why


def test_a_gradient_at_a_kink_may_be_either_sides():
    """fp16 inputs can sit exactly on sparsemax's support edge (x_j = max - 1 with a support of one): the
    function has a kink there and autograd picks one subgradient; a kernel that picks the other side's is
    right. Away from kinks, and for a wrong gradient, nothing changes."""
    from sftbuild.trial import pyrun

    prob = pyrun.OpProblem.__new__(pyrun.OpProblem)
    prob.op, prob.params, prob.call, prob._made = ops.get("sparsemax"), {"dim": -1}, {"grad": True}, {}
    x = torch.tensor([[2.0, 1.0, -0.5, 0.25], [0.5, 0.1, 0.3, -1.0]])  # row 0: 1.0 = 2.0 - 1 sits on the edge
    ref64 = prob.reference(None, "float32", [x], double=True)
    native = prob.reference(None, "float32", [x])
    sides = prob.sides(None, "float32", [x])
    ok_sides = [pyrun.with_grads(lambda xs: [prob.op.run_reference(xs, prob.params)], [x.double() * (1 + w * 1e-6)])
                for w in (1.0, -1.0)]
    other = next(s for s in ok_sides if not torch.allclose(s[1], ref64[1]))  # the side autograd did not pick
    other = [t.float() for t in other]
    assert not pyrun.compare_outputs(other, ref64, native, "float32", ops.Tolerance())[0]
    ok, stats = pyrun.compare_outputs(other, ref64, native, "float32", ops.Tolerance(), sides)
    assert ok and stats["at_kink"]
    wrong = [other[0], other[1] * 1.5]
    assert not pyrun.compare_outputs(wrong, ref64, native, "float32", ops.Tolerance(), sides)[0]
    # a forward check has no sides
    prob.call = {}
    assert prob.sides(None, "float32", [x]) == []
