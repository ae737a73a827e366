"""Inductor output code made standalone: kernels, stripping, splicing, arg building, the records a
compiled program yields, and (on the CPU, where Inductor writes C++ with the same `call(args)`)
ModelNew == Model through the validator's module path at more than one size."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sftbuild.binding import Binding
from sftbuild.harvest import inductor
from sftbuild import inductor_code as IC
from sftbuild.harvest.inductor import Compiled, Program
from sftbuild.harvest.kinds.torch_inductor import records
from sftbuild.trial_types import TrialTask
from sftbuild.trial import guards
from sftbuild.validate import pipeline, static

DATA = Path(__file__).parents[1] / "data" / "inductor"
RMS = (DATA / "cuda_add_rms_norm.py").read_text()
GEMM = (DATA / "cuda_linear_gelu_autotune.py").read_text()
PROGRAM = (DATA / "program_ln_gelu.py").read_text()
RMS_PROGRAM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1024))

    def forward(self, x, r):
        h = x + r
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w, h


def get_inputs():
    return [torch.randn(4096, 1024), torch.randn(4096, 1024)]
'''
RMS_SOURCES = ["L['x'].size()[0]", "L['x']", "L['r']", "L['self']._parameters['w']"]


def test_kernels_name_what_they_fuse_and_where_they_launch():
    ks = IC.kernels(GEMM)
    assert [k["name"] for k in ks] == ["triton_tem_fused_addmm_t_0", "triton_poi_fused_addmm_gelu_1"]
    assert ks[1]["aten"] == ["aten.addmm", "aten.gelu"]
    assert all(len(k["launch_sites"]) == 1 and "@triton.jit" in k["code"] for k in ks)
    assert IC.kernel_names(GEMM) == sorted(k["name"] for k in ks)
    assert IC.extern_calls(GEMM) == [] and IC.extern_calls("extern_kernels.mm(a, b, out=c)") == ["mm"]
    # an ATen fallback is host-side library work too (aten._trilinear runs a cuBLAS gemv)
    assert IC.extern_calls("buf0 = torch.ops.aten._trilinear.default(a, b, c, [1], [0], [1], [2])") == ["_trilinear"]


def test_strip_drops_host_paths_and_benchmark_blocks():
    out = IC.strip(RMS)
    assert "/tmp/torchinductor" not in out and "kernel path" not in out
    assert "def get_args" not in out and "benchmark_compiled_module" not in out and "__main__" not in out
    assert "def call(self, args)" in out and "runner = Runner" in out
    assert IC.kernels(out)[0]["code"] == IC.kernels(RMS)[0]["code"]


def test_splice_replaces_one_kernel_and_keeps_the_rest():
    ks = IC.kernels(GEMM)
    new = ks[1]["code"].replace("tmp", "t_")
    out = IC.splice(GEMM, ks[1]["name"], new)
    after = IC.kernels(out)
    assert after[1]["code"] == new and after[0]["code"] == ks[0]["code"]
    assert IC.splice(out, ks[1]["name"], ks[1]["code"]) == GEMM
    tricky = "x = '''\\n'''\n" + ks[0]["code"]  # backslashes and quotes survive
    assert IC.kernels(IC.splice(GEMM, ks[0]["name"], tricky))[0]["code"] == tricky
    with pytest.raises(IC.NotStandalone):
        IC.splice(GEMM, "no_such_kernel", new)


def test_solution_is_standalone_and_passes_the_static_checks():
    sol = IC.solution(RMS_PROGRAM, RMS, RMS_SOURCES, 2)
    assert "class ModelNew(nn.Module)" in sol and "self.w = nn.Parameter(torch.ones(1024))" in sol
    assert "class Model(" not in sol and "def get_inputs" not in sol and "/tmp/torchinductor" not in sol
    assert "args = [L['x'].size()[0], L['x'], L['r'], L['self']._parameters['w']]" in sol
    assert "globals()" not in sol and "set_device" not in sol and "ctypes" not in sol
    assert static.scan(sol, "kernelbench") == []
    for k in IC.kernels(sol):
        assert static.scan(k["code"], "triton") == []


def test_placeholder_sources_must_be_lookups_on_the_locals():
    assert IC.check_source("L['self']._modules['ln']._parameters['weight']")
    for bad in ("G['torch'].pi", "L['x'].sum()", "L[__import__('os')]", "open('f')", "L['x'"):
        with pytest.raises(IC.NotStandalone):
            IC.check_source(bad)


def test_free_sizes_are_the_constants_only_inputs_read():
    assert IC.free_sizes(PROGRAM) == ["batch_size"]
    assert IC.free_sizes(RMS_PROGRAM) == []


def test_records_pair_and_kernels_all_bound():
    comp = Compiled([GEMM], [["L['self']._modules['fc']._parameters['weight']",
                              "L['self']._modules['fc']._parameters['bias']", "L['x'].size()[0]", "L['x']"]],
                    "tensor", "float32")
    prog = Program("linear_gelu", RMS_PROGRAM.replace("self.w = nn.Parameter(torch.ones(1024))",
                                                      "self.fc = nn.Linear(1024, 1024)"))
    recs = records("torch-inductor", prog, comp, {"torch": "2.x", "triton": "3.x"})
    pair, kernels = recs[0], recs[1:]
    assert pair.language == "kernelbench" and pair.binding.kind == "kernelbench"
    assert pair.binding.reference == prog.src and pair.binding.dtypes == ("float32",)
    assert pair.entry["generator"] == "inductor" and pair.entry["gemm"] == "triton"
    assert [k.entry["kernels"][0] for k in kernels] == [k["name"] for k in IC.kernels(GEMM)]
    for k in kernels:
        b = k.binding
        assert b.kind == "inductor" and b.solution == pair.code and b.kernel == k.entry["kernels"][0]
        assert IC.splice(b.solution, b.kernel, k.code) == pair.code
        assert Binding.from_dict(b.to_dict()).to_dict()["solution"] == pair.code
    with pytest.raises(IC.NotStandalone, match="graph break"):
        records("s", prog, Compiled([GEMM, GEMM], [[], []], "tensor", "float32"), {})
    with pytest.raises(IC.NotStandalone, match="returns something other"):
        records("s", prog, Compiled([GEMM], comp.graphs, None, "float32"), {})
    with pytest.raises(IC.NotStandalone, match="none of the 1 output modules"):
        records("s", prog, Compiled([GEMM], [comp.graphs[0][:3]], "tensor", "float32"), {})
    # autotuning may capture benchmark modules beside the graph's own
    bench = "def benchmark(args):\n    pass\n"
    assert records("s", prog, Compiled([bench, GEMM], comp.graphs, "tensor", "float32"), {})[0].code == pair.code
    with pytest.raises(IC.NotStandalone, match="library calls only: mm") as e:
        records("s", prog, Compiled(["def call(args):\n    return (extern_kernels.mm(a, b),)\n"], [[]], "tensor",
                                    "float32"), {})
    assert e.value.reason == "no_triton_kernel"


def test_inductor_records_wait_for_a_gpu_instead_of_the_interpreter():
    class Cfg:
        cpu_interpret = True
        sample_timeout = 10

    item = TrialTask.of({"id": "a", "language": "kernelbench", "code": "import triton\nk = async_compile.triton('k', '')",
                         "binding": {"kind": "kernelbench"}, "dtypes": ["float32"]})
    kern = TrialTask.of({"id": "b", "language": "triton", "code": "@triton.jit\ndef k(): pass",
                         "binding": {"kind": "inductor"}, "dtypes": ["float32"]})
    assert [out for _, out in pipeline._without_gpu([item, kern], Cfg(), {})] == [None, None]


def test_launch_counter_counts_inductor_launches_of_own_kernels():
    th = pytest.importorskip("torch._inductor.runtime.triton_heuristics")

    def launch(name):
        k = object.__new__(th.CachingAutotuner)
        k.inductor_meta = {"kernel_name": name}
        try:
            k.run(stream=0)
        except Exception:  # a bare launcher cannot launch; the count is taken before
            pass

    with guards.LaunchCounter("/nowhere/cand.py", ["triton_poi_fused_add_0"]) as counter:
        launch("triton_poi_fused_add_0")
        launch("someone_elses_kernel")
    assert (counter.count, counter.names) == (1, {"triton_poi_fused_add_0"})


def test_compiles_run_off_the_main_process_and_a_crash_costs_only_its_program():
    head = "import os\nimport torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    raises = Program("raises", head + "def get_inputs():\n    raise ValueError('no inputs')\n")
    crashes = Program("crashes", head + "def get_inputs():\n    os._exit(3)\n")
    out = dict((p.name, c) for p, c in inductor.compile_isolated([raises, crashes], device="cpu"))
    assert out["raises"] == "ValueError: no inputs"
    assert out["crashes"].startswith("the compile process failed (crash")


def test_a_program_that_poisons_its_process_costs_only_itself():
    """A sticky CUDA error (a device-side assert) fails every later call in its process: the programs
    after it in the batch are compiled again in a fresh process, and only its own failure stands."""
    head = "import os\nimport torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    sticky = "raise RuntimeError('CUDA error: device-side assert triggered')"
    poisoner = Program("poisoner", head + "def get_inputs():\n    os.environ['SFTBUILD_POISONED'] = '1'\n"
                       f"    {sticky}\n")
    later = Program("later", head + "def get_inputs():\n    if os.environ.get('SFTBUILD_POISONED'):\n"
                    f"        {sticky}\n    raise ValueError('compiled in a process of its own')\n")
    out = dict((p.name, c) for p, c in inductor.compile_isolated([poisoner, later], device="cpu", processes=1))
    assert out["later"] == "ValueError: compiled in a process of its own"
    assert "device-side assert" in out["poisoner"]


LITERAL = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(48))

    def forward(self, x):
        return torch.softmax(x * self.w, dim=-1).view(-1, 6, 8)


def get_inputs():
    return [torch.randn(40, 48)]
"""


