"""Correctness and timing for tensor-level candidates: Triton wrappers and KernelBench ModelNew.

Runs only inside a GPU worker, or for CPU-interpreter runs inside a one-shot
sandbox process (see sandbox.py). The candidate module is written to a file and
imported here; it never touches the main process.

Order of one record: the problem's reference side (variants, reference models) and a
book of every trial's inputs and reference results (sftbuild.trial.refbook) come
first, then a snapshot of the process (sftbuild.trial.pristine), and only then the
candidate's import: nothing the candidate rebinds can reach the reference. What its
import, its ModelNew's construction and each call change in the process (torch's and
triton's callables, flags, default dtype, RNG, stream, device) is a cheat
(checks/globals_intact); a record that leaves the process changed in any way asks for a
fresh worker (`recycle`), so no sample's verdict depends on the one before it.

The record's `Run` is its adapter of the one trial loop (sftbuild.trial.loop), which owns the
plan (variants x dtypes x layouts x seeds; one grown past the fixed-grid caps,
sftbuild.trial.sizes), the tally, the profiled trial and timing. Every trial: inputs from
the book in a layout (contiguous, transposed, sliced) inside NaN guard regions
(sftbuild.trial.fences: a changed guard or a result that depends on the guards' contents is
`out_of_bounds`), each candidate call bounded by the reference's time (sftbuild.trial.deadline),
outputs scrubbed to NaN, precision flags forced strict, Triton launches counted; after each call the
run-time checks (sftbuild.trial.checks) judge what it left (process state, flags, decoys, real
outputs, inputs unchanged, output dtype, shape, device and memory format), one trial (the largest) is
profiled for library kernels, and the outputs are compared with the float64 reference and torch's
own result at the dtype; the same buffers then get new values (both orders), and the checks judge
whether the results moved with the inputs (`loop.second_order`). Inputs are drawn in value classes
(sftbuild.ops.values, one per input set: the book's); a program runs at the dtypes its get_inputs()
makes (`program_dtypes`); a module pair whose trials passed gets new parameter values and must follow
them (`parameters_follow`); timed runs get new values before each run and the last one is checked.
"""
from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import functools
import importlib.util
import inspect
import itertools
import os
import random
import re
import sys
import tempfile
import zlib
from pathlib import Path

import torch

from sftbuild.binding import Binding
from sftbuild.trial_types import TrialTask
from sftbuild import inductor_code, ops
from sftbuild.ops import opdb, special, values
from sftbuild.ops.pools import TORCH_DTYPES
from sftbuild.trial import audit, checks, deadline, fences, guards, loop, parameters, pristine, refbook, sizes
from sftbuild.trial import harness as H
from sftbuild.trial.checks.output_type import strides_in_order
from sftbuild.trial.checks.real_outputs import view_of


class Reject(Exception):
    def __init__(self, reason: str, why: str):
        super().__init__(why)
        self.reason, self.why = reason, why


def load_module(code: str, name: str, workdir: str, package: str = ""):
    """Import candidate or reference source from a real file (Triton reads its source back).
    With `package`, the module is loaded as a submodule of it, so its relative imports resolve."""
    path = Path(workdir) / f"{name}.py"
    path.write_text(code, encoding="utf-8")
    modname = f"{package}.sftbuild_cand_{name}" if package else f"sftbuild_cand_{name}"
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod, str(path)


_KEPT: dict = {"tree": None, "paths": []}  # the package tree a probe worker keeps imported (package_tree keep=)
PACKAGE_ERRORS: dict[str, BaseException] = {}  # package -> why it did not import (package_tree), read by a probe
TOOLCHAIN = ("triton", "torch")
MISSING = [re.compile(p) for p in (r"cannot import name '(?P<name>\w+)' from '(?P<mod>[\w.]+)'",
                                   r"module '(?P<mod>[\w.]+)' has no attribute '(?P<name>\w+)'",
                                   r"No module named '(?P<mod>[\w.]+)'")]


