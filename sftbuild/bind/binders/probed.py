"""Bindings found by probing: call a Triton record's own entry points on generated inputs.

Nothing here runs harvested code. `plan(record)` builds the task that
`sftbuild.bind.probe:probe` runs in a sandboxed worker (a GPU worker, or the Triton
interpreter on CPU); `accept(record, result)` turns its answer into the binding dict
(`how: probed`, with the evidence), or None when the probe left the record unbound.
`bind()` answers None: a name is a hypothesis, only a probe makes a binding.

Shortlist: first the ops a package's own registration table names for an entry point
(`sftbuild.ops.registrations`: FlagGems' `("add.Tensor", add)` pairs, `lib.impl(...)` calls), then
the ops named exactly like an entry point or kernel (`named`: torch's aliases followed), then
`sftbuild.ops.shortlist(name, params, k)` over the hand-written and op_db ops, else a ranking here by
shared name words (kernel and entry-point names against op names). Before them all come the
package's own plain-torch references named like the record (`package_references`); a binding to one
is `how: package_reference` and carries what registers it again in validation (`package_reference`).

Hints: a positional parameter that neither has a default nor gets one from its own file (harvest's
`hint`) takes the literal default the record's package declares for that name elsewhere
(`tree_hints`), sent with the task as `hints`.
"""
from __future__ import annotations

import ast
import functools
import os
import re
from collections import Counter

from sftbuild import ops
from sftbuild.ops import package_refs, registrations
from sftbuild.bind.binders import BINDERS, Binder
from sftbuild.bind.tasks import TritonProbe

SHORTLIST = 8
SCALAR_VALUES = {"float": 0.5, "int": 2, "bool": False}  # a reference's scalar argument without a package default
FEATURE_NAMES = {"weight", "bias", "w", "b", "gamma", "beta"}  # a package reference's per-feature vectors
SCALAR_NAMES = {"scale", "inv_scale", "scale_factor", "temperature"}  # a package reference's one-element tensors
PROBE_DTYPES = ["float32", "float16"]
PROBE_SECONDS = 120
NOISE = {"kernel", "kernels", "fwd", "forward", "bwd", "backward", "triton", "func", "fn", "impl", "jit", "op",
         "ops", "liger", "fused", "fast", "naive", "compute", "apply", "function", "the", "v1", "v2", "tl",
         "launch", "run", "wrapper", "inner", "outer", "block", "tiled", "persistent", "autotune", "lib",
         "gems", "torch", "default", "grad"}


@BINDERS.register
class Probed(Binder):
    """Call the record's wrapper function or autograd Function on each shortlisted op's inputs and keep
    the op its outputs match over >= 3 shapes and 2 dtypes (Triton records with entry points)."""
    name = "probed"
    version = 3  # the package's own plain-torch references are candidates; a toolchain gap is named
    order = 80
    task_fn = "sftbuild.bind.probe:probe"

    def bind(self, record) -> dict | None:
        return None  # probing runs code, so it happens in a worker: plan -> probe -> accept

    def why_not(self, record) -> str:
        if record.language == "triton" and not (record.entry or {}).get("entry_points"):
            return "no function in the record launches its kernels (they are launched from another module)"
        return ""

    def plan(self, record, dtypes: list[str] | None = None, seconds: float = PROBE_SECONDS) -> TritonProbe | None:
        """The probe task for a Triton record with entry points; None when there is nothing to probe."""
        if record.language != "triton":
            return None
        entries = (record.entry or {}).get("entry_points") or []
        if not entries:
            return None
        prov = record.provenance or {}
        unfilled = {p["name"] for e in entries for p in e.get("params") or []
                    if p.get("kind") == "pos" and not p.get("has_default") and "hint" not in p}
        hints = tree_hints(prov.get("tree"), prov.get("path")) if unfilled else {}
        names = shortlist(record)
        refs = package_references(record, names)
        return TritonProbe(id=record.id, code=record.code, entry=record.entry, tree=prov.get("tree"),
                           path=prov.get("path"), shortlist=[r["name"] for r in refs] + names,
                           package_refs=refs, dtypes=dtypes or PROBE_DTYPES, shapes=3, time_limit=seconds,
                           hints={k: v for k, v in hints.items() if k in unfilled})

    def accept(self, record, result) -> dict | None:
        """The binding a probe result makes, or None (the result's `unbound` says why)."""
        if not isinstance(result, dict) or not result.get("binding"):
            return None
        b = dict(result["binding"])
        ev = result.get("evidence") or {}
        b["how"] = "package_reference" if b.get("package_reference") else self.name
        b["evidence"] = {"shapes": ev.get("shapes"), "dtypes": ev.get("dtypes"), "worst_error": ev.get("worst_error"),
                         "candidates_tried": len(ev.get("candidates_tried") or []), "seconds": ev.get("seconds")}
        return b


