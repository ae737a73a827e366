"""The candidate kind comes from the record's binding and language, never from its code."""
import pytest

from sftbuild.binding import Binding
from sftbuild.trial import kinds
from sftbuild.trial_types import CompileTask, TrialTask

CASES = [
    ({"kind": "op", "op": "relu", "harness": "generic_launch"}, "cuda", "cuda_harness"),
    ({"kind": "program", "how": "file_reference", "harness": "file_reference"}, "cuda", "cuda_file_reference"),
    ({"kind": "op", "op": "gelu", "how": "probed", "harness": "host_launcher"}, "cuda", "cuda_host_launcher"),
    ({"kind": "op", "op": "gelu", "how": "probed", "harness": "extension_function"}, "cuda", "cuda_extension_function"),
    ({"kind": "op", "op": "relu", "how": "probed"}, "triton", "triton_op"),
    ({"kind": "kernelbench", "reference": "class Model: ..."}, "kernelbench", "module_pair"),
    ({"kind": "inductor", "program": "p"}, "triton", "inductor_program"),
]


@pytest.mark.parametrize("binding, language, name", CASES, ids=[c[2] for c in CASES])
def test_the_binding_picks_the_kind(binding, language, name):
    binding = Binding.from_dict(binding)
    kind = kinds.of(binding, language)
    assert kind.name == name
    code = "load_inline async_compile.triton("  # the code's text plays no part
    assert kinds.for_task(TrialTask(id="r", language=language, code=code, binding=binding)).name == name
    assert kinds.for_task(TrialTask(id="r", language=language, code=code, kind=name)).name == name
    assert kinds.for_task(CompileTask(code=code, cache_dir="/c", language=language, kind=name)).name == name


def test_no_binding_or_no_kind_is_none():
    assert kinds.of(None, "cuda") is None
    assert kinds.of(Binding.from_dict({"kind": "program", "program": "p"}), "triton") is None  # dropped as unbound, naming it


def test_only_triton_modules_without_a_cuda_build_or_inductor_launcher_are_interpreted():
    op, pair = kinds.KINDS.get("triton_op")(), kinds.KINDS.get("module_pair")()

    def task(code):
        return TrialTask(id="r", language="triton", code=code)

    assert op.interpretable(task("import triton\n@triton.jit\ndef k(): pass"))
    assert not pair.interpretable(task("import triton\nmod = load_inline('m', '')"))
    assert not pair.interpretable(task("import triton\nk = async_compile.triton('k', '')"))
    assert not kinds.KINDS.get("cuda_harness")().interpretable(task("triton"))
    assert pair.builds_extension(task("load_inline('m')")) and not op.builds_extension(task("load_inline"))


def test_a_kernel_no_kind_runs_still_gets_its_languages_gate(monkeypatch):
    """An unbound record's kernel (the compile column of a yield table) compiles as its language's gate."""
    from sftbuild.validate import pipeline

    monkeypatch.setattr(pipeline, "compile_cuda", lambda task: {"ok": True, "gate": "cuda"})
    assert pipeline.compile_any(CompileTask(code="__global__ void k() {}", cache_dir="/c"))["gate"] == "cuda"
    assert pipeline.compile_any(CompileTask(code="x = 1", cache_dir="/c", language="triton"))["ok"]