def toolchain_gap(exc: BaseException) -> str | None:
    """The dotted name the installed Triton or torch lacks, where that is why an import failed
    (`triton.language.math.tanh`, `torch.distributed.ProcessGroup`), else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:  # the package's own error may be the cause of ours
        seen.add(id(exc))
        if isinstance(exc, (ImportError, AttributeError)):
            for pattern in MISSING:
                m = pattern.search(str(exc))
                if m and m.group("mod").split(".")[0] in TOOLCHAIN:
                    return m.group("mod") + ("." + m.group("name") if "name" in m.groupdict()
                                             and m.group("name") else "")
        exc = exc.__cause__ or exc.__context__
    return None


def toolchain_versions() -> str:
    import triton

    return f"triton {getattr(triton, '__version__', '?')}, torch {torch.__version__}"


@contextlib.contextmanager
def package_tree(tree: str | None, rel: str | None, keep: bool = False):
    """The record's package tree (a harvested copy, see sftbuild.harvest.kinds._tree) on sys.path for
    the block; yields the dotted package of the record's file ("" when it belongs to none).

    Modules imported from the tree are forgotten afterwards, so a long-lived worker starts clean.
    With `keep` (the bind stage's probes) they stay imported for the next block over the same tree
    and are forgotten when a block over another tree, or one without `keep`, begins: a package such
    as FlagGems spends about 3 s importing itself (700 Triton functions, its tuning tables, a
    vendor query), against about 0.5 s for a probe's own work. Only the record's own module is
    loaded afresh each time. A probe's guess is never a verdict (validation checks every binding
    with the package imported afresh), so what one probe leaves in the package cannot reach one."""
    if _KEPT["tree"] is not None and (not keep or _KEPT["tree"] != tree):
        _forget(_KEPT["tree"], _KEPT["paths"], set())
        _KEPT.update(tree=None, paths=[])
    if not tree or not rel or not os.path.isdir(tree):
        yield ""
        return
    folder = Path(tree, rel).parent
    parts: list[str] = []
    root = folder
    while (root / "__init__.py").is_file() and root != Path(tree).parent:
        parts.insert(0, root.name)
        root = root.parent
    # only the folder above the record's package (or, for a loose script, its own folder): a package's
    # own folder on the path would let its modules (copy.py, random.py) shadow others
    added = [] if str(root) in sys.path else [str(root)]
    before = set(sys.modules)
    sys.path[:0] = added
    if str(tree) not in sys.path:  # the tree's top packages, last: nothing installed is shadowed by them
        sys.path.append(str(tree))
        added.append(str(tree))
    package = ".".join(parts)
    try:
        if package:
            try:
                importlib.import_module(package)
                PACKAGE_ERRORS.pop(package, None)
            except Exception as e:  # the package itself does not import here: absolute imports may still work
                PACKAGE_ERRORS[package] = e
                package = ""
        yield package
    finally:
        if keep:
            for name in set(sys.modules) - before:  # the record's own module goes; its package stays
                if name.startswith("sftbuild_cand_") or ".sftbuild_cand_" in name:
                    del sys.modules[name]
            _KEPT.update(tree=tree, paths=sorted(set(_KEPT["paths"]) | set(added)))
        else:
            _forget(tree, added, before)


def _forget(tree: str, paths: list[str], before: set) -> None:
    """Take `paths` off sys.path and forget the modules imported since `before` from `tree` (or
    loaded as a record's module)."""
    for p in paths:
        while p in sys.path:
            sys.path.remove(p)
    for name in set(sys.modules) - before:
        f = getattr(sys.modules[name], "__file__", None) or ""
        if f.startswith(str(tree)) or name.startswith("sftbuild_cand_") or ".sftbuild_cand_" in name:
            del sys.modules[name]


def interpreter_scalars() -> None:
    """Under TRITON_INTERPRET, pass Python floats to kernels as fp32 scalars, as compiled Triton does
    (the interpreter hands them over raw, so `eps.to(tl.float32)` fails only on CPU), and None as a
    constexpr None, as the compiler specialises it (an absent optional pointer)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as interp

    if getattr(interp._implicit_cvt, "_sftbuild", False):
        return
    orig = interp._implicit_cvt

    def cvt(arg):
        if isinstance(arg, float):
            return tl.tensor(interp.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        if arg is None:
            return tl.constexpr(None)
        return orig(arg)

    cvt._sftbuild = True
    interp._implicit_cvt = cvt
    _interpreter_identity()
    _interpreter_index()
    _interpreter_libdevice()


def _interpreter_index() -> None:
    """A scalar used as an index (the bounds of a grid-stride `range(tl.program_id(0) * BLOCK, n, ...)`)
    is its one element, as Triton 3.9's interpreter takes it; 3.6's int() of a one-element array fails
    under numpy 2, which failed honest grid-stride kernels on CPU."""
    from triton.runtime import interpreter as interp

    patch = getattr(interp, "_patch_lang_tensor", None)
    if patch is None or getattr(patch, "_sftbuild", False):
        return

    def patched(tensor, scope, *rest):
        patch(tensor, scope, *rest)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patched._sftbuild = True
    interp._patch_lang_tensor = patched


def _interpreter_identity() -> None:
    """`X is None` / `X is not None` in a kernel compare what the constexprs hold, as the compiler does
    (an absent optional pointer arrives as a constexpr None, which plain `is` would take for present)."""
    import ast as pyast

    import triton.language as tl
    from triton.runtime import interpreter as interp

    rewriter = getattr(interp, "ASTTransformer", None)
    if rewriter is None or getattr(getattr(rewriter, "visit_Compare", None), "_sftbuild", False):
        return
    # Triton 3.6's rewriter has no visit_Compare of its own (a plain NodeTransformer visit then)
    orig = getattr(rewriter, "visit_Compare", None) or rewriter.generic_visit

    def unwrapped_is(a, b):
        unwrap = (lambda v: v.value if isinstance(v, tl.constexpr) else v)
        return unwrap(a) is unwrap(b)

    def visit_compare(self, node):
        if len(node.ops) == 1 and isinstance(node.ops[0], (pyast.Is, pyast.IsNot)):
            node = self.generic_visit(node)
            same = pyast.Call(func=pyast.Name(id="_sftbuild_unwrapped_is", ctx=pyast.Load()),
                              args=[node.left, node.comparators[0]], keywords=[])
            out = same if isinstance(node.ops[0], pyast.Is) else pyast.UnaryOp(op=pyast.Not(), operand=same)
            return pyast.copy_location(out, node)
        return orig(self, node)

    visit_compare._sftbuild = True
    interp._sftbuild_unwrapped_is = unwrapped_is  # the rewriter lends the interpreter's globals to kernels
    rewriter.visit_Compare = visit_compare


AUTOTUNE_KEEP = 2  # configs a GPU run benchmarks per autotune key: the first and the last


def bounded_autotune() -> None:
    """@triton.autotune tries at most AUTOTUNE_KEEP of a kernel's configs per key (those surviving its
    own pruning: the first and the last, the extremes of its sweep), and in the interpreter only the
    first: the interpreter has no driver to benchmark with ("0 active drivers"), and on a GPU a sweep
    of 18 configs, recompiled for every new size of a constexpr key, took a record a minute of its
    validation while deciding nothing about its values (every config computes the same ones; the
    trials judge the config the sweep picks)."""
    from triton.runtime.autotuner import Autotuner

    if getattr(Autotuner.prune_configs, "_sftbuild", False):
        return
    orig = Autotuner.prune_configs
    keep = 1 if os.environ.get("TRITON_INTERPRET") == "1" else AUTOTUNE_KEEP

    def bounded(self, kwargs):
        configs = orig(self, kwargs)
        return configs if len(configs) <= keep else [configs[0], configs[-1]][:keep]

    bounded._sftbuild, bounded.__wrapped__ = True, orig
    Autotuner.prune_configs = bounded
    if keep == 1:  # Triton 3.6 benchmarks even the one config left, which needs a driver: it is chosen unmeasured
        Autotuner._bench = lambda self, *args, config=None, **kwargs: [0.0]


def _interpreter_libdevice() -> None:
    """libdevice functions have no interpreter implementation (they return None on CPU); the ones
    triton.language.math also offers, and tanh, are pointed at it before a record imports them."""
    import triton.language as tl

    mods = []
    for name in ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice"):
        try:
            mods.append(importlib.import_module(name))
        except Exception:
            continue

    def tanh(x):
        return 2 * tl.sigmoid(2 * x) - 1

    def late(name):  # looked up at call time: the interpreter patches tl.math only while a kernel runs
        return lambda *args, **kw: getattr(tl.math, name)(*args, **kw)

    for mod in mods:
        for name in ("rsqrt", "sqrt", "exp", "erf", "log", "exp2", "log2", "floor", "ceil", "div_rn"):
            if hasattr(tl.math, name):
                setattr(mod, name, late(name))
        mod.tanh = tanh


# ---- entry-point calls: how a probed binding launches a record ------------------------

def resolve_entry(mod, qualname: str):
    """`fn`, `Cls.apply` or `Cls` (a module class) from the record's module."""
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise Reject("unbound", f"the record defines no {qualname}")
    return obj


def call_args(call: dict, inputs: list, params: dict) -> list:
    """Positional arguments from a call's mapping: ["input", i], ["param", name], ["value", literal],
    ["shape", [i, axis]] (a size of input i read at call time; axis None: its numel) or
    ["sample", None] (an op_db op's sample call: its positional arguments with the inputs in their
    tensor slots; its keywords come from `call_kwargs`)."""
    out = []
    for src, key in call["args"]:
        if src == "sample":
            out += opdb.rebuild(inputs, params["call"])[0]
        elif src == "shape":
            t = inputs[key[0]]
            out.append(t.numel() if key[1] is None else t.shape[key[1]])
        else:
            out.append(inputs[key] if src == "input" else params[key] if src == "param" else copy.deepcopy(key))
    return out


def call_kwargs(call: dict, inputs: list, params: dict) -> dict:
    """Keyword arguments from a call's mapping: an op_db sample's keywords, else none."""
    if any(src == "sample" for src, _ in call["args"]):
        return opdb.rebuild(inputs, params["call"])[1]
    return {}


def call_entry(mod, call: dict, inputs: list, params: dict, handed: list | None = None) -> list:
    """Call the entry as the binding's `call` says and return the outputs it names, in the op's order.
    `handed` receives every tensor the entry returned, compared or not (see `updated_in_place`)."""
    fn = resolve_entry(mod, call["entry"])
    if call.get("kind") == "module":
        fn = fn(*call_args({"args": call.get("init") or []}, inputs, params))
    out = fn(*call_args(call, inputs, params), **call_kwargs(call, inputs, params))
    if handed is not None:
        handed += [t for _, t in returned(out)]
    return [pick_output(spec, out, inputs) for spec in call["outputs"]]


COTANGENT_SEED = 7919
KINK_STEP = 1e-7  # relative move of the inputs that finds a kink (OpProblem.sides): far below any dtype's rounding


def cotangent(t: torch.Tensor) -> torch.Tensor:
    """The output gradient a backward check feeds: fixed values for a shape, at the output's dtype."""
    g = torch.Generator().manual_seed(COTANGENT_SEED)
    return torch.randn(tuple(t.shape), generator=g, dtype=torch.float64).to(device=t.device, dtype=t.dtype)