def package_references(record, names: list[str]) -> list[dict]:
    """The record's package's own plain-torch references named like it (sftbuild.ops.package_refs),
    each {name, module, func, like}: registered as an op inside the probe's worker, with the inputs of
    the first shortlisted op taking as many tensors as the reference requires (`like`), else tensors
    of one 2-D shape (a one-element tensor for a scale); where an op lends its inputs, the reference
    is a candidate again with those by-name shapes (`<name>.by_name`)."""
    entries = (record.entry or {}).get("entry_points") or []
    words_of = [*(record.entry or {}).get("kernels", []), *(e["qualname"].split(".")[0] for e in entries)]
    refs = package_refs.candidates((record.provenance or {}).get("tree"), words_of)
    hints = tree_hints((record.provenance or {}).get("tree"), (record.provenance or {}).get("path"))
    out = []
    for r in refs:
        scalars = r.get("scalars") or {}
        need = [p for p in r["required"] if p not in ("self", "cls", *scalars)]
        io = by_name_inputs(need, r.get("shapes") or {})
        # a reference whose own code names every axis of an input is shaped by name first
        named_axes = any("..." not in d for p, d in (r.get("shapes") or {}).items() if p in need)
        like = None if named_axes else next((n for n in names if _inputs(n) == len(need)), None)
        name = f"pkg.{r['module']}.{r['name']}"
        # a scalar argument takes the package's own default for its name, else a middling value of its type
        params = {p: hints[p] if type(hints.get(p)) is SCALAR_VALUES[t].__class__ else SCALAR_VALUES[t]
                  for p, t in scalars.items()}
        ref = {"module": r["module"], "func": r["name"], **({"params": params} if params else {})}
        out.append({"name": name, **ref, "like": like or io})
        if like:  # the borrowed op's shapes may not be the reference's (a per-row scale for a one-element one)
            out.append({"name": f"{name}.by_name", **ref, "like": io})
    return out


def by_name_inputs(need: list[str], shapes: dict[str, list[str]]) -> list[str]:
    """An io list for a package reference's tensor parameters: the axes its code names
    (`package_refs.read_shapes`), the leading axes of the first fully named one where only the last is
    named, a per-feature vector for a weight or bias, one element for a scale, else the first one's
    shape (2-D rows by cols where nothing is named)."""
    full = next((shapes[p] for p in need if "..." not in shapes.get(p, ["..."])), None) or ["rows", "cols"]

    def axes(p: str) -> list[str]:
        dims = shapes.get(p)
        if p.lower() in SCALAR_NAMES:
            return ["1"]
        if dims:
            return dims if "..." not in dims else full[:-1] + dims[-1:]
        return full[-1:] if p.lower() in FEATURE_NAMES else full
    return [f"{p}: [{', '.join(axes(p))}]" for p in need]


def _inputs(name: str) -> int:
    try:
        return len(ops.get(name).io.get("inputs") or [])
    except KeyError:
        return -1


def tree_hints(tree: str | None, path: str | None) -> dict:
    """Literal defaults the record's whole package declares, by parameter name (the most common value
    where they differ): what an entry whose own file gives a parameter no default is called with (a
    public wrapper elsewhere in the package passing `inplace=True` to a Function; `weight=None`, an
    optional tensor the probe may then leave out)."""
    if not tree or not path or not os.path.isdir(tree):
        return {}
    return _package_hints(os.path.join(tree, path.replace("\\", "/").split("/")[0]))


@functools.lru_cache(maxsize=8)
def _package_hints(top: str) -> dict:
    from sftbuild.parsing import default_hints

    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(top) for f in fs if f.endswith(".py")) \
        if os.path.isdir(top) else []
    seen: dict[str, Counter] = {}
    values: dict[str, dict] = {}
    for f in files[:2000]:
        try:
            with open(f, encoding="utf-8", errors="replace") as fh:
                hints = default_hints(ast.parse(fh.read()))
        except (SyntaxError, ValueError, OSError, RecursionError):
            continue
        for name, v in hints.items():
            seen.setdefault(name, Counter())[repr(v)] += 1
            values.setdefault(name, {})[repr(v)] = v
    return {name: values[name][c.most_common(1)[0][0]] for name, c in seen.items()}


