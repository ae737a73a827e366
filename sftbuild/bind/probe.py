"""Probe a Triton record through its own entry points: which op, if any, does it compute?

`probe(task)` is a task function: it runs only in a sandboxed worker (a GPU worker, or on CPU
in a one-shot sandbox under TRITON_INTERPRET=1 with fp32/fp16). It imports the record's code
with its package tree on the path (pyrun.package_tree), then for each entry point the harvest
found (sftbuild.harvest.triton_extract.entry_points), forward ones first, and each shortlisted
op, it tries argument mappings:

  * tensors from the op's own input generator go to the entry's parameters that take tensors
    (no default, or a None default), by name first, then in every order;
  * op params (eps, dim, ...) go to parameters of the same name; every other parameter keeps its
    default, or the literal default the file declares for that name elsewhere (`hint`);
  * where that leaves no mapping, a parameter without a default of any kind in its file gets the
    task's `hints` (the package's defaults for that name, sftbuild.bind.binders.probed.tree_hints);
  * the output is the returned tensor or an element of a returned tuple (an input updated in place
    and not returned would fail validation's inputs-unchanged check, so it is not looked for; one
    returned is an in-place op's result, pyrun.updated_in_place).

Only entries that run the record's own kernels are tried (`runs_kernels`). A backward kernel's
record holds the autograd Function whose backward launches it (harvest keeps it): its `apply` is
matched on the forward outputs, then every trial also compares the gradients of
sum(output * cotangent) with respect to the floating inputs with those of the op's reference
(`call.grad`, `pyrun.with_grads`); the binding's op is the forward op, checked through its backward.

Every trial must launch one of the record's own kernels (guards.LaunchCounter over its file, counted by
the record's kernel names: a sibling kernel of the same file says nothing of this record's): an
entry that hands a real input back from `conj_physical` computes nothing of its own there.
A mapping that matches the reference on a first small trial (at the first dtype where one does) is
confirmed over at least 3 shapes and 2 dtypes; a dtype counts when every shape passes at it. On a GPU,
bfloat16 is tried too where fewer than 2 of the task's dtypes agree (SPARE_DTYPES: a float32 path run
in TF32 is no float32 op, its half-precision paths may be right); the binding holds the dtypes that
agreed, but float32 values disagreeing where the record has no dot (no TF32) reject the op outright (a
kernel that refuses float32 may still agree in half precision). A
binding that agrees at only some of the task's dtypes is kept while the rest of the shortlist
is tried: a candidate that agrees at all of them wins (tanh-approximated GELU passes for erf GELU in
half precision only). Anything less stays unbound.

The package's own references in the task (`package_refs`, sftbuild.bind.binders.probed) are registered
as ops first; a binding to one carries its spec (`package_reference`). A record whose import fails
on a name the installed Triton or torch lacks, in its code or its package's, is unbound as
`incompatible_toolchain` with that name.

Task: {id, code, entry, tree?, path?, shortlist: [op names], package_refs?, dtypes, device?, shapes (>= 3),
time_limit (s)}. Returns
  {"binding": {"kind": "op", "op", "params", "dtypes", "layouts", "how": "probed",
               "call": {"entry", "kind", "args", "outputs"}},
   "evidence": {"shapes", "dtypes", "worst_error", "candidates_tried"}}
or {"unbound": reason, "evidence": {...}}.
"""
from __future__ import annotations

import itertools
import math
import re
import os
import shutil
import tempfile
import time

import torch

from sftbuild import ops
from sftbuild.ops import opdb, special
from sftbuild.bind.binders.probed import runs_kernels
from sftbuild.bind.tasks import TritonProbe
from sftbuild.ops.pools import TORCH_DTYPES
from sftbuild.trial import guards, pyrun, sizes
from sftbuild.trial.checks import same_strides
from sftbuild.trial.checks.output_type import dim_order

