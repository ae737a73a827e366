"""Probing Triton records through their own entry points (sftbuild.bind.probe), the probed
binder's plan -> probe -> accept, validation of a probed binding exactly as its `call` says, and
the unbound verdict with the probe's reason. CPU: the Triton interpreter in a sandboxed worker that
the probes share."""
from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

import pytest

from sftbuild.bind.tasks import TritonProbe

from sftbuild.bind.stage import run_task
from sftbuild.config import ValidateConfig
from sftbuild.executor import LocalExecutor
from sftbuild.harvest.stage import _entry
from sftbuild.harvest.triton_extract import extract_kernels
from sftbuild.bind.binders.probed import Probed, shortlist, words
from tests.redteam.cases import TRITON_RELU
from sftbuild.record import Record
from sftbuild.validate import pipeline
from sftbuild.sandbox import run_isolated

pytest.importorskip("triton")
LIGER = Path("/work/pkgs/liger_kernel-0.8.5-py3-none-any.whl")

RMS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_fwd_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * n_cols + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm_forward(X, W, eps, scale_mode):
    X = X.contiguous()
    Y = torch.empty_like(X)
    n_rows, n_cols = X.shape
    _rms_norm_fwd_kernel[(n_rows,)](X, W, Y, n_cols, eps, BLOCK=triton.next_power_of_2(n_cols))
    return Y, n_rows


def make(eps=1e-6, scale_mode="llama"):
    return eps