def runs_kernels(entry: dict, kernels) -> str | None:
    """How an entry point runs any of `kernels`: "forward" (it launches one), "backward" (an autograd
    Function whose backward launches one: checked through gradients), else None."""
    kernels = set(kernels or ())
    if not kernels or set(entry.get("launches") or ()) & kernels:
        return "forward"
    if entry["kind"] == "autograd" and set((entry.get("backward") or {}).get("launches") or ()) & kernels:
        return "backward"
    return None


def words(name: str) -> set[str]:
    """`_rms_norm_forward_kernel`, `LigerRMSNormFunction.apply` -> {"rms", "norm"}."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name))
    return {w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w and w not in NOISE and not w.isdigit()}


def registered(record) -> list[str]:
    """The ops the record's package registers its entry points for (exact names, read from the
    package's registration table; empty without a package tree or a table)."""
    tree = (record.provenance or {}).get("tree")
    entries = (record.entry or {}).get("entry_points") or []
    if not tree or not entries:
        return []
    table = registrations.registered(tree)
    if not table:
        return []
    from sftbuild.ops import opdb  # torch's op catalogue: imported where a record needs it

    known = ops.all_ops(opdb=True)
    aliases = opdb.aliases()
    out: list[str] = []
    for e in entries:
        for aten in table.get(e["qualname"].split(".")[0], ()):
            out += [n for n in registrations.candidates(aten, known, aliases) if n not in out]
    return out


def shortlist(record, k: int = SHORTLIST) -> list[str]:
    """Candidate op names for a record, best first: the registered ones, then for a backward kernel
    run by an autograd Function the forward ops its Function's name suggests (it is checked through
    the gradients of a forward op), then the ranked ones."""
    exact = registered(record)
    exact += [n for n in named(record) if n not in exact]
    entries = (record.entry or {}).get("entry_points") or []
    kernels = (record.entry or {}).get("kernels")
    grad = [e for e in entries if runs_kernels(e, kernels) == "backward"]
    if grad:
        names = " ".join(e["qualname"].split(".")[0] for e in grad)
        params = sorted({p["name"] for e in grad for p in e["params"]})
        forward = [n for n in ops.shortlist(names, params, k, opdb=True) if "backward" not in n]
        exact += [n for n in forward if n not in exact]
    return exact + [n for n in ranked(record, k) if n not in exact]


def named(record) -> list[str]:
    """Ops whose torch name, or one of torch's aliases for it, is an entry point's or kernel's own name
    (an in-place `exp_` and a `_kernel` or `_func` suffix dropped): `arccosh` -> opdb.acosh."""
    entries = (record.entry or {}).get("entry_points") or []
    names = [e["qualname"].split(".")[0] for e in entries] + list((record.entry or {}).get("kernels") or [])
    bases = [re.sub(r"_(kernel|func)$", "", n.strip("_")).rstrip("_") for n in names]
    if not any(bases):
        return []
    from sftbuild.ops import opdb

    known, aliases = ops.all_ops(opdb=True), opdb.aliases()
    out: list[str] = []
    for base in dict.fromkeys(b for b in bases if b):
        out += [n for n in registrations.candidates(base, known, aliases) if n not in out]
    return out


def ranked(record, k: int = SHORTLIST) -> list[str]:
    """Candidate op names for a record by its kernel and entry-point names and parameters."""
    entries = (record.entry or {}).get("entry_points") or []
    names = [*(record.entry or {}).get("kernels", []), *(e["qualname"] for e in entries)]
    params = sorted({p["name"] for e in entries for p in e["params"]})
    try:
        found = ops.shortlist(" ".join(names), params, k, opdb=True)
        if found:
            return found
    except Exception:  # the registry's ranking is an optimisation; ours still works
        pass
    have = set().union(*(words(n) for n in names)) if names else set()
    scored = []
    for name in ops.all_ops():
        w = words(name)
        if not w:
            continue
        hit = len(w & have) / len(w)
        if hit > 0:
            scored.append((-hit, -len(w & have), len(name), name))
    return [s[-1] for s in sorted(scored)[:k]]