def with_grads(run, inputs: list, constants=()) -> list:
    """`run(inputs)`'s outputs, then the gradient of sum(output * cotangent) with respect to each
    floating input (zeros where nothing depends on it): a forward and its backward, as autograd runs
    them. The inputs are not changed (the gradients are taken on detached leaves sharing them).
    Inputs numbered in `constants` (the op's `grad_constants`: a loss's target or teacher) take no
    gradient and have none in the result."""
    xs = [t.detach().requires_grad_() if isinstance(t, torch.Tensor) and t.is_floating_point()
          and i not in constants else t for i, t in enumerate(inputs)]
    with torch.enable_grad():
        outs = run(xs)
        wrt = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
        diff = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
        if not diff or not wrt:
            raise ValueError("no output carries a gradient back to the inputs")
        grads = torch.autograd.grad(diff, wrt, [cotangent(o) for o in diff], allow_unused=True)
    return [o.detach() if isinstance(o, torch.Tensor) else o for o in outs] + \
        [torch.zeros_like(x) if g is None else g.detach() for x, g in zip(wrt, grads)]


def returned(out) -> list:
    """The tensors a call returned, as (index, tensor): index None for a bare tensor."""
    if isinstance(out, torch.Tensor):
        return [(None, out)]
    if isinstance(out, (list, tuple)):
        return [(i, t) for i, t in enumerate(out) if isinstance(t, torch.Tensor)]
    return []


def pick_output(spec: dict, out, inputs: list):
    """One output: {"from": "return", "index": i | None} (None: the bare returned tensor) or
    {"from": "input", "index": i} (an input the entry updates in place)."""
    if spec["from"] == "input":
        return inputs[spec["index"]]
    if spec["index"] is None:
        return out
    return out[spec["index"]] if isinstance(out, (list, tuple)) and len(out) > spec["index"] else None


def to_list(out) -> list:
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]


def layout_of(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values in another memory layout."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() == 0:
        return t
    if layout == "transposed" and t.dim() >= 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "sliced":
        wide = torch.empty(*t.shape[:-1], t.shape[-1] * 2 + 1, dtype=t.dtype, device=t.device)
        view = wide[..., 1::2]
        view.copy_(t)
        return view
    return t


# ---- problems: what gets called and what it is compared with --------------------

class Problem:
    """A source of trials: variants (shape sets), inputs, the candidate and the reference."""

    name = "the reference program"  # what the record is checked against, in messages
    dtypes: list[str]
    layouts: list[str]

    def variants(self) -> list:
        raise NotImplementedError

    def inputs(self, variant, dtype, seed, dev, value_class: str = "normal") -> list:
        """The trial's inputs, redrawn in `value_class` (sftbuild.ops.values)."""
        raise NotImplementedError

    def value_classes(self):
        """The value classes its domain allows (sftbuild.ops.values); None: the generic ones."""
        return None

    def candidate(self, variant, dtype, inputs) -> list:
        raise NotImplementedError

    def reference(self, variant, dtype, inputs, double=False) -> list:
        raise NotImplementedError

    def tolerance(self):
        return ops.Tolerance()

    def describe(self, variant) -> object:
        return variant

    def grown(self, variant) -> bool:
        """The variant past the fixed-grid caps: one seed in the first layout is enough there."""
        return False

    def bind(self, mod) -> None:
        """Attach the imported candidate module; everything before this runs no candidate code."""
        raise NotImplementedError

    def prepare(self, variant, dtype) -> bool:
        """Set up what a call needs outside the call; True when that ran candidate code."""
        return False

    def layouts_for(self, dtype) -> list[str]:
        """Every layout for the first dtype, contiguous inputs for the others."""
        return self.layouts if dtype == self.dtypes[0] else ["contiguous"]


def _variant_key(shape, dtype) -> tuple:
    """One variant's key: its shape as a tuple (variants arrive as lists or tuples) and dtype."""
    return (tuple(shape) if isinstance(shape, (list, tuple)) else shape, dtype)


class OpProblem(Problem):
    """A Triton wrapper bound to a registered op: wrapper(*inputs, **params) -> output(s).

    A probed binding carries `call` (sftbuild.bind.probe): the entry point (`fn`, `Cls.apply`),
    the argument mapping and which outputs to compare; it is called exactly so. With `call.grad`
    (a backward kernel, launched by its autograd Function's backward) the outputs are followed by
    the input gradients, against the gradients of the op's reference (`with_grads`). Without `call` the
    wrapper is picked by `pick_wrapper`."""

    def __init__(self, task: TrialTask, dev):
        b = task.binding
        ref = b.package_reference
        if ref:  # the package's own reference, registered in this worker as the probe registered it
            ops.package_op(ref["module"], ref["func"], ref["like"], root=task.tree, name=b.op,
                           params=ref.get("params"))
        self.op = ops.get(b.op)
        self.params = {**self.op.params, **b.params}
        self._made: dict = {}  # (shape, dtype) -> the params its input generator left (`params_for`)
        self.mod, self.call, self.entry = None, b.call, task.entry
        allowed = b.dtypes or self.op.dtypes
        self.dtypes = [d for d in self.op.dtypes if d in allowed and (task.dtypes is None or d in task.dtypes)]
        self.layouts = [lay for lay in self.op.layouts if lay in (b.layouts or self.op.layouts)]
        self.values = self.op.values if b.values is None else b.values  # a declared binding's own, else the op's
        cons = self.op.constraints_with(b.constraints)
        pool = [s for s in self.op.shape_pool if H.fits(s, cons, task.max_numel)]
        rng = random.Random(task.id)
        self.shapes = rng.sample(pool, min(task.shapes, len(pool)))
        if task.shapes > 1:
            self.shapes = self._with_grown(task, cons, dev)

    def _with_grown(self, task, cons, dev) -> list:
        """The drawn shapes plus one past the fixed-grid caps (sftbuild.trial.sizes), when the op
        makes inputs of it and its reference runs on them."""
        def works(shape):
            dtype = self.dtypes[0] if self.dtypes else "float32"
            self.op.run_reference(self.inputs(shape, dtype, 0, dev), self.params_for(shape, dtype))
            return True

        limit = sizes.limit_for(task.max_numel, dev.type == "cpu")
        shapes = sizes.add_grown(self.shapes, cons, limit, sizes.block_sizes(task.code), works)
        self._grown = shapes[len(self.shapes):]
        return shapes

    def grown(self, variant) -> bool:
        return tuple(variant) in getattr(self, "_grown", [])

    def bind(self, mod):
        self.mod = mod
        if self.call:
            resolve_entry(mod, self.call["entry"])
        else:
            self.fn = pick_wrapper(mod, self.entry)
            sig = inspect.signature(self.fn)
            takes_kw = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
            self.takes = lambda k: takes_kw or k in sig.parameters

    def variants(self):
        return self.shapes

    def value_classes(self):
        return self.values

    def inputs(self, shape, dtype, seed, dev, value_class="normal"):
        """The op's trial inputs (special values mixed in for a boolean result: sftbuild.ops.special).
        What the op's input generator sets in its params at a variant's first draw (an op_db sample's
        non-tensor arguments, say) is that variant's for every seed: later draws start from it and draw
        only tensors. The reference and the candidate of any seed, the fresh inputs' too, thus get the
        params their inputs were drawn with."""
        key = _variant_key(shape, dtype)
        params = dict(self._made.get(key, self.params))
        xs = special.trial_inputs(self.op, shape, dtype, seed, params, value_class=value_class)
        self._made.setdefault(key, params)
        return [t.to(dev) for t in xs]

    def params_for(self, shape, dtype) -> dict:
        """The params of one variant: the binding's and op's, with what the input generator set at the
        variant's first draw (a head size's sections, an op_db sample's call, an image's height). The
        book makes every variant's inputs before any trial runs, so params shared by all variants would
        hold the last variant's values at every trial."""
        return self._made.get(_variant_key(shape, dtype), self.params)

    def candidate(self, shape, dtype, inputs):
        self.handed = []
        params = self.params_for(shape, dtype)
        if self.call and self.call.get("grad"):  # a backward kernel: its Function's forward and backward
            return with_grads(lambda xs: call_entry(self.mod, self.call, xs, params, self.handed), inputs,
                              self.op.grad_constants)
        if self.call:
            return call_entry(self.mod, self.call, inputs, params, self.handed)
        return to_list(self.fn(*inputs, **{k: v for k, v in params.items() if self.takes(k)}))

    def reference(self, shape, dtype, inputs, double=False):
        params = self.params_for(shape, dtype)
        if double:
            inputs = [t.double() if t.is_floating_point() else t for t in inputs]
        if self.call and self.call.get("grad"):
            return with_grads(lambda xs: to_list(self.op.run_reference(xs, params)), inputs,
                              self.op.grad_constants)
        return to_list(self.op.run_reference(inputs, params))

    def tolerance(self):
        return self.op.tolerance

    def sides(self, shape, dtype, inputs) -> list:
        """For a backward check: the float64 results (outputs, then input gradients) on either side of
        `inputs`, each floating input moved by KINK_STEP of itself in one fixed random direction and in
        its opposite. Autograd picks one subgradient where the inputs sit on a kink of the function (an
        element exactly on sparsemax's support edge, a tie in a max); a kernel may pick the other side's,
        and where the sides part, either is right (`compare_outputs`). Elsewhere they agree to ~KINK_STEP."""
        if not (self.call and self.call.get("grad")):
            return []
        gen = torch.Generator().manual_seed(COTANGENT_SEED)
        signs = [torch.randint(0, 2, tuple(t.shape), generator=gen).double() * 2 - 1
                 if isinstance(t, torch.Tensor) and t.is_floating_point() else None for t in inputs]
        out = []
        for way in (1.0, -1.0):
            moved = [t.double() * (1 + way * KINK_STEP * s.to(t.device)) if s is not None else t
                     for t, s in zip(inputs, signs)]
            out.append(self.reference(shape, dtype, moved, double=True))
        return out

    def gradients(self) -> bool:
        """Whether the outputs checked are gradients: a backward op, or a backward kernel checked
        through its entry's autograd (the reference book measures their spread under rounding)."""
        return bool(self.call and self.call.get("grad")) or self.op.name.endswith("_backward")

    def free_outputs(self) -> tuple[int, ...]:
        """Outputs whose strides are no part of the contract: the input gradients of a backward check,
        laid out as autograd's reference happened to make them (a contiguous result is right too)."""
        if not (self.call and self.call.get("grad")):
            return ()
        n = len(self.call["outputs"])
        return tuple(range(n, n + len(self.op.io.get("inputs") or [])))

    def expected(self, specs: list, dtype: str) -> list:
        """The reference's output specs (checks.specs), with a probed entry's own contract in place of
        the reference's dtype and layout where its binding recorded one (probe.output_contract): the
        package's entry, and a candidate standing in for it, return what the package's callers get.
        A candidate for the op itself (no `call`) keeps the reference's contract exactly."""
        rules = (self.call or {}).get("contract") or []
        out = list(specs)
        for j, rule in enumerate(rules):
            if not rule or j >= len(out) or out[j] is None:
                continue
            s = out[j]
            if rule.get("dtype"):
                s = s._replace(dtype=TORCH_DTYPES[dtype if rule["dtype"] == "input" else rule["dtype"]])
            if rule.get("order") and len(rule["order"]) == len(s.shape):
                s = s._replace(stride=strides_in_order(s.shape, rule["order"]))
            out[j] = s
        return out

    @property
    def name(self):
        return f"op {self.op.name}"


def pick_wrapper(mod, entry: dict):
    """The Python function that launches the kernel: named in entry, else the public function
    that launches a @triton.jit kernel."""
    for key in ("wrapper", "function", "callable", "python_entry"):
        name = entry.get(key)
        if name and callable(getattr(mod, name, None)):
            return getattr(mod, name)
    src = inspect.getsource(mod)
    tree = ast.parse(src)
    jits = {f.name for f in tree.body if isinstance(f, ast.FunctionDef) and any(
        "jit" in ast.unparse(d) or "autotune" in ast.unparse(d) for d in f.decorator_list)}
    best = None
    for f in tree.body:
        if isinstance(f, ast.FunctionDef) and f.name not in jits:
            launches = any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in jits
                           for n in ast.walk(f))
            if launches and not f.name.startswith("_"):
                return getattr(mod, f.name)
            if launches or (best is None and not f.name.startswith("_")):
                best = best or f.name
    if best is None:
        raise Reject("unbound", "no Python wrapper function found in the Triton module")
    return getattr(mod, best)