MIN_SHAPES, MIN_DTYPES = 3, 2
# tried on a GPU only where fewer than MIN_DTYPES of the task's agree: an entry whose float32 path
# runs its dots in TF32 (Triton's default) is no float32 op, and may still be right in half precision
SPARE_DTYPES = ("bfloat16",)
TF32 = re.compile(r"\btl\.dot\b|\.dot\(|dot_scaled")  # where Triton may compute float32 in TF32
SIZE_NAME = re.compile(r"^(n_|num_)(cols|rows|channels|elements|features|classes|heads)$|^(n|numel|hidden_size)$")
MAX_PROBE_NUMEL = 1 << 16  # shape products the interpreter gets through quickly
MAX_PROBE_NUMEL_GPU = 1 << 24
MIN_PROBE_NUMEL = 8  # a handful of elements cannot tell ops apart
TENSOR_ANNOTATIONS = ("Tensor", "torch.Tensor")
SCALAR_ANNOTATIONS = ("int", "float", "bool", "str")
ALIASES = {  # op input names -> parameter names that usually carry them
    "x": ("x", "input", "inp", "input_", "a", "self", "src", "in", "in_", "logits", "hidden_states", "t"),
    "w": ("w", "weight", "gamma", "scale"),
    "b": ("b", "bias", "beta"),
    "a": ("a", "x", "input", "inp", "self", "lhs", "gate"),
    "r": ("r", "residual", "res"),
    "dy": ("dy", "grad_output", "grad", "dout", "do", "dc"),
    "target": ("target", "labels", "y", "targets"),
    "mask": ("mask", "condition", "cond"),
}


PARAM_ALIASES = {  # op param -> parameter names that usually carry it
    "eps": ("epsilon", "variance_epsilon", "eps_"), "dim": ("axis",), "groups": ("num_groups", "n_groups"),
    "k": ("topk", "top_k"), "descending": ("reverse",),
}


