"""A kernel that only another module of its package launches gets that launcher in its record
(relative imports made absolute, the kernel's own import left out), so it has an entry point and
can be probed; a kernel nothing launches keeps none."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from sftbuild.cli import main
from sftbuild.harvest.triton_extract import foreign_launchers, module_of
from sftbuild.store import Store

KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def _neg_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, -tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def _orphan_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n)
'''
API = '''
import torch
import triton

from .kernels import _neg_kernel as negk
from .util import block_for


def negate(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    block = block_for(n)
    negk[(triton.cdiv(n, block),)](x, out, n, BLOCK=block)
    return out


def unrelated():
    return 1
'''
UTIL = "def block_for(n):\n    return 256\n"


def package(root):
    pkg = root / "negpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text(KERNELS)
    (pkg / "api.py").write_text(API)
    (pkg / "util.py").write_text(UTIL)
    return root


def test_launchers_of_imported_kernels_are_read_with_absolute_imports():
    assert module_of("negpkg/ops/x.py") == "negpkg.ops.x" and module_of("negpkg/__init__.py") == "negpkg"
    (found,) = [f for f in foreign_launchers(API, "negpkg/api.py") if not f.get("wraps")]
    assert (found["module"], found["kernel"]) == ("negpkg.kernels", "_neg_kernel")
    assert "from negpkg.util import block_for" in found["code"] and "def negate" in found["code"]
    assert "import _neg_kernel" not in found["code"] and "_neg_kernel[(" in found["code"] and "negk" not in found["code"]
    assert "def unrelated" not in found["code"]


def test_harvest_appends_the_launcher_and_the_probe_binds_through_it(tmp_path):
    src = package(tmp_path / "src")
    ws = tmp_path / "ws"
    res = CliRunner().invoke(main, ["harvest", "-w", str(ws), "-q", str(src)])
    assert res.exit_code == 0, res.output
    store = Store(ws)
    try:
        recs = {r.name: r for r in store.records()}
    finally:
        store.close()
    rec = recs["_neg_kernel"]
    assert [e["qualname"] for e in rec.entry["entry_points"]] == ["negate"]
    assert rec.entry["launched_from"] == "another module"
    assert not recs["_orphan_kernel"].entry["entry_points"]

    pytest.importorskip("triton")
    from sftbuild.executor import INTERPRETER_ENV
    from sftbuild.bind.binders.probed import Probed
    from sftbuild.sandbox import run_isolated

    b = Probed()
    out = run_isolated(b.task_fn, b.plan(rec, seconds=60), 120, env=INTERPRETER_ENV)
    found = b.accept(rec, out)
    assert found is not None, out.get("unbound")
    assert found["op"] == "neg" and found["call"]["entry"] == "negate"


CHOOSING = '''
from __future__ import annotations

import torch

import negpkg.kernels as K
from negpkg import kernels
from negpkg.kernels import _helper


def negate(x: torch.Tensor, fast: bool = True) -> torch.Tensor:
    out = torch.empty_like(x)
    fn = K._neg_kernel if fast else kernels._neg_kernel.fn
    fn[(1,)](x, out, x.numel(), BLOCK=256)
    return out


def zero(x):
    kernels._orphan_kernel[(1,)](x, x.numel(), BLOCK=256)
    return x
'''
DEVICE_USER = '''
import triton
from .kernels import _helper


@triton.jit
def _twice_kernel(x_ptr, n, BLOCK: tl.constexpr):
    _helper(x_ptr)
'''


def test_launchers_reach_kernels_through_modules_and_run_time_choices():
    found = {(f["kernel"], f.get("device", False)): f for f in foreign_launchers(CHOOSING, "negpkg/api.py")}
    neg = found[("_neg_kernel", False)]
    assert neg["module"] == "negpkg.kernels" and "def negate" in neg["code"] and "def zero" not in neg["code"]
    assert found[("_orphan_kernel", False)]["module"] == "negpkg.kernels"
    (helper,) = [f for f in foreign_launchers(DEVICE_USER, "negpkg/twice.py") if f.get("device")]
    assert (helper["module"], helper["kernel"]) == ("negpkg.kernels", "_helper")


def test_a_launcher_appended_keeps_future_imports_first():
    from sftbuild.harvest.triton_extract import attach_launchers

    code, entries = attach_launchers(KERNELS, [foreign_launchers(CHOOSING, "negpkg/api.py")[0]["code"]])
    assert code.startswith("from __future__ import annotations\n") and code.count("from __future__") == 1
    assert {e["qualname"] for e in entries} >= {"negate"}


def test_a_kernel_reexported_by_its_package_and_a_jit_helper_of_another_module(tmp_path):
    src = tmp_path / "src" / "negpkg"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("from .kernels import _neg_kernel\n")
    (src / "kernels.py").write_text(KERNELS + '''

@triton.jit
def _helper(x_ptr):
    pass
''')
    (src / "api.py").write_text(API.replace("from .kernels import _neg_kernel as negk", "from negpkg import _neg_kernel as negk"))
    (src / "twice.py").write_text(DEVICE_USER.replace("import triton\n", "import triton\nimport triton.language as tl\n"))
    ws = tmp_path / "ws"
    res = CliRunner().invoke(main, ["harvest", "-w", str(ws), "-q", str(tmp_path / "src")])
    assert res.exit_code == 0, res.output
    store = Store(ws)
    try:
        recs = {r.name: r for r in store.records()}
    finally:
        store.close()
    assert [e["qualname"] for e in recs["_neg_kernel"].entry["entry_points"]] == ["negate"]
    assert "_helper" not in recs and "device_helper" in res.output


SQUARE_KERNELS = KERNELS.replace("-tl.load(x_ptr + offs, mask=m)", "-(tl.load(x_ptr + offs, mask=m) * tl.load(x_ptr + offs, mask=m))") \
    .replace("_neg_kernel", "_negsquare_kernel")
NAIVE = '''
import torch


def naive_negsquare(x):
    return -(x * x)


def naive_wrong(x):
    from negpkg.api import negsquare
    return negsquare(x)
'''


def test_a_packages_own_naive_reference_binds_a_kernel_the_registry_lacks(tmp_path):
    from pathlib import Path

    from sftbuild.ops.package_refs import plain_torch

    src = tmp_path / "src" / "negpkg"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "kernels.py").write_text(SQUARE_KERNELS)
    (src / "api.py").write_text(API.replace("_neg_kernel", "_negsquare_kernel").replace("def negate", "def negsquare"))
    (src / "util.py").write_text(UTIL)
    (src / "naive.py").write_text(NAIVE.replace("    from negpkg.api import negsquare\n", "") +
                                  "\n\nfrom negpkg.api import negsquare as _kernel_path\n\n\n"
                                  "def naive_negsquare_kernel(x):\n    return _kernel_path(x)\n")
    assert plain_torch(Path(src / "naive.py"), "naive_negsquare") is None
    assert "negpkg.api.negsquare" in plain_torch(Path(src / "naive.py"), "naive_negsquare_kernel")
    ws = tmp_path / "ws"
    res = CliRunner().invoke(main, ["harvest", "-w", str(ws), "-q", str(tmp_path / "src")])
    assert res.exit_code == 0, res.output
    store = Store(ws)
    try:
        rec = {r.name: r for r in store.records()}["_negsquare_kernel"]
    finally:
        store.close()

    pytest.importorskip("triton")
    from sftbuild.executor import INTERPRETER_ENV
    from sftbuild.bind.binders.probed import Probed
    from sftbuild.sandbox import run_isolated

    b = Probed()
    plan = b.plan(rec, seconds=60)
    assert [r["func"] for r in plan.package_refs] == ["naive_negsquare"]  # the one that calls the kernel is not
    out = run_isolated(b.task_fn, plan, 120, env=INTERPRETER_ENV)
    found = b.accept(rec, out)
    assert found is not None, (plan.shortlist, out.get("unbound"), out.get("evidence"))
    assert found["op"] == "pkg.negpkg.naive.naive_negsquare" and found["how"] == "package_reference"
    assert found["package_reference"]["func"] == "naive_negsquare"


LAUNCHERS = KERNELS + '''

def neg_launcher(out, x):
    n = x.numel()
    _neg_kernel[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)


def orphan_launcher(x):
    _orphan_kernel[(1,)](x, x.numel(), BLOCK=256)
'''
OPS = '''
import torch

from negpkg.kernels import neg_launcher, orphan_launcher


def negate(x):
    out = torch.empty_like(x)
    neg_launcher(out, x)
    return out


def zero(x):
    orphan_launcher(x)
    return x


def negate_checked(x):
    assert x.is_floating_point()
    return negate(x)


def grad_bias(dy, bias):  # a helper that uses the launcher, named for something else: no entry point
    out = torch.empty_like(dy)
    neg_launcher(out, dy)
    return out.sum(0).view(bias.shape)


def neg_then_zero(x):  # composes two records' launchers: an entry point of neither
    out = torch.empty_like(x)
    neg_launcher(out, x)
    orphan_launcher(out)
    return out
'''


def test_a_public_wrapper_in_another_module_that_allocates_the_output_is_an_entry_point(tmp_path):
    src = tmp_path / "src" / "negpkg"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "kernels.py").write_text(LAUNCHERS)
    (src / "ops.py").write_text(OPS)
    ws = tmp_path / "ws"
    res = CliRunner().invoke(main, ["harvest", "-w", str(ws), "-q", str(tmp_path / "src")])
    assert res.exit_code == 0, res.output
    store = Store(ws)
    try:
        rec = {r.name: r for r in store.records()}["_neg_kernel"]
    finally:
        store.close()
    assert {e["qualname"] for e in rec.entry["entry_points"]} == {"negate", "negate_checked", "neg_launcher"}
    assert "def neg_then_zero" not in rec.code and "def grad_bias" not in rec.code
    # the wrapper's import of the package's own launcher would replace the record's: it is left out
    assert "import neg_launcher" not in rec.code and "import orphan_launcher" not in rec.code

    pytest.importorskip("triton")
    from sftbuild.executor import INTERPRETER_ENV
    from sftbuild.bind.binders.probed import Probed
    from sftbuild.sandbox import run_isolated

    b = Probed()
    found = b.accept(rec, run_isolated(b.task_fn, b.plan(rec, seconds=60), 120, env=INTERPRETER_ENV))
    assert found is not None and found["op"] == "neg" and found["call"]["entry"] == "negate"


def test_a_package_reference_borrowing_an_ops_inputs_is_tried_by_name_too(tmp_path):
    from types import SimpleNamespace

    from sftbuild.bind.binders.probed import _inputs, package_references

    pkg = tmp_path / "qpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "naive.py").write_text("def naive_quant(x, scale, bits: int):\n    return (x / scale).round()\n")
    rec = SimpleNamespace(entry={"kernels": ["_quant_kernel"], "entry_points": [{"qualname": "quant"}]},
                          provenance={"tree": str(tmp_path)})
    assert _inputs("add") == 2
    borrowed, by_name = package_references(rec, ["add"])
    assert borrowed["like"] == "add" and borrowed["name"] == "pkg.qpkg.naive.naive_quant"
    assert by_name["name"] == "pkg.qpkg.naive.naive_quant.by_name"
    assert by_name["like"] == ["x: [rows, cols]", "scale: [1]"]
    assert borrowed["params"] == by_name["params"] == {"bits": 2}  # a scalar argument is a param, not a tensor