class ModuleProblem(Problem):
    """KernelBench (and inductor) pairs: reference `Model` + get_inputs/get_init_inputs vs `ModelNew`.

    Variants perturb the reference's module-level integer size constants (odd sizes, non-multiples
    of block sizes); a variant is kept only when the reference runs on it."""

    def __init__(self, task: TrialTask, workdir, dev):
        b = task.binding
        self.workdir, self.dev = workdir, dev
        self.reference_src = b.reference
        self.cand_cls = None
        self.dtypes, self.extra_dtypes = program_dtypes(b, task)
        self.layouts = b.layouts or ["contiguous", "transposed", "sliced"]
        self.max_variants = task.shapes
        self.sizes = b.sizes  # None: every size constant varies
        self.declared_values = b.values  # the value classes a binding declares; None: the generic ones
        self.blocks = sizes.block_sizes(task.code)
        self.limit = sizes.limit_for(task.max_numel, dev.type == "cpu")
        self._variants = None
        self._refs, self._cands = {}, {}
        self.seed = 1234

    def bind(self, mod):
        self.cand_cls = getattr(mod, "ModelNew", None) or getattr(mod, "Model", None)
        if self.cand_cls is None:
            raise Reject("unbound", "the candidate defines no ModelNew")

    def variants(self):
        if self._variants is None:
            self._variants = []
            for i, src in enumerate(size_variants(self.reference_src, self.max_variants, self.blocks, self.sizes)):
                try:
                    mod, _ = load_module(src, f"ref{i}", self.workdir)
                    init = list(mod.get_init_inputs()) if hasattr(mod, "get_init_inputs") else []
                    model, ins = self._as_trials_run(mod, init)
                    with torch.no_grad():
                        model(*ins)
                except Exception as e:  # the reference cannot run this size: not a variant
                    if i == 0:
                        raise Reject("reference_error", f"the reference does not run: {e!r}"[:400])
                    continue
                self._variants.append((i, mod, init))
            if self.extra_dtypes:
                self.dtypes += [d for d in self.extra_dtypes if self._runs_at(self._variants[0], d)]
            grown = self._grown_variant() if self.max_variants > 1 else None
            if grown:
                self._variants.append(grown)
        return self._variants

    def _as_trials_run(self, mod, init):
        """(the reference Model, its get_inputs()) on this device at the program's first dtype, cast as
        the trials cast both models and their inputs (`reference_models`, `prepare`, `inputs`): floating
        parameters and inputs follow the program's dtype, as KernelBench's harness casts each model to
        its inputs' precision (a bf16 program's nn.LayerNorm is built in float32)."""
        torch.manual_seed(0)
        dt = TORCH_DTYPES[self.dtypes[0]] if self.dtypes else None
        ins = []
        for t in mod.get_inputs():
            if isinstance(t, torch.Tensor):
                t = t.to(self.dev)
                t = t.to(dt) if dt is not None and t.is_floating_point() else t
            ins.append(t)
        model = mod.Model(*init).to(self.dev).eval()
        return (model.to(dt) if dt is not None else model), ins

    def _runs_at(self, variant, dtype) -> bool:
        """The reference runs at `dtype` (`validate.dtypes: all`) and gives finite results there."""
        try:
            ins = self.inputs(variant, dtype, 0, self.dev)
            _, mod, init = variant
            with torch.no_grad():
                out = to_list(mod.Model(*init).to(self.dev).eval().to(TORCH_DTYPES[dtype])(*ins))
            return values.finite(out)
        except Exception:  # the reference does not support the dtype: not tried
            return False

    def _grown_variant(self):
        """One variant past the fixed-grid caps (sftbuild.trial.sizes): a size constant of the
        reference grown; kept when the reference runs on it and no tensor exceeds sizes.MAX_ELEMENTS."""
        def numels(ts):
            return [t.numel() for t in ts if isinstance(t, torch.Tensor)]

        def numel_at(src):  # inputs built on the meta device: a size past memory allocates nothing
            try:
                mod, _ = load_module(src, f"ref_sizes{zlib.crc32(src.encode())}", self.workdir)  # one file per source
                with torch.device("meta"):
                    return max(numels(mod.get_inputs()), default=0)
            except Exception:  # its inputs cannot be built there (a copy to a device, a .item()): no growth
                return None

        _, base, _ = self._variants[0]
        torch.manual_seed(0)
        src = sizes.grow_constant(self.reference_src, max(numels(base.get_inputs()), default=0), self.blocks,
                                  self.limit, self.sizes, numel_at)
        if src is None:
            return None
        try:
            mod, _ = load_module(src, "ref_grown", self.workdir)
            init = list(mod.get_init_inputs()) if hasattr(mod, "get_init_inputs") else []
            model, ins = self._as_trials_run(mod, init)
            with torch.no_grad():
                outs = to_list(model(*ins))
        except Exception:  # the reference cannot run this size: no grown variant
            return None
        if max(numels(ins) + numels(outs), default=0) > sizes.MAX_ELEMENTS:
            return None
        return ("grown", mod, init)

    def grown(self, variant) -> bool:
        return variant[0] == "grown"

    def describe(self, variant):
        i, mod, init = variant
        consts = {k: v for k, v in vars(mod).items() if isinstance(v, int) and not k.startswith("_")
                  and not isinstance(v, bool)}
        return {"variant": i, "sizes": consts}

    def reference_models(self, variant, dtype):
        """(the reference at the dtype, in float64), built before any candidate code runs."""
        key = (variant[0], dtype)
        if key not in self._refs:
            i, mod, init = variant
            torch.manual_seed(self.seed)
            ref = mod.Model(*init).to(self.dev).eval()
            self._refs[key] = (ref.to(TORCH_DTYPES[dtype]), copy.deepcopy(ref).double())
        return self._refs[key]

    def prepare(self, variant, dtype):
        """ModelNew with the reference's initial weights (the same seed), at the dtype, built once."""
        key = (variant[0], dtype)
        if key in self._cands:
            return False
        i, mod, init = variant
        torch.manual_seed(self.seed)
        self._cands[key] = self.cand_cls(*init).to(self.dev).eval().to(TORCH_DTYPES[dtype])
        return True

    def parameter_changes(self, variant, dtype, inputs) -> list:
        """[(what, values, reference at the dtype, in float64)] for each change of parameters
        (sftbuild.trial.parameters), applied in turn to copies of the reference models, on
        `inputs`; [] where the model has no floating state or the float64 reference is not finite."""
        ref, ref64 = self.reference_models(variant, dtype)
        state, deltas = parameters.draw(ref)
        if not state:
            return []
        ref, ref64 = copy.deepcopy(ref), copy.deepcopy(ref64)
        out = []
        for what, vals in (("load", state), ("step", deltas)):
            parameters.change(ref, what, vals)
            parameters.change(ref64, what, vals)
            with torch.no_grad():
                native, double = to_list(ref(*inputs)), to_list(ref64(*ops.upcast(inputs)))
            if not values.finite(double):
                return []
            out.append((what, vals, native, double))
        return out

    def candidate_model(self, variant, dtype):
        self.prepare(variant, dtype)
        return self._cands[(variant[0], dtype)]

    def value_classes(self):
        return self.declared_values

    def inputs(self, variant, dtype, seed, dev, value_class="normal"):
        torch.manual_seed(seed)
        dt = TORCH_DTYPES[dtype]
        out = []
        for t in variant[1].get_inputs():
            if isinstance(t, torch.Tensor):
                t = t.to(dev)
                t = t.to(dt) if t.is_floating_point() else t
            out.append(t)
        return values.apply(value_class, out, dtype, seed)

    def candidate(self, variant, dtype, inputs):
        with torch.no_grad():
            return to_list(self.candidate_model(variant, dtype)(*inputs))

    def reference(self, variant, dtype, inputs, double=False):
        ref, ref64 = self.reference_models(variant, dtype)
        with torch.no_grad():
            if double:
                return to_list(ref64(*[t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                                       for t in inputs]))
            return to_list(ref(*inputs))

    def tolerance(self):
        return ops.Tolerance(scale=4.0)  # whole models accumulate more rounding than one op


