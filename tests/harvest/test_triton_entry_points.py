"""Entry points of Triton records, read from the AST of real package sources (liger-kernel and
flag_gems wheels, unpacked to tmp), and the package tree a record imports at run time."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from sftbuild.harvest.triton_extract import entry_points, extract_kernels

PKGS = Path("/work/pkgs")
LIGER = PKGS / "liger_kernel-0.8.5-py3-none-any.whl"
GEMS = PKGS / "flag_gems-5.0.2-py3-none-any.whl"


def wheel_file(wheel: Path, member: str) -> str:
    if not wheel.is_file():
        pytest.skip(f"{wheel.name} is not downloaded here")
    with zipfile.ZipFile(wheel) as z:
        return z.read(member).decode()


def kernels(src: str) -> dict:
    return {k.name: k for k in extract_kernels(src)[0]}


def by_name(k) -> dict:
    return {e["qualname"]: e for e in k.entry_points}


def test_liger_swiglu_wrappers_forward_and_backward():
    ks = kernels(wheel_file(LIGER, "liger_kernel/ops/swiglu.py"))
    fwd = by_name(ks["_swiglu_forward_kernel"])["swiglu_forward"]
    assert fwd["kind"] == "function" and fwd["role"] == "forward"
    assert [p["name"] for p in fwd["params"]] == ["a", "b", "gate_multiplier"]
    assert fwd["params"][2]["default"] == 1.0 and fwd["params"][2]["annotation"] == "float"
    assert "_swiglu_forward_kernel" in fwd["launches"]
    bwd = by_name(ks["_swiglu_backward_kernel"])["swiglu_backward"]
    assert bwd["role"] == "backward"


def test_liger_rms_norm_params_get_the_files_defaults_as_hints():
    ks = kernels(wheel_file(LIGER, "liger_kernel/ops/rms_norm.py"))
    e = by_name(ks["_rms_norm_forward_kernel"])["rms_norm_forward"]
    params = {p["name"]: p for p in e["params"]}
    assert not params["X"]["has_default"] and "hint" not in params["X"]
    assert params["casting_mode"]["hint"] == "llama"  # LigerRMSNormFunction.forward declares it
    assert params["offset"]["hint"] == 0.0


def test_autograd_function_that_launches_is_called_through_apply():
    ks = kernels(wheel_file(LIGER, "liger_kernel/ops/experimental/embedding.py"))
    e = by_name(ks["embedding_forward_kernel"])["LigerEmbeddingFunction.apply"]
    assert e["kind"] == "autograd" and e["role"] == "forward"
    assert [p["name"] for p in e["params"]] == ["embeddings", "indices"]  # ctx dropped
    assert e["launches"] == ["embedding_forward_kernel"]
    assert e["backward"]["launches"] == ["embedding_backward_kernel"]
    assert ks["embedding_forward_kernel"].entry_points[0]["qualname"] == "LigerEmbeddingFunction.apply"


def test_flag_gems_pointwise_kernels_are_launched_by_a_plain_call():
    ks = kernels(wheel_file(GEMS, "flag_gems/ops/abs.py"))
    k = ks["abs_func"]
    assert "def abs(A)" in k.code  # the wrapper that calls the decorated kernel is in the record
    names = by_name(k)
    assert names["abs"]["launches"] == ["abs_func"] and names["abs"]["role"] == "forward"


def test_whole_packages_most_kernels_have_an_entry_point(tmp_path):
    for wheel, prefix, floor in ((LIGER, "liger_kernel/ops/", 0.8), (GEMS, "flag_gems/ops/", 0.85)):
        if not wheel.is_file():
            pytest.skip(f"{wheel.name} is not downloaded here")
        total = found = 0
        with zipfile.ZipFile(wheel) as z:
            for name in sorted(z.namelist())[:400]:  # a sample keeps the test fast
                if not (name.startswith(prefix) and name.endswith(".py")):
                    continue
                src = z.read(name).decode()
                if "jit" not in src:
                    continue
                for k in extract_kernels(src)[0]:
                    total += 1
                    found += bool(k.entry_points)
        assert total and found / total >= floor, (wheel.name, found, total)


def test_entry_points_of_code_without_launches_is_empty():
    assert entry_points("import triton\n\n@triton.jit\ndef k(x):\n    pass\n") == []
    assert entry_points("def broken(:\n") == []


def test_archive_harvest_keeps_the_package_tree_by_content(make_ctx, tmp_path):
    pkg = tmp_path / "src"
    (pkg / "toypkg" / "ops").mkdir(parents=True)
    (pkg / "toypkg" / "__init__.py").write_text("")
    (pkg / "toypkg" / "ops" / "__init__.py").write_text("")
    (pkg / "toypkg" / "ops" / "util.py").write_text("def block(n):\n    return 1024\n")
    (pkg / "toypkg" / "ops" / "scale.py").write_text(SCALE)
    wheel = tmp_path / "toypkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for p in sorted(pkg.rglob("*.py")):
            z.write(p, p.relative_to(pkg).as_posix())
    from sftbuild.harvest import stage

    trees = []
    for _ in range(2):
        ctx = make_ctx()
        stage.run(ctx, [str(wheel)])
        recs = [r for r in ctx.store.records() if r.language == "triton"]
        assert recs
        tree = Path(recs[0].provenance["tree"])
        assert (tree / "toypkg" / "ops" / "util.py").read_text().startswith("def block")
        assert tree.parent.name == "trees" and tree.parent.parent == ctx.workspace.resolve()
        assert recs[0].entry["entry_points"][0]["qualname"] == "scale"
        trees.append(tree.name)
    assert trees[0] == trees[1]  # the same content, the same folder name


SCALE = '''
import torch
import triton
import triton.language as tl

from toypkg.ops.util import block


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * 2.0, mask=mask)


def scale(x):
    y = torch.empty_like(x)
    n = x.numel()
    scale_kernel[(triton.cdiv(n, block(n)),)](x, y, n, BLOCK=block(n))
    return y
'''


def test_guarded_imports_stay_in_the_closure():
    src = wheel_file(LIGER, "liger_kernel/ops/geglu.py")
    k = kernels(src)["_geglu_tanh_forward_kernel"]
    assert "from triton.language.extra.libdevice import tanh" in k.code
    assert "def compare_version" not in k.code and "compare_version" in k.code  # imported, used by the guard


def test_public_callers_of_a_launcher_are_kept_as_entry_points():
    from sftbuild.harvest.triton_extract import extract_kernels

    src = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _trunc_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _launch(x):
    y = torch.empty_like(x)
    _trunc_kernel[(1,)](x, y, x.numel(), BLOCK=1024)
    return y


def div_mode(x, rounding_mode=None):
    return _launch(x)


def unrelated(x):
    return x
'''
    (k,) = extract_kernels(src)[0]
    assert "def div_mode" in k.code and "def unrelated" not in k.code
    assert {e["qualname"] for e in k.entry_points} == {"_launch", "div_mode"}