@pytest.fixture(scope="module")
def cpu_compiled():
    """Both programs compiled in one sandbox process on the CPU: their references and sizes."""
    progs = [Program("program_ln_gelu", PROGRAM), Program("literal", LITERAL)]
    return {p.name: c for p, c in inductor.compile_isolated(progs, device="cpu")}


def _task(comp):
    code = IC.solution(comp.reference, comp.codes[0], comp.graphs[0], comp.returns)
    return {"id": "t", "language": "kernelbench", "code": code, "entry": {}, "dtypes": ["float32"],
            "binding": {"kind": "kernelbench", "reference": comp.reference, "dtypes": ["float32"],
                        "sizes": comp.sizes},
            "shapes": 3, "seeds": 1, "timing": False, "device": "cpu"}


def test_cpu_sizes_are_those_the_compiled_code_takes(cpu_compiled):
    ln, lit = cpu_compiled["program_ln_gelu"], cpu_compiled["literal"]
    assert (ln.returns, ln.sizes, ln.reference) == (2, ["batch_size"], PROGRAM)
    # 40 is an input size only: hoisted and free; 48 is the weight's width too: baked in
    assert "size_0 = 40" in lit.reference and "torch.randn(size_0, 48)" in lit.reference
    assert lit.sizes == ["size_0"]