PROGRAM_DTYPES = ("float32", "float16", "bfloat16")


def program_dtypes(binding: Binding, task: TrialTask) -> tuple[list[str], list[str]]:
    """(dtypes a program runs at, dtypes to add where its reference supports them): those its binding
    names, else those its get_inputs() makes (sftbuild.ops.programs.declared_dtypes), within
    the task's; with `validate.dtypes: all` (task `program_dtypes`), a KernelBench pair adds the other
    float dtypes (an Inductor kernel is compiled for its program's dtype alone)."""
    from sftbuild.ops.programs import declared_dtypes

    declared = list(binding.dtypes or declared_dtypes(binding.reference or ""))
    allowed = task.dtypes or PROGRAM_DTYPES
    extra = [d for d in PROGRAM_DTYPES if d not in declared and d in allowed] \
        if task.program_dtypes == "all" and binding.kind == "kernelbench" else []
    return [d for d in declared if d in allowed], extra


def size_variants(src: str, n: int, blocks=(), only=None) -> list[str]:
    """The reference source, then up to n-1 copies with its module-level size constants changed:
    primes a little below, then a quarter of the size (batch-like constants 1), odd and no multiple
    of common block sizes or of `blocks` (those found in the candidate's code). With `only`, just the
    constants it names (a binding's `sizes`: those its candidate takes as arguments, not baked in).
    A variant past the fixed-grid caps is ModuleProblem's own (it needs the example's input sizes)."""
    consts = sizes.size_constants(src, only)
    out = [src]
    if not consts:
        return out
    lines = src.splitlines(keepends=True)
    for k, fn in enumerate((_odd_below, _odd_small)[: max(0, n - 1)]):
        new = list(lines)
        for node in consts:
            v = node.value.value
            line = new[node.lineno - 1]
            new[node.lineno - 1] = re.sub(rf"=\s*{v}\b", f"= {fn(v, node.targets[0].id, blocks)}", line, count=1)
        variant = "".join(new)
        if variant not in out:
            out.append(variant)
    return out


def _odd_below(v: int, name: str, blocks=()) -> int:
    # a prime a bit smaller: 1024 -> 1021, catches missing bound checks at the tail
    return sizes.prime_below(v - 3) if v > 8 else v