'''
# the same name and signature, but it forgets the normalisation: it computes x * w
DECOY = RMS.replace("(x * rstd * w)", "(x * w)")


def record(code: str, path: str = "pkg/rms.py", tree: str | None = None) -> Record:
    k = extract_kernels(code)[0][0]
    return Record(language="triton", code=k.code, source="t", entry=_entry("triton", dataclasses.asdict(k), False),
                  provenance={"path": path, "tree": tree})


_KEPT: dict = {}  # this module's executor, whose kept interpreter worker runs its probes


@pytest.fixture(scope="module", autouse=True)
def probe_worker():
    """One kept interpreter worker for this module's probes, as the bind stage's GPU workers keep theirs
    from probe to probe (a probe's guess is never a verdict): a one-shot sandbox for each of them would
    import torch, Triton and the validator again, the most of a probe's CPU time. The executor starts a
    fresh one where a probe names a folder its sandbox lacks, or its process died."""
    with LocalExecutor(cpu_workers=1, gpus="none", progress=False) as ex:
        _KEPT["executor"] = ex
        yield ex
        _KEPT.clear()


@pytest.fixture(scope="module")
def validator(tmp_path_factory):
    """(executor, compile cache) for this module's validations: one kept interpreter worker serves
    them all, as the records of one validate stage share one (the cache is content-keyed)."""
    with LocalExecutor(cpu_workers=1, gpus="none", progress=False) as ex:
        yield ex, str(tmp_path_factory.mktemp("cc"))


def probe(rec: Record, seconds: float = 60, executor=None):
    """Probe `rec` in `executor`, else this module's kept worker, else (called from another module
    that passes none) a worker of its own."""
    b = Probed()
    task = b.plan(rec, seconds=seconds)
    assert task is not None
    items = [{"task_fn": b.task_fn, "task": task}]
    if executor or "executor" in _KEPT:
        [(_, res)] = (executor or _KEPT["executor"]).map_interpreted(run_task, items, seconds + 60)
    else:
        with LocalExecutor(cpu_workers=1, gpus="none", progress=False) as ex:
            [(_, res)] = ex.map_interpreted(run_task, items, seconds + 60)
    assert isinstance(res, dict), res
    return task, res, b.accept(rec, res)


def test_shortlist_ranks_by_name_words():
    assert words("LigerRMSNormFunction.apply") == {"rms", "norm"}
    rec = record(RMS)
    assert shortlist(rec)[0] == "rms_norm"


def test_probe_binds_the_right_op_and_validation_calls_it_so(validator):
    rec = record(RMS)
    entry = rec.entry["entry_points"][0]
    assert entry["qualname"] == "rms_norm_forward"
    assert next(p for p in entry["params"] if p["name"] == "scale_mode")["hint"] == "llama"
    task, res, b = probe(rec)
    assert b is not None, res.get("unbound")
    assert b["op"] == "rms_norm" and b["how"] == "probed"
    assert b["call"] == {"entry": "rms_norm_forward", "kind": "function",
                         "args": [["input", 0], ["input", 1], ["param", "eps"], ["value", "llama"]],
                         "outputs": [{"from": "return", "index": 0}]}
    ev = b["evidence"]
    assert len(ev["shapes"]) >= 3 and {"float32", "float16"} <= set(ev["dtypes"])
    assert ev["worst_error"] is not None and ev["candidates_tried"] >= 1
    # validation calls the entry exactly as the binding says (pick_wrapper alone would pass no scale_mode)
    rec = dataclasses.replace(rec, binding=b)
    cfg = dataclasses.replace(ValidateConfig(), shapes=2, seeds=1, timing=False)
    out = list(pipeline.validate([rec], cfg, *validator))
    assert [(o[1], o[2]) for o in out] == [("ok", None)], out[0][3]


def test_decoy_stays_unbound_with_a_reason():
    rec = record(DECOY)
    _, res, b = probe(rec)
    assert b is None
    assert "rms_norm" in res["unbound"] and ("worst error" in res["unbound"] or "no output" in res["unbound"])
    tried = res["evidence"]["candidates_tried"]
    assert any(t["op"] == "rms_norm" for t in tried)


def test_unbound_triton_is_dropped_with_the_probes_reason(tmp_path):
    rec = record(DECOY)
    rec = dataclasses.replace(rec, entry={**rec.entry, "unbound": "rms_norm_forward vs rms_norm: worst error 0.9"})
    bare = Record(language="triton", code=RMS + "\n# no entry\n", source="t", entry={"kernels": ["k"]})
    cfg = ValidateConfig()
    with LocalExecutor(cpu_workers=1, gpus="none", progress=False) as ex:
        out = {r.id: (s, why, p) for r, s, why, p in pipeline.validate([rec, bare], cfg, ex, str(tmp_path))}
    assert out[rec.id][:2] == ("dropped", "unbound")
    assert "worst error 0.9" in out[rec.id][2]["detail"]
    assert out[bare.id][2]["detail"] == "no entry point launches its kernels"


@pytest.fixture(scope="module")
def liger_tree(tmp_path_factory):
    if not LIGER.is_file():
        pytest.skip("the liger-kernel wheel is not downloaded here")
    root = tmp_path_factory.mktemp("liger")
    with zipfile.ZipFile(LIGER) as z:
        z.extractall(root, [n for n in z.namelist() if n.startswith("liger_kernel/")])
    return root


def test_real_liger_softmax_binds_through_the_package_tree(liger_tree):
    rel = "liger_kernel/ops/softmax.py"
    rec = record((liger_tree / rel).read_text(), rel, str(liger_tree))
    assert "from liger_kernel.ops.utils import" in rec.code  # the package helper comes from the tree
    _, res, b = probe(rec)
    assert b is not None, res.get("unbound")
    assert b["op"] == "softmax" and b["call"]["entry"] == "_softmax_forward"
    assert b["call"]["outputs"] == [{"from": "return", "index": 0}]


def test_real_liger_rms_norm_binds_with_the_files_defaults(liger_tree):
    rel = "liger_kernel/ops/rms_norm.py"
    rec = record((liger_tree / rel).read_text(), rel, str(liger_tree))
    assert "libdevice import rsqrt" in rec.code  # a guarded import the interpreter is taught to run
    _, res, b = probe(rec)
    assert b is not None, res.get("unbound")
    assert b["op"] == "rms_norm" and b["call"]["entry"] == "rms_norm_forward"
    assert b["call"]["args"] == [["input", 0], ["input", 1], ["param", "eps"], ["value", 0.0], ["value", "llama"],
                                 ["value", None]]


def test_autotuned_kernels_run_their_first_config_in_the_interpreter():
    tuned = RMS.replace("@triton.jit\ndef _rms_norm_fwd_kernel", "@triton.autotune([triton.Config({}, num_warps=4), "
                        "triton.Config({}, num_warps=8)], key=['n_cols'])\n@triton.jit\ndef _rms_norm_fwd_kernel")
    assert "triton.autotune" in tuned
    _, res, b = probe(record(tuned))  # benchmarking the configs would need a GPU driver
    assert b is not None and b["op"] == "rms_norm", res.get("unbound")


def test_real_liger_dyt_binds_through_its_autotuner(liger_tree):
    rel = "liger_kernel/ops/dyt.py"
    code = (liger_tree / rel).read_text()
    k = next(k for k in extract_kernels(code)[0] if k.name == "_dyt_fwd_kernel")
    rec = Record(language="triton", code=k.code, source="t", entry=_entry("triton", dataclasses.asdict(k), False),
                 provenance={"path": rel, "tree": str(liger_tree)})
    _, res, b = probe(rec)
    assert b is not None, res.get("unbound")
    assert b["op"] == "dyt" and b["call"]["entry"] == "liger_dyt_fwd"


def test_probe_without_the_tree_reports_the_import():
    rec = record("from liger_kernel_missing.utils import helper\n" + RMS.replace("X.contiguous()", "helper(X)"))
    _, res, b = probe(rec)
    assert b is None and res["unbound"].startswith("import failed: ModuleNotFoundError")


def test_an_import_the_installed_triton_lacks_is_an_incompatible_toolchain(tmp_path):
    rec = record("from triton.language.math import no_such_fn_in_any_triton as helper\n"
                 + RMS.replace("X.contiguous()", "helper(X)"))
    _, res, b = probe(rec)
    assert b is None and res["unbound"].startswith(
        "incompatible_toolchain: triton.language.math.no_such_fn_in_any_triton is missing"), res
    # the package's own import failed on torch: the record's relative import says why
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from torch.distributed import NoSuchProcessGroup\n")
    (pkg / "helpers.py").write_text("def helper(x):\n    return x\n")
    rec = record("from .helpers import helper\n" + RMS.replace("X.contiguous()", "helper(X)"), "pkg/rms.py",
                 str(tmp_path))
    _, res, b = probe(rec)
    assert b is None and "incompatible_toolchain: torch.distributed.NoSuchProcessGroup" in res["unbound"], res


@pytest.mark.gpu
def test_gpu_probe_and_validate_two_liger_kernels(liger_tree, tmp_path):
    b = Probed()
    bound = []
    for rel in ("liger_kernel/ops/softmax.py", "liger_kernel/ops/rms_norm.py"):
        rec = record((liger_tree / rel).read_text(), rel, str(liger_tree))
        res = run_isolated(b.task_fn, b.plan(rec, dtypes=["float32", "float16", "bfloat16"]), 300)
        rec = dataclasses.replace(rec, binding=b.accept(rec, res))
        assert rec.binding, res.get("unbound")
        bound.append(rec)
    assert [r.binding.op for r in bound] == ["softmax", "rms_norm"]
    cfg = dataclasses.replace(ValidateConfig(), timing=False)
    with LocalExecutor(progress=False) as ex:
        out = list(pipeline.validate(bound, cfg, ex, str(tmp_path / "cc")))
    assert [o[1] for o in out] == ["ok", "ok"], [o[3] for o in out]


def test_compile_gate_skips_names_the_module_defines(tmp_path):
    from sftbuild.trial import compile as C

    scaled = TRITON_RELU.replace("import triton.language as tl\n", "import triton.language as tl\n\nSCALE = 2.0\n")
    code = scaled.replace("tl.where(x > 0, x, 0.0)", "tl.where(x > 0, x * SCALE, 0.0)")
    res = C.triton_gate({"code": code, "cache_dir": str(tmp_path), "arch": "sm_90", "nvcc": ""})
    assert res["ok"], res.get("log")
    missing = TRITON_RELU.replace("tl.where(x > 0, x, 0.0)", "tl.where(x > 0, x * UNDEFINED_SCALE, 0.0)")
    res = C.triton_gate({"code": missing, "cache_dir": str(tmp_path), "arch": "sm_90", "nvcc": ""})
    assert not res["ok"] and res["reason"] == "compile_error"


def test_argument_mappings_by_name_first_then_every_order():
    from sftbuild import ops
    from sftbuild.bind.probe import arg_mappings

    def p(name, **kw):
        return {"name": name, "has_default": False, "default": None, "annotation": None, "kind": "pos", **kw}

    op = ops.get("group_norm")  # x, w, b; params groups, eps
    entry = {"params": [p("B"), p("X"), p("W"), p("num_groups"), p("eps"), p("mode", hint="fast"),
                        p("out", has_default=True), p("flag", has_default=True, default=False)]}
    maps = list(arg_mappings(entry, op, dict(op.params)))
    assert maps[0] == [["input", 2], ["input", 0], ["input", 1], ["param", "groups"], ["param", "eps"],
                       ["value", "fast"]]
    assert len(maps) == 6  # the by-name guess, then the other orders of three tensors
    assert list(arg_mappings({"params": [p("x"), p("count", annotation="int")]}, ops.get("relu"), {})) == []


def test_reductions_that_drop_the_dim_are_tried_keeping_it():
    from sftbuild import ops
    from sftbuild.bind.probe import arg_mappings

    entry = {"params": [{"name": "inp", "has_default": False, "default": None, "annotation": None, "kind": "pos"},
                        {"name": "dim", "has_default": True, "default": None, "annotation": None, "kind": "pos"},
                        {"name": "keepdim", "has_default": True, "default": False, "annotation": None,
                         "kind": "pos"}]}
    op = ops.get("amax")
    assert list(arg_mappings(entry, op, dict(op.params))) == [
        [["input", 0], ["param", "dim"]], [["input", 0], ["param", "dim"], ["value", True]]]


def test_sizes_read_off_the_input_are_tried_per_axis():
    import torch

    from sftbuild import ops
    from sftbuild.trial import pyrun
    from sftbuild.bind.probe import arg_mappings

    def p(name):
        return {"name": name, "has_default": False, "default": None, "annotation": None, "kind": "pos"}

    op = ops.get("group_norm")
    maps = list(arg_mappings({"params": [p("X"), p("num_channels"), p("num_groups"), p("W"), p("B"), p("eps")]},
                             op, dict(op.params)))
    assert [m[1] for m in maps[:4]] == [["shape", [0, -1]], ["shape", [0, 1]], ["shape", [0, 0]], ["shape", [0, None]]]
    x = torch.zeros(2, 8, 33)
    args = pyrun.call_args({"args": maps[1]}, [x, torch.ones(8), torch.zeros(8)], dict(op.params))
    assert args[1] == 8 and args[2] == op.params["groups"] and args[5] == op.params["eps"]


OPTIONAL_BIAS = RMS.replace(
    "def _rms_norm_fwd_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):",
    "def _rms_norm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):").replace(
    "    tl.store(y_ptr + row * n_cols + offs, (x * rstd * w)",
    "    y = x * rstd * w\n"
    "    if b_ptr is not None:\n"
    "        y += tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)\n"
    "    tl.store(y_ptr + row * n_cols + offs, (y)").replace(
    "(X, W, Y, n_cols, eps,", "(X, W, None, Y, n_cols, eps,")


def test_an_absent_optional_pointer_reads_as_none_in_the_interpreter():
    """`if b_ptr is not None` with None passed: the compiler sees a constexpr None, and so does the
    interpreter's rewritten kernel (a plain `is` would take the constexpr for a pointer)."""
    assert "if b_ptr is not None" in OPTIONAL_BIAS and "(X, W, None, Y" in OPTIONAL_BIAS
    _, res, b = probe(record(OPTIONAL_BIAS))
    assert b is not None and b["op"] == "rms_norm", res.get("unbound")


def test_a_parameter_without_any_default_in_its_file_takes_the_packages(tmp_path):
    """The package's public wrapper declares `scale_mode="llama"`; the record's file does not."""
    from sftbuild.bind.binders import probed

    pkg = tmp_path / "tree" / "pkg"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ops" / "__init__.py").write_text("")
    code = RMS.replace('def make(eps=1e-6, scale_mode="llama"):\n    return eps\n', "")
    (pkg / "ops" / "rms.py").write_text(code)
    (pkg / "api.py").write_text('def rms_norm(x, w, eps=1e-6, scale_mode="llama", bias=None):\n    pass\n\n\n'
                                'def other(scale_mode="gemma"):\n    pass\n\n\ndef third(scale_mode="llama"):\n'
                                '    pass\n')
    rec = record(code, "pkg/ops/rms.py", str(tmp_path / "tree"))
    entry = rec.entry["entry_points"][0]
    assert not any("hint" in p for p in entry["params"] if p["name"] == "scale_mode")
    task = probed.Probed().plan(rec)
    assert task.hints == {"eps": 1e-6, "scale_mode": "llama"}  # the most common value, for unfilled names only
    _, res, b = probe(rec)
    assert b is not None and b["call"]["args"][-1] == ["value", "llama"], res.get("unbound")


def test_the_packages_defaults_never_displace_a_mapping_the_file_allows(tmp_path):
    """A name can mean another thing elsewhere in the package (GRPO's `beta=0.04` beside DyT's beta
    tensor): the package's defaults are tried only where the file's own leave nothing to map."""
    pkg = tmp_path / "tree" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "rms.py").write_text(RMS)
    (pkg / "loss.py").write_text("def loss(W=0.5, X=1.0):\n    pass\n")
    rec = record(RMS, "pkg/rms.py", str(tmp_path / "tree"))
    _, res, b = probe(rec)
    assert b is not None and b["call"]["args"][:2] == [["input", 0], ["input", 1]], res.get("unbound")


def test_a_width_the_entry_refuses_by_raising_becomes_the_bindings_stated_limit():
    """liger's one-block rows raise past 2^16 columns: validation's grown flat shape (2^20 + 1) is no size
    the package serves, so the probe records the widest power of two it takes; a size that comes out
    wrong instead is left for validation to judge."""
    import torch

    from sftbuild import ops
    from sftbuild.bind import probe as P

    op = ops.get("relu_squared")
    call = {"entry": "f", "kind": "function", "args": [["input", 0]], "outputs": [{"from": "return", "index": None}]}
    shapes, cpu = [(31,), (1000,), (1023,)], torch.device("cpu")

    def refuses(x):
        if x.shape[-1] > 4096:
            raise RuntimeError(f"n = {x.shape[-1]} exceeds the recommended blocksize = 4096")
        return torch.relu(x.float()).square().to(x.dtype)

    def wrong_when_wide(x):
        y = torch.relu(x.float()).square().to(x.dtype)
        return y * 0 if x.shape[-1] > 4096 else y

    assert P.refused_width(refuses, call, op, shapes, "float32", cpu, {}) == {"max_cols": 4096}
    assert P.refused_width(wrong_when_wide, call, op, shapes, "float32", cpu, {}) is None
    assert P.refused_width(lambda x: torch.relu(x.float()).square().to(x.dtype), call, op, shapes, "float32", cpu,
                           {}) is None


def test_spare_dtypes_are_tried_only_while_too_few_agree():
    """An entry whose float32 path runs in TF32 is no float32 op; its half-precision paths may still be
    right: the spare dtype (bfloat16 on a GPU) is tried then, and only then."""
    import torch

    from sftbuild import ops
    from sftbuild.bind import probe as P

    op = ops.get("relu_squared")
    call = {"entry": "f", "kind": "function", "args": [["input", 0]], "outputs": [{"from": "return", "index": None}]}
    shapes, cpu = [(31,), (1000,), (1023,)], torch.device("cpu")

    def right(x):
        return torch.relu(x.float()).square().to(x.dtype)

    def tf32_like(x):  # ~1e-3 relative error: past float32's floors, within half precision's
        y = torch.relu(x.float()).square()
        return (y * (1 + 1e-3) if x.dtype == torch.float32 else y).to(x.dtype)

    dot = "acc = tl.dot(a, b, acc)"  # a record whose float32 may run in TF32
    b = P._confirm(tf32_like, call, op, shapes, ["float32", "float16"], cpu, {}, code=dot, spare=["bfloat16"])
    assert b["binding"]["dtypes"] == ["float16", "bfloat16"] and b["evidence"]["dtypes"] == ["float16", "bfloat16"]
    b = P._confirm(right, call, op, shapes, ["float32", "float16"], cpu, {}, spare=["bfloat16"])
    assert b["evidence"]["dtypes"] == ["float32", "float16"]
    assert "unbound" not in b and P._confirm(tf32_like, call, op, shapes, ["float32", "float16"], cpu, {},
                                            code=dot)["why"]


def test_the_entrys_own_layout_is_recorded_and_held_in_validation(validator):
    """A package entry that hands back its result in another memory order (as liger's RoPE returns a
    transposed view of its own buffer): the probe records the order, validation holds the entry to it,
    and the same binding without the recorded contract rejects it."""
    code = RMS.replace("    return Y, n_rows\n", "    return Y.t().contiguous().t(), n_rows\n")
    rec = record(code)
    _, res, b = probe(rec)
    assert b is not None, res.get("unbound")
    assert b["call"]["contract"] == [{"order": [1, 0]}]
    cfg = dataclasses.replace(ValidateConfig(), shapes=2, seeds=1, timing=False)
    bare = {**b, "call": {k: v for k, v in b["call"].items() if k != "contract"}}
    verdicts = []
    # one executor and one compile cache: the second binding runs in the worker the first left clean,
    # as the records of one validation do (the module's gate is compiled once)
    for binding in (b, bare):
        rec = dataclasses.replace(rec, binding=binding)
        verdicts += [(o[1], o[2], (o[3] or {}).get("detail", "")) for o in
                     pipeline.validate([rec], cfg, *validator)]
    assert verdicts[0][:2] == ("ok", None), verdicts[0]
    assert verdicts[1][:2] == ("dropped", "incorrect") and "wrong memory format" in verdicts[1][2], verdicts[1]


HANDS_BACK = TRITON_RELU.replace("def relu(x):\n", "def relu(x):\n    if x.dim() > 0:  # every input here: torch's "
                                  "answer, the kernel never runs\n        return x.clamp_min(0)\n")


SIBLINGS = TRITON_RELU.replace("def relu(x):\n", """@triton.jit
def leaky_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.where(x > 0, x, x * 0.01), mask=mask)


def relu(x, leaky=False):
    if leaky:
        xc = x.contiguous()
        y = torch.empty_like(xc)
        leaky_kernel[(triton.cdiv(xc.numel(), 1024),)](xc, y, xc.numel(), BLOCK=1024)
        return y
""")


def test_a_sibling_kernel_of_the_same_file_does_not_count_for_a_record():
    """A file's entry that dispatches (FlagGems' `div_mode` runs its true-division kernel unless asked
    for a rounding mode) agrees with one op through a sibling's kernel: that says nothing of the record
    whose kernel it never launched, here the leaky one, which must not be bound as relu."""
    kernels = {k.name: k for k in extract_kernels(SIBLINGS)[0]}
    assert set(kernels) == {"relu_kernel", "leaky_kernel"}
    leaky = record(SIBLINGS, "pkg/relu.py")
    leaky = dataclasses.replace(leaky, id="", code=kernels["leaky_kernel"].code,
                                entry=_entry("triton", dataclasses.asdict(kernels["leaky_kernel"]), False))
    _, res, b = probe(leaky)
    assert b is None or b["op"] != "relu", b
    _, res, b = probe(record(SIBLINGS, "pkg/relu.py"))  # the relu kernel's own record binds
    assert b is not None and b["op"] == "relu", res.get("unbound")


def test_a_trial_that_launches_none_of_the_records_kernels_does_not_count():
    """Right values without the record's kernel (torch's, or an input handed back as it is) say nothing
    about the kernel: this entry gives relu's answer and never launches its kernel."""
    assert "return x.clamp_min(0)" in HANDS_BACK
    _, res, b = probe(record(HANDS_BACK, "pkg/relu.py"))
    assert b is None and "launched none of the record's kernels" in res["unbound"], res.get("unbound")
    _, res, b = probe(record(TRITON_RELU, "pkg/relu.py"))
    assert b is not None and b["op"] == "relu", res.get("unbound")

def test_a_binding_agreeing_at_some_dtypes_only_gives_way_to_one_agreeing_at_all(monkeypatch):
    from sftbuild.bind import probe as P

    agree = {"geglu": ["float16", "bfloat16"], "geglu_tanh": ["float32", "float16", "bfloat16"]}

    def fake_try(mod, entry, op, dtypes, dev, task, deadline, grad=False):
        return {"binding": {"op": op.name}, "evidence": {"dtypes": agree[op.name]}, "why": "agrees"}

    monkeypatch.setattr(P, "_try", fake_try)
    task = TritonProbe(id="r", code="", entry={"kernels": ["k"], "entry_points": [
        {"qualname": "f", "kind": "function", "launches": ["k"]}]}, dtypes=["float32", "float16", "bfloat16"],
        shortlist=["geglu", "geglu_tanh"])
    out = P._search(task, None, "cpu", float("inf"), [])
    assert out["binding"]["op"] == "geglu_tanh"
    task = dataclasses.replace(task, shortlist=["geglu"])  # nothing better: the partial agreement stands, with its dtypes
    assert P._search(task, None, "cpu", float("inf"), [])["evidence"]["dtypes"] == ["float16", "bfloat16"]


def test_float32_disagreeing_without_a_dot_rejects_the_op(monkeypatch):
    """Only tl.dot may run float32 in TF32: an elementwise kernel whose float32 values disagree computes
    another op, however well its half-precision values agree (erf GELU against a tanh-approximated one)."""
    import torch

    from sftbuild.bind import probe as P

    def trial(fn, call, op_, shape, dtype, dev, params, seed, layout="contiguous"):
        return (False, {"max_rel": 1e-3}, "worst error 0.001: 1 element") if dtype == "float32" else (True, {}, "")

    monkeypatch.setattr(P, "_trial", trial)
    op = __import__("sftbuild.ops", fromlist=["get"]).get("relu")
    out = P._confirm(None, {}, op, [(8,), (16,), (32,)], ["float32", "float16"], torch.device("cpu"), {},
                     code="y = tl.where(x > 0, x, 0)", spare=("bfloat16",))
    assert "binding" not in out and "no tl.dot" in out["why"]