@pytest.mark.parametrize("name", ["program_ln_gelu", "literal"])
def test_cpu_model_new_equals_model_at_several_sizes(cpu_compiled, name):
    from sftbuild.trial import pyrun

    out = pyrun.run_python(_task(cpu_compiled[name]))
    assert out["status"] == "ok", out
    varied = cpu_compiled[name].sizes[0]
    assert len({t["shape"]["sizes"][varied] for t in out["trials"]}) >= 2
    assert {t["layout"] for t in out["trials"]} == {"contiguous", "transposed", "sliced"}
    if name == "program_ln_gelu":
        assert {t["shape"]["sizes"]["dim"] for t in out["trials"]} == {64}


def test_cpu_broken_model_new_is_dropped(cpu_compiled):
    from sftbuild.trial import pyrun

    task = _task(cpu_compiled["program_ln_gelu"])
    task["code"] = task["code"].replace("return tuple(out)", "return (out[0] * 1.01, out[1])")
    out = pyrun.run_python(task)
    assert (out["status"], out["reason"]) == ("dropped", "incorrect")


def test_instructions_show_the_program_and_what_a_kernel_fuses():
    from sftbuild.describe.stage import describe

    recs = records("torch-inductor", Program("add_rms_norm", RMS_PROGRAM),
                   Compiled([RMS], [RMS_SOURCES], 2, "float32"), {})
    conf = {"seed": 0, "languages": ["en", "zh"], "levels": ["brief", "detailed"], "arch": "sm_90",
            "smem_budget": 232448}
    for rec in recs:
        status, _, payload = describe(rec, conf)
        assert status == "ok", payload.get("problems")
        text = payload["instructions"]
        assert all("class Model(nn.Module)" in t for t in text.values())
    pair, kernel = [describe(r, conf)[2]["instructions"] for r in recs]
    assert "ModelNew" in pair["en:brief"] and "Triton kernels" in pair["en:brief"]
    assert "ModelNew" in pair["zh:brief"] and "Triton Kernel" in pair["zh:brief"]
    for text in (kernel["en:brief"], kernel["zh:brief"]):
        assert "`aten.rsqrt`" in text and "triton_per_fused_add_mean_mul_pow_rsqrt_0" in text
        assert "`out_ptr2`" in text and "`in_ptr0`" in text