def probe(task: TritonProbe | dict) -> dict:
    task = TritonProbe.of(task)
    dev = torch.device(task.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    pyrun.interpreter_scalars()
    pyrun.bounded_autotune()
    started = time.monotonic()
    deadline = started + float(task.time_limit or 120)
    workdir = tempfile.mkdtemp(prefix="sftbuild_probe_")
    tried: list[dict] = []
    try:
        with pyrun.package_tree(task.tree, task.path, keep=True) as package:
            try:
                mod, path = pyrun.load_module(task.code, "cand", workdir, package)
            except Exception as e:
                said = import_failed(e, task.path)
                return {"unbound": said, "evidence": {"candidates_tried": tried},
                        "cause": "toolchain" if said.startswith("incompatible_toolchain") else "import_failed"}
            with guards.LaunchCounter(path) as counter:
                _LAUNCHES[:] = [counter, set((task.entry or {}).get("kernels") or ())]
                try:
                    out = _search(task, mod, dev, deadline, tried)
                finally:
                    _LAUNCHES[:] = []
    except Exception as e:  # anything the record's code does to us is an unbound verdict, not a crash
        out = {"unbound": f"probe error: {type(e).__name__}: {str(e)[:300]}", "evidence": {"candidates_tried": tried}}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out.setdefault("evidence", {})["seconds"] = round(time.monotonic() - started, 1)
    said = " ".join(str(t.get("why", "")) for t in tried) + str(out.get("unbound", ""))
    if dev.type == "cuda" and any(w in said for w in ("CUDA", "illegal memory")):
        out["recycle"] = True  # CUDA errors are sticky: the GPU worker is replaced before the next task
    return out


def import_failed(exc: BaseException, rel: str | None) -> str:
    """Why the record's code did not import: `incompatible_toolchain` with the name the installed
    Triton or torch lacks (in its own imports or its package's), else the error itself."""
    package = ".".join((rel or "").split("/")[:1])  # a relative import fails where the package did not import
    causes = [exc] + [e for name, e in pyrun.PACKAGE_ERRORS.items() if name.split(".")[0] == package]
    for e in causes:
        gap = pyrun.toolchain_gap(e)
        if gap:
            return f"incompatible_toolchain: {gap} is missing from the installed {pyrun.toolchain_versions()}"
    said = f"import failed: {type(exc).__name__}: {str(exc)[:300]}"
    if len(causes) > 1:
        said += f" (the package did not import: {type(causes[1]).__name__}: {str(causes[1])[:200]})"
    return said


def _search(task, mod, dev, deadline, tried) -> dict:
    kernels = (task.entry or {}).get("kernels")
    entries = [e for e in (task.entry or {}).get("entry_points") or [] if e["kind"] != "module"
               and runs_kernels(e, kernels)]
    if not entries:
        return {"unbound": "no entry point launches its kernels", "cause": "no_entry_point",
                "evidence": {"candidates_tried": tried}}
    names = task.shortlist or []
    specs = {}
    for r in task.package_refs or []:  # the package's own references, imported from its tree when first run
        try:
            ops.package_op(r["module"], r["func"], r["like"], name=r["name"], params=r.get("params"))
            specs[r["name"]] = r
        except (KeyError, ValueError, TypeError):  # its `like` is no op here: the rest of the shortlist stands
            continue
    known: dict[str, bool] = {}  # asked as the search reaches each name: an op_db name loads op_db (seconds)
    dtypes = [d for d in task.dtypes or ["float32", "float16"]]
    best = None  # a binding that agreed at only some of the dtypes tried: a later candidate may agree at all
    for entry in entries:
        for name in names:
            if name not in known:
                known[name] = _known(name)
            if not known[name]:
                continue
            if time.monotonic() > deadline:
                return best or _unbound("time limit reached", tried)
            grad = runs_kernels(entry, kernels) == "backward"
            if grad and "backward" in name:  # a Function's forward is checked against a forward op
                continue
            op = ops.get(name)
            result = _try(mod, entry, op, dtypes, dev, task, deadline, grad=grad)
            tried.append({"entry": entry["qualname"], "op": name, **{k: v for k, v in result.items()
                                                                    if k != "binding"}})
            if result.get("binding"):
                if name in specs:
                    result["binding"]["package_reference"] = specs[name]
                found = {"binding": result["binding"], "evidence": {**result["evidence"], "candidates_tried": tried}}
                agreed = set(result["evidence"]["dtypes"])
                if agreed >= {d for d in dtypes if d in op.dtypes}:
                    return found
                if best is None or _rank(agreed) > _rank(set(best["evidence"]["dtypes"])):
                    best = found  # tanh GELU agrees with erf GELU in half precision only
    if best:
        return best
    if not any(known.values()):  # every name was asked about: the registry has none of them
        return {"unbound": "no candidate reference", "evidence": {"candidates_tried": tried}}
    return _unbound(None, tried)


def _rank(agreed: set) -> tuple:
    """A partial agreement is better with float32 in it, then with more dtypes."""
    return ("float32" in agreed, len(agreed))


def with_tree_hints(entry: dict, hints: dict) -> dict:
    """`entry` with a `hint` from the package (sftbuild.bind.binders.probed.tree_hints) on each
    parameter that has neither a default nor a hint from its own file."""
    params = [{**p, "hint": hints[p["name"]]} if not p["has_default"] and "hint" not in p
              and p["name"] in hints else p for p in entry["params"]]
    return {**entry, "params": params}


def _known(name: str) -> bool:
    """Whether the registry has the op here (hand-written, a package's, or torch's op_db)."""
    try:
        ops.get(name)
        return True
    except KeyError:
        return False


def _unbound(reason, tried) -> dict:
    """The reason of the attempt that got furthest (agreed on some trials, else any)."""
    if reason is None:
        best = max(tried, key=lambda t: (t.get("agreed", 0), not t.get("why", "").startswith("no mapping")),
                   default=None)
        reason = (f"{best['entry']} vs {best['op']}: {best['why']}" if best else "no candidate tried")
    worst = [t["worst_error"] for t in tried if t.get("worst_error") is not None]
    return {"unbound": reason, "evidence": {"candidates_tried": tried,
                                             "worst_error": min(worst) if worst else None}}


# ---- one (entry, op) pair -------------------------------------------------------------

def _try(mod, entry, op, dtypes, dev, task, deadline, grad: bool = False) -> dict:
    try:
        fn = pyrun.resolve_entry(mod, entry["qualname"])
    except pyrun.Reject as r:
        return {"why": r.why}
    shapes = probe_shapes(op, task.shapes or MIN_SHAPES, MAX_PROBE_NUMEL_GPU if dev.type == "cuda" else
                          MAX_PROBE_NUMEL)
    dtypes = [d for d in dtypes if d in op.dtypes]
    if len(shapes) < MIN_SHAPES or len(dtypes) < MIN_DTYPES:
        return {"why": f"the op offers {len(shapes)} shapes and {len(dtypes)} dtypes to probe"}
    params = dict(op.params)
    # the package's defaults only where the file's own leave nothing to map: a name can mean other
    # things elsewhere in the package (GRPO's beta is no DyT beta tensor)
    mappings = list(arg_mappings(entry, op, params)) or \
        list(arg_mappings(with_tree_hints(entry, task.hints or {}), op, params))
    if not mappings:
        return {"why": "no mapping: " + _unmappable(entry, op, params)}
    spare = [d for d in SPARE_DTYPES if dev.type == "cuda" and d in op.dtypes and d not in dtypes]
    first = None  # the by-name mapping comes first: its failure is the one worth reporting
    for args in mappings[:12]:
        if time.monotonic() > deadline:
            return {"why": "time limit reached"}
        call = {"entry": entry["qualname"], "kind": entry["kind"], "args": args}
        outputs, why = None, ""
        for dtype in dtypes + spare:  # the outputs are found at the first dtype where their values match
            outputs, why = _find_outputs(fn, call, op, shapes[0], dtype, dev, params)
            if outputs is not None:
                break
            first = first or why
            if not why.startswith("worst error"):
                break  # an error or a shape that does not fit is no matter of precision
        if outputs is None:
            continue
        call["outputs"] = outputs
        if grad:  # the record's kernels run in the backward: the gradients are what is checked
            call["grad"] = True
        return _confirm(fn, call, op, shapes, dtypes, dev, params, task.code or "", spare)
    return {"why": first or "no mapping"}


def _unmappable(entry, op, params) -> str:
    """Why no argument list fits: a required parameter nothing fills, or too few tensor parameters."""
    for p in entry["params"]:
        if p["kind"] == "pos" and not p["has_default"] and "hint" not in p and not _takes_tensor(p) \
                and p["name"].lower() not in {k.lower() for k in params} | {a for v in PARAM_ALIASES.values()
                                                                           for a in v}:
            return f"nothing fills parameter {p['name']!r}"
    n = len(input_names(op))
    return f"{op.name} takes {n} tensors; the entry's tensor parameters do not fit"


def probe_shapes(op, n: int, most: int = MAX_PROBE_NUMEL) -> list:
    """The n smallest shapes of the op's pool that are big enough to tell ops apart (and under `most`);
    where the pool has fewer in that range, the nearest others fill in (a pool entry's product is a
    bound, not the tensors' size: (tokens, hidden, vocab) of a fused linear cross-entropy)."""
    want = max(n, MIN_SHAPES)
    fits = sorted((s for s in op.shape_pool if MIN_PROBE_NUMEL <= math.prod(s) <= most), key=math.prod)
    if len(fits) >= want:
        return fits[:want]

    def distance(s):
        v = max(1, math.prod(s))
        return math.log(MIN_PROBE_NUMEL / v) if v < MIN_PROBE_NUMEL else math.log(v / most)
    others = sorted((s for s in op.shape_pool if s not in fits), key=distance)
    return sorted(fits + others[:want - len(fits)], key=math.prod)


def _inputs(op, shape, dtype, seed, dev, params):
    """The op's trial inputs, as validation draws them (sftbuild.ops.special)."""
    return [t.to(dev) for t in special.trial_inputs(op, shape, dtype, seed, params)]


def _call(fn, call, inputs, params):
    out = fn(*pyrun.call_args(call, inputs, params), **pyrun.call_kwargs(call, inputs, params))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out


def _find_outputs(fn, call, op, shape, dtype, dev, params):
    """Which returned tensor matches each reference output, on one trial."""
    inputs = _inputs(op, shape, dtype, 0, dev, params)
    try:  # the references first, before the entry can touch the inputs
        refs64 = ops.as_outputs(op.run_reference(ops.upcast(inputs), params))
        natives = ops.as_outputs(op.run_reference(inputs, params))
    except Exception as e:
        return None, f"the reference fails here: {type(e).__name__}: {str(e)[:160]}"
    try:
        out = _call(fn, call, inputs, params)
    except Exception as e:
        return None, f"error: {type(e).__name__}: {str(e)[:200]}"
    # returned tensors only: an input updated in place would fail validation's inputs-unchanged check
    found = [({"index": i}, t) for i, t in pyrun.returned(out)]
    picks, why = [], "no output matches"
    for r64, nat in zip(refs64, natives):
        hit = None
        for spec, t in found:
            if tuple(t.shape) != tuple(r64.shape):
                if not why.startswith("worst error"):  # a tensor of the right shape with wrong values says more
                    why = f"shape mismatch: {tuple(t.shape)} vs {tuple(r64.shape)}"
                continue
            ok, stats = ops.compare(t, r64, dtype, op.tolerance, native=nat, context=ops.largest(refs64))
            if ok:
                hit = spec
                break
            why = f"worst error {_err(stats):.3g}: {stats.get('why', '')}"[:200]
        if hit is None:
            return None, why
        picks.append(hit)
    return [{"from": "return", "index": p["index"]} for p in picks], ""


def _err(stats) -> float:
    return max([stats.get(k) or 0.0 for k in ("norm_rel", "max_rel")] + [0.0])


def _confirm(fn, call, op, shapes, dtypes, dev, params, code: str = "", spare=()) -> dict:
    """Agreement over every shape at >= MIN_DTYPES dtypes, or the reason there is none. `spare` dtypes
    are tried only while fewer than MIN_DTYPES agree (SPARE_DTYPES)."""
    passed, worst, fails, agreed = [], 0.0, [], 0
    for dtype in list(dtypes) + [d for d in spare if d not in dtypes]:
        if dtype in spare and len(passed) >= MIN_DTYPES:
            break
        ok_all = True
        for si, shape in enumerate(shapes):
            ok, stats, why = _trial(fn, call, op, shape, dtype, dev, params, seed=si + 1)
            if ok:
                agreed += 1
                worst = max(worst, _err(stats))
            else:
                ok_all = False
                fails.append(f"{dtype} {list(shape)}: {why}")
                break
        if ok_all:
            passed.append(dtype)
    evidence = {"shapes": [list(s) for s in shapes], "dtypes": passed, "worst_error": worst}
    f32 = next((f for f in fails if f.startswith("float32 ")), "")
    if "worst error" in f32 and not TF32.search(code):
        # only a dot may run float32 in TF32: without one, float32 disagreeing is the op disagreeing
        # (erf GELU against a tanh-approximated one agrees in half precision only)
        return {"why": "; ".join(fails)[:260] + "; float32 disagrees and no tl.dot could run it in TF32",
                "agreed": agreed, "evidence": evidence, "worst_error": worst}
    if len(passed) < MIN_DTYPES:
        return {"why": "; ".join(fails)[:300] or "too few dtypes agree", "agreed": agreed, "evidence": evidence,
                "worst_error": worst}
    layouts = ["contiguous"] + [lay for lay in op.layouts if lay != "contiguous"
                                and _trial(fn, call, op, shapes[-1], passed[0], dev, params, 7, lay)[0]]
    # observed where no axis has size 1 if it can be: a size-1 axis hides the order of the others
    contract = output_contract(fn, call, op, max(shapes, key=lambda s: (min(s), -math.prod(s))), passed, dev,
                               params)
    if contract:
        call = {**call, "contract": contract}
    binding = {"kind": "op", "op": op.name, "params": {}, "dtypes": _dtypes(passed, dev), "layouts": layouts,
               "how": "probed", "call": call}
    limit = refused_width(fn, call, op, shapes, passed[0], dev, params, code)
    if limit:
        binding["constraints"] = limit
        evidence["refused"] = limit
    return {"binding": binding, "evidence": evidence, "agreed": agreed, "why": "agrees"}


def output_contract(fn, call, op, shape, dtypes, dev, params) -> list | None:
    """What the entry's outputs are besides their values, where that is not what the op's reference
    returns: per compared output {"dtype": "input" (the trial's dtype) or a dtype's name, "order": the
    dimension order of a dense layout (outermost first)}, None for an output that is as the reference's.
    The package's own entry defines its outputs' dtype and layout (a loss kept in the logits' dtype,
    rotated q returned as a transposed view of its (B, S, H, D) buffer); validation and an exported
    task hold the entry, and a candidate standing in for it, to this observed contract
    (pyrun.OpProblem.expected) instead of the reference's. A rule that is not the same at every
    dtype is not recorded: such outputs keep the reference's contract. None when no output differs."""
    seen = []  # per dtype: (dtype, outputs, reference outputs)
    for dtype in dtypes:
        inputs = _inputs(op, shape, dtype, 0, dev, params)
        try:
            natives = ops.as_outputs(op.run_reference(inputs, params))
            out = _call(fn, call, inputs, params)
        except Exception:
            return None
        seen.append((dtype, [pyrun.pick_output(spec, out, inputs) for spec in call["outputs"]], natives))
    contract = [_one_contract([(d, outs[j], nats[j]) for d, outs, nats in seen])
                for j in range(len(call["outputs"]))]
    return contract if any(contract) else None


def _one_contract(trials: list) -> dict | None:
    if not all(isinstance(o, torch.Tensor) and isinstance(n, torch.Tensor) and o.shape == n.shape
               for _, o, n in trials):
        return None
    rule = {}
    if any(o.dtype != n.dtype for _, o, n in trials):
        if all(o.dtype == TORCH_DTYPES[d] for d, o, _ in trials):
            rule["dtype"] = "input"
        elif len({o.dtype for _, o, _ in trials}) == 1:
            rule["dtype"] = str(trials[0][1].dtype).removeprefix("torch.")
    if any(not same_strides(o.shape, o.stride(), n.stride()) for _, o, n in trials):
        orders = {dim_order(o.shape, o.stride()) for _, o, _ in trials}
        if len(orders) == 1 and None not in orders:
            rule["order"] = list(orders.pop())
    return rule or None


def refused_width(fn, call, op, shapes, dtype, dev, params, code: str = "") -> dict | None:
    """{"max_cols": n} when the entry refuses, by raising, the last-axis size validation grows a flat
    shape to (sftbuild.trial.sizes.grow_shape: 2^20 + 1 elements on a GPU) and takes every power of
    two up to n: a stated limit of the package (liger's one-block rows stop at 2^16 columns), which
    the binding records so validation and the exported task keep to it. Nothing is recorded when the
    grown size passes, comes out wrong (validation judges that), or grows another axis than the last
    (rows and batches are no block's width)."""
    base = max(shapes, key=math.prod)
    grown = sizes.grow_shape(base, {}, sizes.limit_for(None, dev.type == "cpu"), sizes.block_sizes(code))
    if grown is None or [a for a in range(len(base)) if grown[a] != base[a]] != [len(base) - 1]:
        return None
    ok, _, why = _trial(fn, call, op, grown, dtype, dev, params, seed=0)
    if ok or not why.startswith("error:"):
        return None
    lo, hi = int(base[-1]).bit_length() - 1, (int(grown[-1]) - 1).bit_length()  # 2^lo is taken, 2^hi refused
    taken = None
    while hi - lo > 1:  # bisect the exponent: a few trials, each a new block width to compile
        mid = (lo + hi) // 2
        ok, _, why = _trial(fn, call, op, grown[:-1] + (1 << mid,), dtype, dev, params, seed=0)
        if not ok and not why.startswith("error:"):
            return None  # a wrong result, not a refusal: validation judges it
        lo, hi, taken = (mid, hi, 1 << mid) if ok else (lo, mid, taken)
    return {"max_cols": taken or 1 << lo}


def _dtypes(passed: list, dev) -> list:
    """The dtypes the binding is validated at: those that agreed, and bfloat16 too when the probe ran
    in the interpreter (its bf16 arithmetic is wrong, so only a GPU can judge it)."""
    if dev.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1" and "bfloat16" not in passed:
        return passed + ["bfloat16"]
    return passed


def _references(op, inputs, params, grad: bool) -> tuple[list, list]:
    """The float64 reference's outputs and the native-dtype one's (with their input gradients)."""
    def run(xs):
        return ops.as_outputs(op.run_reference(xs, params))
    if not grad:
        return run(ops.upcast(inputs)), run(inputs)
    refs64 = pyrun.with_grads(run, ops.upcast(inputs), op.grad_constants)
    try:
        natives = pyrun.with_grads(run, inputs, op.grad_constants)
    except Exception:  # a torch without this op's backward at the dtype: the float64 one judges alone
        natives = [None] * len(refs64)
    return refs64, natives


_LAUNCHES: list = []  # the running probe's guards.LaunchCounter over the record's file, and the record's kernels


def _launched() -> int | None:
    """Launches of the record's own kernels so far in this probe (None outside one). A file holds
    other records' kernels too: an entry that dispatches (FlagGems' `div_mode` runs its true-division
    kernel unless asked for a rounding mode) agrees with `div` through a sibling's kernel, and that
    says nothing of this record's trunc- and floor-division kernels."""
    if not _LAUNCHES:
        return None
    counter, own = _LAUNCHES
    if not own:
        return counter.count
    return sum(counter.by_name.get(k, 0) for k in own)


def _trial(fn, call, op, shape, dtype, dev, params, seed, layout="contiguous"):
    # the layouts validation uses (pyrun.layout_of on every input), so a probed layout holds there
    inputs = [pyrun.layout_of(t, layout) for t in _inputs(op, shape, dtype, seed, dev, params)]
    try:
        refs64, natives = _references(op, inputs, params, bool(call.get("grad")))
    except Exception as e:
        return False, {}, f"the reference fails here: {type(e).__name__}: {str(e)[:160]}"

    def run(xs):
        out = _call(fn, call, xs, params)
        return [pyrun.pick_output(spec, out, xs) for spec in call["outputs"]]
    before = _launched()
    try:
        outs = pyrun.with_grads(run, inputs, op.grad_constants) if call.get("grad") else run(inputs)
    except Exception as e:
        return False, {}, f"error: {type(e).__name__}: {str(e)[:160]}"
    if before is not None and _launched() == before:  # right values from torch, or an input handed back
        return False, {}, "the entry launched none of the record's kernels here"
    if len(outs) != len(refs64):
        return False, {}, f"{len(outs)} outputs and gradients, the reference has {len(refs64)}"
    ok, stats = pyrun.compare_outputs(outs, refs64, natives, dtype, op.tolerance)
    if not ok:
        return False, stats, f"worst error {_err(stats):.3g}: {stats.get('why', '')}"[:200]
    return True, {k: stats.get(k) or 0.0 for k in ("norm_rel", "max_rel")}, ""


# ---- argument mappings -----------------------------------------------------------------

def input_names(op) -> list[str]:
    return [s.split(":")[0].strip() for s in op.io.get("inputs") or []]


def arg_mappings(entry: dict, op, params: dict):
    """Positional argument lists for the entry: ["input", i], ["param", name], ["value", literal] or
    ["shape", [i, axis]] (a size of input i; axis None: its numel). For an op from torch's op_db the
    first is [["sample", None]]: the entry is called as torch's op is, with the sample's own
    non-tensor arguments (dims, scalars, keywords), which an ATen-style entry takes as they are."""
    if opdb.is_opdb(op.name) and _takes_sample(entry):
        yield [["sample", None]]
    plist = [p for p in entry["params"] if p["kind"] == "pos"]
    lower = {k.lower(): k for k in params}
    lower.update({alias: k for k in params for alias in PARAM_ALIASES.get(k.lower(), ())})
    fixed: dict[int, list | None] = {}  # position -> what it gets when passed (None: cannot be passed)
    slots: list[int] = []  # positions that may take a tensor
    sized: list[int] = []  # positions that take a size of the first input
    for j, p in enumerate(plist):
        if p["name"].lower() in lower:
            fixed[j] = ["param", lower[p["name"].lower()]]
        elif SIZE_NAME.match(p["name"]) and not p["has_default"] and "hint" not in p:
            sized.append(j)  # a size the caller reads off the input (n_cols, num_channels)
            fixed[j] = ["shape", [0, -1]]
        elif _takes_tensor(p):
            slots.append(j)
        elif p["has_default"]:
            fixed[j] = None if isinstance(p["default"], dict) else ["value", p["default"]]
        elif "hint" in p:
            fixed[j] = ["value", p["hint"]]
        else:
            return  # a required parameter nothing can fill
    if len(sized) > 1:
        return  # two unknown sizes: too many guesses to tell apart
    names = input_names(op)
    n = len(names)
    # a parameter the file gives a default elsewhere (hint) may stay at that value
    required = {j for j, p in enumerate(plist) if not p["has_default"] and "hint" not in p}
    if len(slots) < n or len(required & set(slots)) > n:
        return
    # op params are passed, and so is every parameter without a default of its own
    must = [j for j in fixed if fixed[j] and fixed[j][0] == "param"] + \
        [j for j, p in enumerate(plist) if not p["has_default"]]
    seen, made = set(), []
    for order in _orders(names, [plist[j]["name"] for j in slots]):
        used = {slots[k]: i for i, k in enumerate(order)}  # position -> op input index
        if len(used) != n or not (required & set(slots)) <= set(used):
            continue
        args = []
        for j in range(max([*used, *must], default=-1) + 1):
            if j in used:
                args.append(["input", used[j]])
            elif j in slots:
                args.append(["value", plist[j]["default"] if plist[j]["has_default"] else plist[j].get("hint")])
            elif fixed.get(j) is None:
                args = None
                break
            else:
                args.append(fixed[j])
        for variant in _size_variants(args, sized):
            if repr(variant) not in seen:
                seen.add(repr(variant))
                made.append(variant)
                yield variant
    # reductions: ops keep the reduced dim (size 1); an entry that drops it by default may keep it
    keep = next((j for j, p in enumerate(plist) if p["name"] == "keepdim" and p["has_default"]
                 and p["default"] is False), None)
    if keep is not None:
        for args in list(made):
            if len(args) > keep:
                continue
            ext = args + [["value", plist[j]["default"]] for j in range(len(args), keep)] + [["value", True]]
            if all(plist[j]["has_default"] and not isinstance(plist[j]["default"], dict)
                   for j in range(len(args), keep)):
                yield ext


def _takes_sample(entry: dict) -> bool:
    """An entry whose first positional parameter takes a tensor (the op's input comes first), or that
    takes `*args` first (an ATen-style `def exp_(*args, **kwargs)`, which reads torch's own call)."""
    pos = [p for p in entry["params"] if p["kind"] in ("pos", "var")]
    return bool(pos) and (pos[0]["kind"] == "var" or _takes_tensor(pos[0]))


def _size_variants(args, sized: list[int]) -> list:
    """`args` with a size parameter read off the first input: its last, second, first dim or numel."""
    if args is None:
        return []
    if not sized or sized[0] >= len(args):
        return [args]
    out = []
    for axis in (-1, 1, 0, None):
        v = list(args)
        v[sized[0]] = ["shape", [0, axis]]
        out.append(v)
    return out


def _orders(names: list[str], slot_names: list[str]):
    """Slot choices (indices into slot_names, one per op input): the by-name guess first, then
    the first n slots in every order, then any other choice of n slots."""
    n = len(names)
    guess = []
    for name in names:
        want = ALIASES.get(name.lower(), (name.lower(),))
        k = next((k for k, s in enumerate(slot_names) if s.lower().removesuffix("_ptr") in want
                  and k not in guess), None)
        if k is None:
            break
        guess.append(k)
    if len(guess) == n:
        yield tuple(guess)
    yield from itertools.permutations(range(n))
    if len(slot_names) > n:
        yield from itertools.permutations(range(len(slot_names)), n)


def _takes_tensor(p: dict) -> bool:
    ann = p.get("annotation") or ""
    if any(ann.startswith(a) for a in SCALAR_ANNOTATIONS):
        return False
    if any(t in ann for t in TENSOR_ANNOTATIONS):
        return True
    if p["has_default"]:
        return p["default"] is None
    return "hint" not in p or p["hint"] is None
