"""The candidate kind comes from the record's binding and language, never from its code."""
import pytest

from sftbuild.trial import kinds

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
    kind = kinds.of(binding, language)
    assert kind.name == name
    assert kinds.for_task({"binding": binding, "language": language, "code": "load_inline async_compile.triton("}
                          ).name == name  # the code's text plays no part
    assert kinds.for_task({"kind": name}).name == name


def test_no_binding_or_no_kind_is_none():
    assert kinds.of(None, "cuda") is None and kinds.of({}, "triton") is None
    assert kinds.of({"kind": "program", "program": "p"}, "triton") is None  # dropped as unbound, naming it


def test_only_triton_modules_without_a_cuda_build_or_inductor_launcher_are_interpreted():
    op, pair = kinds.KINDS.get("triton_op")(), kinds.KINDS.get("module_pair")()
    assert op.interpretable({"code": "import triton\n@triton.jit\ndef k(): pass"})
    assert not pair.interpretable({"code": "import triton\nmod = load_inline('m', '')"})
    assert not pair.interpretable({"code": "import triton\nk = async_compile.triton('k', '')"})
    assert not kinds.KINDS.get("cuda_harness")().interpretable({"code": "triton"})
    assert pair.builds_extension({"code": "load_inline('m')"}) and not op.builds_extension({"code": "load_inline"})