def test_harvested_records_are_all_bound_and_wait_for_a_gpu(make_ctx, monkeypatch, tmp_path):
    import torch

    from sftbuild.bind import stage as bind
    from sftbuild.describe import stage as describe
    from sftbuild.harvest import stage as harvest
    from sftbuild.validate import stage as validate

    prog = tmp_path / "add_rms_norm.py"
    prog.write_text(RMS_PROGRAM)
    broken = tmp_path / "graph_break.py"
    broken.write_text(RMS_PROGRAM)

    def compiled(progs, device="cuda"):
        for p in progs:
            graphs = [RMS_SOURCES] * (2 if p.name.endswith("graph_break.py") else 1)
            yield p, Compiled([RMS] * len(graphs), graphs, 2, "float32")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(inductor, "compile_isolated", compiled)
    ctx = make_ctx(gpus="none")
    stats = harvest.run(ctx, [f"inductor:{prog}", f"inductor:{broken}"])
    assert stats["errors"] == {}
    recs = list(ctx.store.records())
    assert sorted(r.language for r in recs) == ["kernelbench", "triton"]
    assert [s["reason"] for s in ctx.store.skips()] == ["not_standalone"]
    monkeypatch.undo()
    bind.run(ctx)
    describe.run(ctx)
    validate.run(ctx)
    for r in ctx.store.records():
        assert r.binding and r.binding.how == "exact"
        res = ctx.store.result(r.id, "validate")
        assert (res["status"], res["reason"]) == ("waiting", "needs_gpu"), res


def test_hoisted_sizes_leave_other_literals_and_the_computation_alone():
    import torch

    src = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
           "        super().__init__()\n        self.emb = nn.Embedding(1000, 16)\n\n    def forward(self, ids, x):\n"
           "        return self.emb(ids) + x\n\n\ndef get_inputs():\n"
           "    return [torch.randint(0, 1000, (64,)), torch.randn(64, 16)]\n")
    out = IC.hoist_sizes(src)
    assert "size_0 = 64\n" in out and "torch.randint(0, 1000, (size_0,)), torch.randn(size_0, 16)" in out
    assert IC.free_sizes(out) == ["size_0"] and IC.hoist_sizes(out) == out
    assert IC.hoist_sizes(PROGRAM) == PROGRAM  # sizes already named
    a, b = {}, {}
    exec(src, a)
    exec(out, b)
    assert [t.shape for t in a["get_inputs"]()] == [t.shape for t in b["get_inputs"]()]
    torch.manual_seed(0)
    want = a["get_inputs"]()
    torch.manual_seed(0)
    assert all(torch.equal(x, y) for x, y in zip(want, b["get_inputs"]()))


def test_static_checks_still_catch_torch_doing_the_work_in_an_inductor_solution():
    sol = IC.solution(RMS_PROGRAM, RMS, RMS_SOURCES, 2)
    cheat = sol.replace("        out = _inductor_call(args)\n",
                        "        out = _inductor_call(args)\n        out = [torch.softmax(x, -1), x]\n")
    assert cheat != sol
    assert [f.check for f in static.scan(cheat, "kernelbench")][:1] == ["torch_does_the_work"]
    assert static.scan(IC.strip(RMS), "kernelbench")  # the raw output code's idioms are not waved through


