"""Host-side bookkeeping in Triton wrappers is not "torch does the work": the static rule lets it
through and the run-time library_kernels check judges it by GPU time. Every red-team case stays
caught (tests/validate/test_validate_redteam.py runs them; the static ones are re-checked here)."""
from __future__ import annotations

from sftbuild.trial import checks as C
from sftbuild.validate import static
from tests.redteam.cases import TRITON_RELU, cases

PARTIALS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _dw_partial_kernel(dy_ptr, x_ptr, dw_ptr, rows, cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for r in range(pid, rows, tl.num_programs(0)):
        acc += tl.load(dy_ptr + r * cols + offs, mask=mask, other=0.0) * tl.load(x_ptr + r * cols + offs, mask=mask)
    tl.store(dw_ptr + pid * cols + offs, acc, mask=mask)


def dw(dy, x):
    rows, cols = x.shape
    programs = 8
    partial = torch.empty(programs, cols, dtype=torch.float32, device=x.device)
    _dw_partial_kernel[(programs,)](dy, x, partial, rows, cols, BLOCK=triton.next_power_of_2(cols))
    order = torch.sort(torch.tensor([3, 1, 2])).indices  # a handful of indices
    return partial.sum(dim=0).to(x.dtype), order
'''


def findings(code: str) -> list[str]:
    return [f"{f.check}: {f.detail}" for f in static.scan(code, "triton")]


def test_partial_sums_and_index_sorts_in_a_launching_wrapper_pass():
    assert findings(PARTIALS) == []


def test_the_same_reduction_without_any_launch_is_still_torch_doing_the_work():
    no_launch = PARTIALS.replace(
        "    _dw_partial_kernel[(programs,)](dy, x, partial, rows, cols, BLOCK=triton.next_power_of_2(cols))\n",
        "    partial = dy * x\n")
    assert any(f.startswith("torch_does_the_work") for f in findings(no_launch))


def test_compute_ops_stay_cheats_even_beside_a_launch():
    relu_by_torch = TRITON_RELU.replace("    return y\n", "    return torch.relu(y) + torch.matmul(x, x.T).sum()\n")
    assert any("torch.relu" in f or "torch.matmul" in f for f in findings(relu_by_torch))
    aten = TRITON_RELU.replace("    return y\n", "    return torch.ops.aten.relu(xc)\n")
    assert findings(aten)


def test_a_package_reference_nothing_calls_is_not_a_wrapper():
    ref = PARTIALS + "\n\ndef dw_torch_ref(dy, x):\n    return torch.softmax(dy * x, -1).sum(0)\n"
    assert findings(ref) == []
    called = ref.replace("    return partial.sum(dim=0).to(x.dtype), order",
                         "    return dw_torch_ref(dy, x), order")
    assert any("torch.softmax" in f for f in findings(called))


def test_static_red_team_cases_are_still_caught():
    for case in cases():
        if case.static:
            found = static.scan(case.record["code"], case.record["language"])
            assert found and found[0].reason in case.expect, case.name


def _library(profile):
    check = next(c for c in C.selected() if c.name == "library_kernels")
    return check.after_profile(profile)


def test_library_kernels_judged_by_their_share_of_gpu_time():
    own = {"_dw_partial_kernel"}
    small = C.Profile(["_dw_partial_kernel", "reduce_kernel<512, 1>"], own=set(), triton=own,
                      times={"_dw_partial_kernel": 40.0, "reduce_kernel<512, 1>": 3.0})
    assert _library(small) is None
    big = C.Profile(["_dw_partial_kernel", "reduce_kernel<512, 1>"], own=set(), triton=own,
                    times={"_dw_partial_kernel": 2.0, "reduce_kernel<512, 1>": 30.0})
    assert "of the GPU time" in _library(big).why
    gemm = C.Profile(["ampere_sgemm_128x64_nn", "relu_kernel"], own=set(), triton={"relu_kernel"},
                     times={"ampere_sgemm_128x64_nn": 50.0, "relu_kernel": 1.0})
    assert _library(gemm).reason == "cheat"
    # no own Triton kernel ran, or no times measured: any library kernel is the work
    assert _library(C.Profile(["reduce_kernel"], own=set(), triton=set(), times={"reduce_kernel": 1.0}))
    assert _library(C.Profile(["ampere_sgemm_128x64_nn", "my_kernel"], own={"my_kernel"}))


def test_generated_kernels_calling_the_candidates_jit_functions_count_as_its_launches(tmp_path):
    import types

    from sftbuild.trial.guards import LaunchCounter

    cand = tmp_path / "cand.py"
    ns: dict = {}
    exec(compile("def abs_func(x):\n    return x\n", str(cand), "exec"), ns)
    own = types.SimpleNamespace(fn=ns["abs_func"])  # what a JITFunction wraps
    gen: dict = {"abs_func": own}
    exec(compile("def generated_kernel(x):\n    return abs_func(x)\n", str(tmp_path / "gen.py"), "exec"), gen)
    other: dict = {}
    exec(compile("def unrelated(x):\n    return x\n", str(tmp_path / "gen2.py"), "exec"), other)
    counter = LaunchCounter(str(cand))
    assert counter.calls_own(gen["generated_kernel"])
    assert not counter.calls_own(other["unrelated"])


def test_a_launcher_of_kernels_imported_from_a_sibling_module_is_lenient_too():
    imported = PARTIALS.replace("@triton.jit\ndef _dw_partial_kernel", "from pkg.kernels import _dw_partial_kernel\n\n\n"
                                "@triton.jit\ndef _unused_kernel")
    assert "from pkg.kernels import _dw_partial_kernel" in imported
    assert findings(imported) == []
    # an imported name that is only called, never launched, earns no leniency
    called = imported.replace("_dw_partial_kernel[(programs,)](", "_dw_partial_kernel(")
    assert any(f.startswith("torch_does_the_work") for f in findings(called))


def test_a_launch_straight_on_a_compiled_kernel_counts_as_the_candidates(tmp_path):
    """A library that keeps the compiled kernel of its first call launches it with `compiled[grid](...)`
    (no JITFunction.run); that launch runs the candidate's kernel all the same."""
    import types

    from triton.compiler.compiler import CompiledKernel

    from sftbuild.trial.guards import LaunchCounter

    ns: dict = {}
    exec(compile("def relu_kernel(x):\n    return x\n", str(tmp_path / "cand.py"), "exec"), ns)
    other: dict = {}
    exec(compile("def other_kernel(x):\n    return x\n", str(tmp_path / "lib.py"), "exec"), other)
    ran = []

    class Compiled(CompiledKernel):  # what a first call returns, with its launcher stubbed
        def __init__(self, fn):
            self.src = types.SimpleNamespace(fn=types.SimpleNamespace(fn=fn))
            self.function = self.packed_metadata = None

        def _init_handles(self):
            pass

        def launch_metadata(self, *args):
            return None

        @property
        def run(self):
            return lambda *a: ran.append(a[-1])

        def __del__(self):
            pass

    compiled = Compiled
    with LaunchCounter(str(tmp_path / "cand.py")) as counter:
        compiled(ns["relu_kernel"])[(1, 1, 1)]("x", stream=0)
        compiled(other["other_kernel"])[(1, 1, 1)]("y", stream=0)
    assert ran == ["x", "y"] and counter.count == 1 and counter.names == {"relu_kernel"}
    assert "launch" not in CompiledKernel.__getitem__.__name__  # restored on exit


FALLBACK = TRITON_RELU.replace('''def relu(x):
    xc = x.contiguous()''', '''def _launch(xc, y, n):
    relu_kernel[(triton.cdiv(n, 1024),)](xc, y, n, BLOCK=1024)


def relu(x):
    if not x.is_cuda:  # another device: torch's own
        return torch.relu(x)
    xc = x.contiguous()''').replace("    relu_kernel[(triton.cdiv(n, 1024),)](xc, y, n, BLOCK=1024)\n    return y",
                                    "    _launch(xc, y, n)\n    return y")


def test_an_early_return_to_torch_that_launches_nothing_is_left_to_the_run_time_checks():
    assert "_launch(xc, y, n)" in FALLBACK and "return torch.relu(x)" in FALLBACK
    assert findings(FALLBACK) == []  # a device fallback; on the GPU every call must launch the kernel
    always = FALLBACK.replace("    if not x.is_cuda:  # another device: torch's own\n        return torch.relu(x)\n", "")
    assert findings(always.replace("    return y", "    return torch.relu(x)")), "torch's result, on every path"
    both = FALLBACK.replace("        return torch.relu(x)", "        _launch(x, x, 1)\n        return torch.relu(x)")
    assert findings(both), "a branch that launches a decoy and returns torch's result"


def test_getattr_in_plain_sight_is_no_disguise_but_a_looked_up_torch_function_is():
    head = TRITON_RELU + "\n\ndef props(x, name, dtype):\n"
    plain = ['    return getattr(x, "multi_processor_count", 1)', '    dtype = getattr(torch, dtype)\n    return dtype',
             '    return dtype == getattr(torch, "complex32")']
    for body in plain:
        assert findings(head + body + "\n") == [], body
    hidden = ['    return getattr(torch, "softmax")(x)', '    f = getattr(torch, name)\n    return f(x)',
              '    return getattr(x, "softmax")']
    for body in hidden:
        assert any(f.startswith("disguise") for f in findings(head + body + "\n")), body


ACTIVATION = TRITON_RELU.replace('''def relu(x):
    xc = x.contiguous()''', '''def torch_ref(x):  # the package's reference, its fallback for other devices
    return torch.relu(x).exp().log()


def act(x, kind="relu"):
    if not x.is_cuda:
        return torch_ref(x)
    if kind == "relu":
        return relu(x)
    elif kind == "gelu":  # another activation: torch's own
        return torch.nn.functional.gelu(x)
    else:
        raise ValueError(kind)


def relu(x):
    xc = x.contiguous()''')


def test_a_branch_beside_the_launching_one_and_a_reference_behind_a_fallback_are_left_to_the_run_time_checks():
    """FlagGems' MoE activation launches its kernel for silu and calls torch for gelu, chosen by name;
    its mhc wrapper falls back to the package's `*_torch_ref`. The run-time checks judge each call
    (triton_decoy: every trial must launch the candidate's kernels), as for an early return."""
    assert findings(ACTIVATION) == []
    always = ACTIVATION.replace('    if kind == "relu":\n        return relu(x)\n    elif kind == "gelu":',
                                '    if kind == "gelu":')
    assert findings(always), "no branch launches the kernel: torch's gelu is the work"
    called = ACTIVATION + "\n\ndef twice(x):\n    return torch_ref(x)\n"
    assert any("torch_ref" in f for f in findings(called)), "the reference called where no launch is beside it"


def test_a_fallback_whose_every_path_returns_is_a_fallback():
    """FlagGems' smooth_l1_loss_out falls back to aten off the GPU and returns from an inner if/else."""
    code = FALLBACK.replace("        return torch.relu(x)", "        res = torch.relu(x)\n        if x.dim() == 0:\n"
                            "            return res\n        else:\n            return res.clone()")
    assert "res = torch.relu(x)" in code and findings(code) == []
    open_ended = code.replace("        else:\n            return res.clone()", "")
    assert findings(open_ended), "a path that goes on after torch computed the result"


def test_bookkeeping_beside_an_extension_is_left_to_the_run_time_checks_unless_certain():
    by_name = {c.name: c.record["code"] for c in cases()}
    for twin in ("twin_partial_sums_cuda", "twin_segment_offsets_cuda"):  # parts.sum(); cumsum of the lengths
        assert findings(by_name[twin]) == [], twin
    assert findings(by_name["sum_of_input_hidden_cuda"]) == []  # the run-time count judges it
    assert "x.sum of an input returned by forward" in findings(by_name["sum_of_input_returned_cuda"])[0]


def test_library_kernels_are_bookkeeping_where_torch_touched_only_tensors_far_smaller_than_the_inputs():
    import torch

    from sftbuild.trial import guards

    x = torch.randn(1 << 16)
    parts, hidden = guards.TorchWork(), guards.TorchWork()
    with parts:  # what the partial-sum twin does around its kernel: allocation, a copy, a sum of 16 values
        y = torch.empty(16)
        y.copy_(x[:16])
        y.sum(), torch.cumsum(torch.tensor([3, 4, 5]), 0)
    with hidden:
        x.sum()
    assert (parts.ops, parts.elements) == (2, 16) and (hidden.ops, hidden.elements) == (1, x.numel())
    seen = ["partial_sum_kernel", "reduce_kernel<512, 1>"]
    for work, caught in ((parts, False), (hidden, True)):
        profile = C.Profile(seen, own={"partial_sum_kernel"}, torch_ops=work.ops, torch_elements=work.elements,
                            input_elements=x.numel())
        assert bool(_library(profile)) is caught


CHAINED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _dlogits_kernel(logits_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(logits_ptr + offs, tl.exp(tl.load(logits_ptr + offs, mask=m)), mask=m)


def grads(x, w):
    logits = torch.empty(x.shape[0], w.shape[0], device=x.device)
    _dlogits_kernel[(1,)](logits, logits.numel(), BLOCK=1024)
    dlogits = logits.float()
    return torch.mm(dlogits, w), dlogits.t() @ x
'''


def test_a_matmul_chained_on_what_a_launch_wrote_is_left_to_the_run_time_checks():
    assert findings(CHAINED) == []  # dx = dlogits @ W after the kernel wrote dlogits: the work check judges it
    inputs_only = CHAINED.replace("torch.mm(dlogits, w)", "torch.mm(x, w.t())")
    assert any("torch.mm" in f for f in findings(inputs_only))
    before = CHAINED.replace("    logits = torch.empty(x.shape[0], w.shape[0], device=x.device)\n",
                             "    logits = torch.mm(x, w.t())\n")
    assert any("torch.mm" in f for f in findings(before))  # torch computed what the kernel then takes