def _odd_small(v: int, name: str, blocks=()) -> int:
    # a quarter of the size, odd, so large problems stay quick and tails are ragged; a batch of one
    if v <= 4 or "kernel" in name.lower() or "stride" in name.lower() or "pad" in name.lower():
        return v
    if "batch" in name.lower():
        return 1
    return sizes.awkward(max(3, v // 4), blocks)


# ---- the record: references, snapshot, candidate, then the trial loop ---------------

def run_python(task: TrialTask | dict) -> dict:
    """A Python record's trials (sftbuild.trial_types.TrialTask). Returns a verdict dict. `tree` (the
    harvested package copy) and `path` (the record's file in it) let the record import its package.
    A verdict carries `recycle` when the worker must not run another sample (see `_left_behind`)."""
    task = TrialTask.of(task)
    dev = torch.device(task.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    guards.set_strict()
    interpreter_scalars()
    bounded_autotune()
    deadline.lift_while_compiling(cuda=dev.type == "cuda")
    pristine.warm(compiler=task.compile_baseline or _uses_compiler(task.code))
    workdir = tempfile.mkdtemp(prefix="sftbuild_cand_")
    audit.watch([workdir, task.tree])  # before any of the record's code is imported
    left: dict = {}
    try:
        with package_tree(task.tree, task.path) as package:
            verdict = _run_python(task, dev, workdir, package, left)
    except Reject as r:
        verdict = {"status": "dropped", "reason": r.reason, "detail": r.why}
    except torch.cuda.OutOfMemoryError as e:
        verdict = {"status": "dropped", "reason": "oom", **loop.fault_detail(e), "recycle": True}
    except Exception as e:
        msg, refused = f"{type(e).__name__}: {e}", audit.os_refusal(e)
        if refused:
            verdict = audit.verdict([refused])
        elif type(e).__name__ in ("CompilationError", "ExtensionBuildError") or "triton.compiler" in type(e).__module__:
            verdict = {"status": "dropped", "reason": "compile_error", "detail": msg[:2000]}
        elif dev.type == "cuda" and ("CUDA" in msg or "cuda" in msg or "illegal" in msg):
            reason = "illegal_address" if "illegal" in msg else "cuda_error"
            # the detail starts with the shape, dtype and seed of the trial that raised it
            verdict = {"status": "dropped", "reason": reason, **loop.fault_detail(e, 800, msg), "recycle": True}
        else:
            verdict = {"status": "dropped", "reason": "incorrect", "detail": ("candidate raised " + msg)[:800],
                       "recycle": True}
    if audit.refused():  # whatever the candidate made of the refusal (caught it, passed anyway)
        verdict = audit.verdict(audit.refused())
    return _left_behind(verdict, left)


def _uses_compiler(code: str) -> bool:
    return any(k in code for k in ("torch._inductor", "torch._dynamo", "torch.compile"))


def _left_behind(verdict: dict, left: dict) -> dict:
    """A candidate that left its process changed (`left["dirty"]`, sftbuild.trial.pristine.dirty)
    leaves it to no other sample: the verdict asks for a fresh worker and says what was changed. A
    change the per-call checks did not see (made while it was timed) still makes a passed record a cheat."""
    if not left.get("dirty"):
        return verdict
    out = {**verdict, "recycle": True, "left_behind": left["dirty"][:8]}
    if out.get("status") == "ok" and left.get("changed"):
        out.update(status="dropped", reason="cheat",
                   detail="the candidate changed its process: " + "; ".join(left["changed"][:6]))
    return out


@dataclasses.dataclass
class Run(loop.Adapter):
    """What stays fixed across one record's trials; the record's adapter of the trial loop
    (sftbuild.trial.loop), which takes its plan from the problem."""

    prob: Problem
    dev: torch.device
    counter: guards.LaunchCounter  # Triton launches of the candidate's own kernels
    own: set  # CUDA kernel names defined in the candidate's source
    checks: list  # the selected run-time checks (sftbuild.trial.checks)
    book: refbook.Book  # every trial's inputs and reference results, computed before the candidate ran
    world: pristine.Pristine  # the process as it was before the candidate ran
    notes: dict = dataclasses.field(default_factory=dict)  # check notes: reason -> [why]
    task: TrialTask | None = None  # the record's task: timing's warm-ups, runs, baselines
    in_place: tuple = ()  # inputs the candidate updates and returns (pyrun.updated_in_place), from its last checked call
    values: set = dataclasses.field(default_factory=set)  # the value classes its trials ran (sftbuild.ops.values)

    @functools.cached_property
    def expects_triton(self) -> bool:
        """Every call must launch one of the candidate's Triton kernels."""
        return _expects_triton(self.prob)

    @property
    def name(self) -> str:
        return self.prob.name

    @property
    def dtypes(self) -> list[str]:
        return self.prob.dtypes

    def variants(self) -> list:
        return self.prob.variants()

    def layouts_for(self, dtype) -> list[str]:
        return self.prob.layouts_for(dtype)

    def grown(self, variant) -> bool:
        return self.prob.grown(variant)

    def describe(self, variant) -> dict:
        return {"shape": self.prob.describe(variant)}

    def trial(self, t: loop.Trial):
        return trial(self, t.variant, t.dtype, t.layout, t.seed, profile=t.profile, vi=t.vi)

    def summary(self) -> dict:
        return {"launches": self.counter.count, "triton_kernels": sorted(self.counter.names),
                "value_classes": sorted(self.values),
                **({"value_classes_ill_posed": sorted(self.book.skipped - self.values)}
                   if self.book.skipped - self.values else {})}

    def verdict(self) -> dict | None:
        return parameters_follow(self)

    def timed(self) -> tuple[str, dict] | None:
        """The first variant at the first dtype, on the GPU only."""
        if self.dev.type != "cuda":
            return None
        from sftbuild.trial import timing

        prob, variant, dtype = self.prob, self.prob.variants()[0], self.prob.dtypes[0]
        ins = prob.inputs(variant, dtype, 0, self.dev)
        ref = self.book.get(0, dtype, 0)  # both orders' values of the first trial, with their references
        given = [_copy(t) for t in ins]  # the candidate's inputs: each timed run gets one order's values in turn
        orders = [(ref.inputs, ref.double, ref.native), (ref.fresh, ref.double2, ref.native2)]
        turn = itertools.count()
        last: list = []

        def prep():
            last[:] = [orders[next(turn) % 2]]
            for t, v in zip(given, last[0][0]):
                if isinstance(t, torch.Tensor):
                    t.copy_(v)

        def check(out) -> str | None:
            """The last timed run's output, then one more run's on the other order's values: a result
            cached in the loop is stale on one of the two."""
            for again in (False, True):
                if again:
                    prep()
                    out = prob.candidate(variant, dtype, given)
                    torch.cuda.synchronize()
                ok, stats = compare_outputs(out, last[0][1], last[0][2], dtype, prob.tolerance())
                if not ok:
                    return stats.get("why", "")
            return None
        return "main", timing.compare_times(lambda: prob.candidate(variant, dtype, given),
                                            lambda: prob.reference(variant, dtype, ins), ins, self.task,
                                            _compiled_reference(prob, variant, dtype, self.task), check, prep)


def _kind(task: TrialTask) -> str:
    """The record's candidate kind: its binding's, else a program pair's or an op's."""
    return task.binding.kind if task.binding else ("kernelbench" if task.language == "kernelbench" else "op")


def _problem(task, dev, workdir) -> Problem:
    """The record's problem, reference side only: nothing of the candidate is imported yet."""
    kind = _kind(task)
    if kind == "op":
        return OpProblem(task, dev)
    if kind in ("kernelbench", "inductor"):
        return ModuleProblem(task, workdir, dev)
    raise Reject("unbound", f"binding kind {kind!r} is not supported")


def _run_python(task, dev, workdir, package="", left=None):
    """References first (the book), then the snapshot, then the candidate; `left` receives what the
    candidate left changed in the process ("dirty", "changed"), however its trials end."""
    from sftbuild.trial import extension

    code = inductor_candidate(task) if _kind(task) == "inductor" else task.code
    with extension.patched_load_inline(task.ext_cache or os.path.join(workdir, "ext")):
        with guards.LaunchCounter(os.path.join(workdir, "cand.py"), inductor_code.kernel_names(code)) as counter:
            prob = _problem(task, dev, workdir)
            book = _book(prob, task, dev)
            world = pristine.Pristine()
            try:
                return _trials(task, code, prob, book, world, counter, dev, workdir, package)
            finally:
                if left is not None:
                    try:
                        left.update(dirty=world.dirty(), changed=world.changes())
                    except Exception as e:  # a faulted context: a fresh worker in any case
                        left.update(dirty=[f"process state unreadable: {e!r}"[:200]])


def _book(prob, task, dev) -> refbook.Book:
    """Every trial's references, before the candidate exists here: a failure is the reference's."""
    try:
        return refbook.Book(prob, task.seeds, dev, layout_of)
    except (Reject, torch.cuda.OutOfMemoryError):
        raise
    except Exception as e:
        raise Reject("reference_error", f"the reference does not run: {e!r}"[:400])


def _trials(task, code, prob, book, world, counter, dev, workdir, package):
    from sftbuild.trial import extension

    try:
        mod, path = load_module(code, "cand", workdir, package)
    except SyntaxError as e:
        raise Reject("compile_error", f"syntax error: {e}")
    prob.bind(mod)
    run = Run(prob, dev, counter, set(extension.kernel_names(code)) | set(inductor_code.kernel_names(code)),
              checks.selected(task.runtime_checks), book, world, task=task)
    why = checks.judge(run.checks, checks.Call([], [], tampered=world.changes()))  # what its import changed
    if why:
        return {"status": "dropped", "reason": why["reason"], "detail": why["why"] + " (at import)"}
    return loop.run([run], task)


def inductor_candidate(task: TrialTask) -> str:
    """A per-kernel Inductor record runs inside its program: the program's solution module (its
    output code and ModelNew, in the binding) with this record's kernel spliced in place of the one
    of the same name."""
    b = task.binding
    if not b or not b.solution or not b.kernel:
        raise Reject("unbound", "the inductor binding carries no program solution to launch the kernel")
    try:
        return inductor_code.splice(b.solution, b.kernel, task.code)
    except (inductor_code.NotStandalone, SyntaxError) as e:
        raise Reject("unbound", f"the kernel cannot be spliced into its program: {e}")


def _compiled_reference(prob, variant, dtype, task):
    if not task.compile_baseline:
        return None
    try:
        if isinstance(prob, ModuleProblem):
            f = torch.compile(prob.reference_models(variant, dtype)[0])
        else:
            f = torch.compile(lambda *xs: prob.op.run_reference(list(xs), prob.params_for(variant, dtype)))
        return f
    except Exception:
        return None


def trial(run: Run, variant, dtype, layout, seed, profile=False, vi=0):
    """One (variant, dtype, layout, seed): both orders, every run-time check, against the book's
    references for variant number `vi`. Returns (ok, stats)."""
    prob, dev = run.prob, run.dev
    tol = prob.tolerance()
    ref = run.book.get(vi, dtype, seed)
    run.values.update(ref.values)
    fence = fences.Fence([layout_of(_copy(t), layout) for t in ref.inputs])
    inputs = fence.views
    before = guards.snapshot(inputs)
    expected = ref.specs.get(layout) or ref.specs["contiguous"]
    sizes = [t.numel() * t.element_size() for t in ref.native if isinstance(t, torch.Tensor)]
    # order 1: the candidate first, on scrubbed memory
    with deadline.watch(ref.seconds):
        out, why = _call_candidate(run, variant, dtype, inputs, sizes, before, expected)
    why = fence.tripped() or why
    if why:
        return False, why
    if profile and dev.type == "cuda":
        # not watched: the profiler's own start-up can take seconds; the call itself just finished in time
        work = guards.TorchWork()
        times = guards.profile_kernel_times(lambda: _counted(work, lambda: prob.candidate(variant, dtype, inputs)))
        if times is not None:
            why = checks.judge(run.checks, checks.Profile(
                list(times), run.own, set(run.counter.names), run.counter.count, times, work.ops, work.elements,
                sum(t.numel() for t in inputs if isinstance(t, torch.Tensor))))
            if why:
                return False, why
    ok, stats = compare_outputs(out, ref.double, ref.native, dtype, tol, ref.sides, ref.spread)
    if not ok:
        why = _reads_outside(run, variant, dtype, inputs, fence, sizes, ref)
        if why:
            return False, {**stats, **why}
        return False, {**stats, "reason": "incorrect",
                       "why": f"{stats.get('why', '')} at {prob.describe(variant)} {dtype} {layout} seed {seed}"
                              + values.on(ref.values[0])}
    # order 2: new values in the same buffers (their references were computed first, before any candidate ran)
    for t, f in zip(inputs, ref.fresh):
        if isinstance(t, torch.Tensor):
            t.copy_(f)
    with deadline.watch(ref.seconds):
        out2, why = _call_candidate(run, variant, dtype, inputs, sizes, None, _resized(expected, ref.native2))
    why = fence.tripped() or why
    if why:
        return False, why
    ok, more = loop.second_order(run.checks, run.notes, out, out2, ref.double, ref.double2,
                                 compare_outputs(out2, ref.double2, ref.native2, dtype, tol, ref.sides2,
                                                 ref.spread2))
    if not ok and more.get("reason") == "incorrect":
        more = {**more, "why": more.get("why", "") + values.on(ref.values[1])}
    return (True, {**stats, **more}) if ok else (False, more)



def parameters_follow(run: Run) -> dict | None:
    """After every trial passed: a fresh candidate, given the reference's new parameter values before
    its first call (`load`) and updated in place after it (`step`, sftbuild.trial.parameters), must
    still match the book's reference results for each; one that answers from a stale copy of its
    parameters is `incorrect`. None: passed, or nothing to change (a candidate whose state does not
    match the reference's is noted in the flags, unchanged)."""
    plan, prob = run.book.parameters, run.prob
    if not plan:
        return None
    variant, dtype = prob.variants()[plan["vi"]], plan["dtype"]
    key = (variant[0], dtype)
    kept = prob._cands.pop(key, None)
    try:
        prob.prepare(variant, dtype)  # a fresh ModelNew, not called yet
        why = checks.judge(run.checks, checks.Call([], [], tampered=run.world.changes()))
        if why:
            return {"reason": why["reason"], "detail": why["why"]}
        cand = prob.candidate_model(variant, dtype)
        names = parameters.match(plan["changes"][0][1], cand)
        if names is None:
            run.notes.setdefault("parameters", []).append(
                "ModelNew's state does not match Model's by name or shape: changed parameters not tried")
            return None
        for what, vals, native, double in plan["changes"]:
            parameters.change(cand, what, vals, names)
            inputs = [_copy(t) for t in run.book.get(plan["vi"], dtype, 0).inputs]
            sizes = [t.numel() * t.element_size() for t in native if isinstance(t, torch.Tensor)]
            out, why = _call_candidate(run, variant, dtype, inputs, sizes, guards.snapshot(inputs),
                                       checks.specs(native))
            if why:
                return {"reason": why["reason"], "detail": why["why"]}
            ok, stats = compare_outputs(out, double, native, dtype, prob.tolerance())
            if not ok:
                return {"reason": "incorrect", "detail": f"{stats.get('why', '')} after {parameters.CHANGES[what]}: "
                                                         "the candidate answers from a stale copy of its parameters"}
    finally:
        prob._cands.pop(key, None)
        if kept is not None:
            prob._cands[key] = kept
    return None


def _counted(work, call):
    """`call()` with torch's compute ops counted (guards.TorchWork); where the count cannot run (a
    compiler refusing dispatch modes), the call runs plain and counts nothing (`work.ops` None)."""
    try:
        with work:
            return call()
    except Exception:
        work.ops = None
        return call()


def _resized(expected: list, native2: list) -> list:
    """The output contract for the second order's inputs: an output whose size follows the input
    values (masked_select, nonzero) has the size the reference gives on those values, contiguous;
    every other part of the contract, and every other output, is the first order's."""
    out = list(expected)
    for j, (spec, ref) in enumerate(zip(expected, native2)):
        if spec is not None and isinstance(ref, torch.Tensor) and tuple(ref.shape) != tuple(spec.shape):
            out[j] = spec._replace(shape=tuple(ref.shape), stride=tuple(ref.stride()))
    return out


def _reads_outside(run: Run, variant, dtype, inputs, fence, nbytes, ref) -> dict | None:
    """A wrong result that came from reading the inputs' guard regions (sftbuild.trial.fences):
    the candidate runs again on the same inputs, right when the guards hold finite values."""
    prob = run.prob

    def rerun() -> bool:
        guards.scrub(nbytes)
        try:  # an element the candidate never writes must not hold a right value left by an earlier run
            with guards.unwritten_is_nan(run.dev):
                out = prob.candidate(variant, dtype, inputs)
                if run.dev.type == "cuda":
                    torch.cuda.synchronize()
        except Exception:
            return False
        return compare_outputs(out, ref.double, ref.native, dtype, prob.tolerance(), ref.sides, ref.spread)[0]

    return fences.blame_reads(fence, rerun)


def _copy(t):
    return t.clone() if isinstance(t, torch.Tensor) else copy.deepcopy(t)


def _call_candidate(run: Run, variant, dtype, inputs, sizes, before, expected):
    """Call the candidate on scrubbed memory under strict precision, then the run-time checks of a call,
    among them what the candidate changed in the process (flags, RNG, torch's callables)."""
    if run.prob.prepare(variant, dtype):  # candidate code ran outside a call (ModelNew's __init__)
        why = checks.judge(run.checks, checks.Call([], [], tampered=run.world.changes()))
        if why:
            return None, why
    guards.scrub(sizes)
    changed: list[str] = []
    launches = run.counter.count
    rng = pristine.rng_state()
    with guards.strict_precision(changed):
        out = run.prob.candidate(variant, dtype, inputs)
        if run.dev.type == "cuda":
            torch.cuda.synchronize()
        tampered = run.world.changes()  # before strict_precision puts the flags back
    tampered += pristine.rng_changes(rng)
    made = run.counter.count - launches
    if before is not None and getattr(run.prob, "call", None):  # a package's own entry point (probe.py)
        run.in_place = updated_in_place(inputs, before, out + (getattr(run.prob, "handed", None) or []))
    call = checks.Call(inputs, out, before=before, mutates=run.in_place, expected=expected, flags_changed=changed,
                       tampered=tampered, launches=made if made or run.expects_triton else None)
    why = checks.judge(run.checks, call)
    if why:
        return None, why
    # results living in an input: the next order writes new values there, so keep these apart
    return [o.clone() if lives_in(o, inputs, run.in_place) else o for o in out], None


def updated_in_place(inputs: list, before: list, outputs: list) -> tuple[int, ...]:
    """Inputs the call changed and returned (a view of): an in-place op (RoPE rotating q and k where they
    lie; a fused loss leaving its gradient in the logits and handing them back), whose updates are
    results. `outputs` holds every tensor the call returned, compared or not. An input changed but not
    returned stays scratch space (checks/inputs_unchanged); one returned unchanged stays a view
    (checks/real_outputs). Only a package's own entry point, called as the probe found it, may work in
    place: its contract is the package's. A candidate for an op or a module pair (a task, a reward)
    keeps the reference's contract, which leaves the caller's inputs alone."""
    from sftbuild.trial.checks.inputs_unchanged import same

    return tuple(i for i, (t, was) in enumerate(zip(inputs, before))
                 if isinstance(t, torch.Tensor) and was is not None and t.numel() and not same(t, was)
                 and any(view_of(o, t) for o in outputs))


def lives_in(o, inputs: list, which: tuple) -> bool:
    """Output `o` lives in one of the inputs numbered `which`."""
    return any(view_of(o, inputs[i]) for i in which)


def at_kink(out, ref, sides: list):
    """The reference with each element replaced by the nearest to `out` of the one-sided results, where
    those part from it by more than float64 noise (a kink); None when no element sits on one."""
    if not all(isinstance(t, torch.Tensor) and t.shape == ref.shape for t in sides) or not out.is_floating_point():
        return None
    o, best = out.detach().double().to(ref.device), ref.double().clone()
    scale = float(ref.double().abs().nan_to_num(0.0, 0.0, 0.0).max()) or 1.0
    parted = torch.zeros(ref.shape, dtype=torch.bool, device=ref.device)
    for side in sides:
        side = side.double().to(ref.device)
        apart = (side - ref.double()).abs() > 1e3 * KINK_STEP * scale  # smooth elements move ~KINK_STEP
        closer = apart & ((o - side).abs() < (o - best).abs())
        best = torch.where(closer, side, best)
        parted |= apart
    return best if bool(parted.any()) else None


def _expects_triton(prob) -> bool:
    if isinstance(prob, OpProblem):
        return True
    src = inspect.getsource(prob.cand_cls) if prob.cand_cls else ""
    mod = sys.modules.get(prob.cand_cls.__module__)
    full = inspect.getsource(mod) if mod else src
    return "triton.jit" in full or "@jit" in full


def compare_outputs(outs, refs64, natives, dtype, tol, sides=(), spreads=()):
    """Each output against its float64 reference (the probe's trials compare so too); with `sides`
    (OpProblem.sides), an element may match either side's value instead where the sides part (a kink:
    either one-sided result is right); with `spreads` (the book's, sftbuild.ops.rounding.spread), an
    output where the reference cancels gets the reference's own spread under rounding.
    (ok, stats): the worst of each statistic over the outputs compared, and on a failure the failing
    output's `why`."""
    if len(outs) != len(refs64):
        return False, {"why": f"{len(outs)} outputs, the reference has {len(refs64)}"}
    stats = {}
    context = ops.largest(refs64)
    for j, (o, r, n) in enumerate(zip(outs, refs64, natives)):
        w = spreads[j] if len(spreads) == len(refs64) and isinstance(spreads[j], torch.Tensor) else None
        ok, s = ops.compare(o, r, dtype, tol, native=n, context=context, spread=w)
        if not ok and sides and isinstance(o, torch.Tensor) and all(len(side) > j for side in sides):
            kinked = at_kink(o, r, [side[j] for side in sides])
            if kinked is not None:
                again, s2 = ops.compare(o, kinked, dtype, tol, native=n, context=context, spread=w)
                if again:
                    ok, s = True, s2
                    stats["at_kink"] = True
        for k in ("max_abs", "max_rel", "norm_rel", "rounding_sensitive"):
            if s.get(k) is not None:
                stats[k] = max(stats.get(k, 0.0), s[k])
        if not ok:
            return False, {**stats, "why": s.get("why", "")}
    return True, stats