def test_a_kernel_record_runs_as_its_program_with_its_kernel_spliced_in():
    from sftbuild.trial import pyrun

    recs = records("torch-inductor", Program("add_rms_norm", RMS_PROGRAM),
                   Compiled([RMS], [RMS_SOURCES], 2, "float32"), {})
    pair, kernel = recs
    task = TrialTask(kernel.id, "triton", kernel.code, binding=kernel.binding)
    assert pyrun.inductor_candidate(task) == pair.code
    changed = kernel.code.replace("tmp2 * tmp12", "tmp2 * tmp12 * 2")
    spliced = pyrun.inductor_candidate(dataclasses.replace(task, code=changed))
    assert IC.kernels(spliced)[0]["code"] == changed and "class ModelNew" in spliced
    out = pyrun.run_python({"code": task.code, "id": "k", "language": "triton", "binding": {"kind": "inductor"},
                            "entry": {}, "dtypes": ["float32"], "shapes": 1, "seeds": 1, "timing": False,
                            "device": "cpu"})
    assert (out["status"], out["reason"]) == ("dropped", "unbound")


def _program(forward: str, inputs: str = "torch.randn(64, 32)", init: str = "") -> str:
    return (f"import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Model(nn.Module):\n"
            f"    def __init__(self):\n        super().__init__()\n{init or '        pass'}\n\n"
            f"    def forward(self, x):\n        return {forward}\n\n\ndef get_inputs():\n    return [{inputs}]\n")


@pytest.mark.parametrize("forward, inputs, seen", [
    ("torch.relu(x)", "torch.randn(64, 32)", {"random": False, "mutates": [], "constant": False}),
    ("F.dropout(x, 0.5, training=True)", "torch.randn(64, 32)", {"random": True, "mutates": [], "constant": False}),
    ("x.add_(1.0)", "torch.randn(64, 32)", {"random": False, "mutates": [0], "constant": False}),
    ("torch.ones_like(x)", "torch.randn(64, 32)", {"random": False, "mutates": [], "constant": True}),
])
def test_running_the_program_shows_what_a_pair_cannot_compare(forward, inputs, seen):
    assert inductor.behaviour(_program(forward, inputs), "cpu") == seen


def test_training_batch_norm_updates_its_inputs():
    prog = _program("F.batch_norm(x, self.m, self.v, training=True)",
                    init="        self.m = torch.zeros(32)\n        self.v = torch.ones(32)")
    assert inductor.behaviour(prog, "cpu")["mutates"] == []  # module buffers are the module's own
    prog = prog.replace("def forward(self, x):", "def forward(self, x, m, v):").replace("self.m, self.v", "m, v") \
        .replace("return [torch.randn(64, 32)]", "return [torch.randn(64, 32), torch.zeros(32), torch.ones(32)]")
    assert inductor.behaviour(prog, "cpu")["mutates"] == [1, 2]


def test_programs_a_pair_cannot_validate_are_skipped_with_their_reason():
    comp = Compiled([GEMM], [["L['self']._modules['fc']._parameters['weight']",
                              "L['self']._modules['fc']._parameters['bias']", "L['x'].size()[0]", "L['x']"]],
                    "tensor", "float32")
    prog = Program("p", RMS_PROGRAM)
    for seen, reason in [({"random": True}, "random"), ({"mutates": [1]}, "mutates_inputs"),
                         ({"constant": True}, "constant_output")]:
        comp.behaviour = seen
        with pytest.raises(IC.NotStandalone) as e:
            records("s", prog, comp, {})
        assert e.value.reason == reason


def test_a_pair_left_to_cudnn_is_skipped_and_its_kernels_kept():
    conv = GEMM + "\n\ndef _library(x, w):\n    return extern_kernels.convolution(x, w)\n"
    comp = Compiled([conv], [["L['self']._modules['fc']._parameters['weight']",
                              "L['self']._modules['fc']._parameters['bias']", "L['x'].size()[0]", "L['x']"]],
                    "tensor", "float32")
    skipped = []
    recs = records("s", Program("conv", RMS_PROGRAM), comp, {}, skip=lambda *a: skipped.append(a))
    assert recs and all(r.binding.kind == "inductor" for r in recs)
    assert [(name, reason) for name, reason, _ in skipped] == [("conv", "library_kernels")]
    # each kernel runs inside its program, whose library calls are not the record's
    task = pipeline.gpu_task(recs[0], {}, pipeline_cfg(), "/tmp")
    assert task.runtime_checks["library_kernels"] is False


def pipeline_cfg():
    from sftbuild.config import ValidateConfig

    return ValidateConfig()
