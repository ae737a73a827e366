"""Bindings found by probing a CUDA record's extension function: a host function taking tensors.

Invariants:
  * `bind` answers None: only agreement on a GPU makes a binding (plan -> probe -> accept).
  * A function is probed when harvest found one that launches the record's kernel and no other
    (`entry["launcher"]`) and takes `torch::Tensor`/`at::Tensor`; each parameter has a role
    (`roles`): a tensor (an input, or, in a function returning nothing, an output where its kernel
    writes it or its name says so), a float or int scalar (the op's parameter of its name), a flag
    (tried false, then true), an optional tensor (passed absent). A template over more than one type,
    or a parameter of another type, is named in `why_not`.
  * Where the record's launcher is raw, an extension function of another file that calls it (harvest's
    `entry["extensions"]`, a binding `.cpp`) is the entry point: built on the launcher's code and that
    file's includes (`function_of`). A template over one type, or a function inside namespaces, is
    called through a global wrapper (at the dtype of its first tensor, for a template).
  * The module that exposes it (`entry["launcher"]["exposed"]`: the file's PYBIND11_MODULE or
    TORCH_LIBRARY* definition) is evidence; the probe builds a minimal PYBIND11_MODULE of its own
    around the function and the record's code (`sftbuild.trial.extension.build`, once per record),
    so the file's other functions never need to compile.
  * Dtypes: those its AT_DISPATCH_* macro names (float32 always; float16 and bfloat16 where named),
    every float dtype for a project's own dispatch macro (the probe keeps those that agree); a
    function with no dispatch is float-only, and its evidence says so (`dispatch`).
  * The shortlist is the host launcher's (`launched.shortlist`): names, the registry's ranking, data flow.
  * The binding's harness is `extension_function` (`harness_args`: each parameter's value, `call_args`).
"""
from __future__ import annotations

import re

from sftbuild.bind.binders import BINDERS, Binder
from sftbuild.bind.binders import launched
from sftbuild.bind.tasks import ExtensionProbe
from sftbuild.trial.launchers import (  # noqa: F401  (the probe's contract, shared with the harness)
    TENSOR, function_call_args as call_args, function_head, function_of, function_roles, plain, returns, torch_work,
    unprobeable)

PROBE_SECONDS = 240  # the module's build is most of it
DISPATCH = re.compile(r"\b\w*DISPATCH\w*\s*\(")  # AT_DISPATCH_*, and a project's own (VLLM_DISPATCH_FLOATING_TYPES)
SCALAR_ALIASES = {"epsilon": "eps", "variance_epsilon": "eps", "negative_slope": "negative_slope"}


@BINDERS.register
class ExtensionFunction(Binder):
    """Build the record's extension function into a module, call it on each shortlisted op's inputs
    and keep the op its outputs match over >= 3 shapes and every dtype it dispatches on."""
    name = "extension_function"
    version = 1
    order = 86
    languages = ("cuda",)
    task_fn = "sftbuild.bind.extension_probe:probe"

    def why_not(self, record) -> str:
        fn = function_of(record)
        if not fn:
            return "no host function taking tensors launches this kernel alone"
        return unprobeable(fn) or ""

    def plan(self, record, seconds: float = PROBE_SECONDS) -> ExtensionProbe | None:
        fn = function_of(record)
        if record.language != "cuda" or not fn or unprobeable(fn):
            return None
        found = roles(fn, record)
        candidates = launched.shortlist(record, found)
        if not candidates:
            return None
        entry = record.entry
        return ExtensionProbe(
            id=record.id, code=record.code, function=fn["name"], declaration=declaration(fn), source=fn["code"],
            roles=found, returns=returns(fn)[1], shortlist=candidates,
            dtypes=fn.get("dtypes") or dtypes_of(record.code + fn["code"]),
            dispatch=dispatch(record.code + fn["code"]) if not fn.get("wraps") else "its template's instances",
            exposed=fn.get("exposed"), shapes=3, time_limit=seconds,
            headers=entry.get("headers") or {}, include_dirs=entry.get("include_dirs") or [])

    def accept(self, record, result) -> dict | None:
        if not isinstance(result, dict) or not result.get("binding"):
            return None
        ev = result.get("evidence") or {}
        return {**result["binding"], "how": "probed",
                "evidence": {k: ev.get(k) for k in ("shapes", "dtypes", "worst_error", "candidates_tried",
                                                    "candidates_rejected", "dispatch", "exposed", "seconds")
                             if ev.get(k) is not None}}


def roles(fn: dict, record=None) -> list[dict]:
    """The function's parameter roles (sftbuild.trial.launchers.function_roles), with the tensors its kernel
    writes read from `launched.written`'s data flow through `t.data_ptr<T>()` where `record` is given
    and the function is the record's own (another file's function names no pointer of the launcher)."""
    writes = None
    if record is not None and not returns(fn)[1] and not fn.get("path"):
        try:
            writes = launched.written(_as_raw(record))
        except (KeyError, TypeError):
            writes = None
    return function_roles(fn, writes)


def _as_raw(record):
    """The record with each `t.data_ptr<T>()` in its launcher read as the pointer `t`, so the host
    launcher's data flow (`launched.written`) names the tensors the kernel writes."""
    import dataclasses

    fn = record.entry["launcher"]
    code = re.sub(r"\b(\w+)\s*\.\s*(?:data_ptr|data|mutable_data_ptr|const_data_ptr)\s*(?:<[^<>()]*>)?\s*\(\s*\)",
                  r"\1", fn["code"])
    params = [f"float* {p['name']}" if p["type"] == "Tensor" else "int x" for p in
              [{"type": "Tensor" if TENSOR.match(plain(d)) else "", "name": plain(d).split()[-1]}
               for d in fn["params"]]]
    return dataclasses.replace(record, entry={**record.entry, "launcher": {**fn, "code": code, "params": params}})


def dispatch(code: str) -> str:
    """The dispatch macro the code dispatches with, or 'float only: no AT_DISPATCH' where none."""
    m = DISPATCH.search(code)
    return m.group(0).rstrip("( ") if m else "float only: no AT_DISPATCH"


def dtypes_of(code: str) -> list[str]:
    """float32, and float16/bfloat16 where the code's dtype dispatch names them; each of them for a
    dispatch macro of the project's own, defined out of sight (the probe keeps the dtypes that agree)."""
    m = DISPATCH.search(code)
    if not m:
        return ["float32"]
    if not m.group(0).startswith("AT_DISPATCH"):
        return ["float32", "float16", "bfloat16"]
    out = ["float32"]
    if re.search(r"AT_DISPATCH_\w*HALF|\bHalf\b", code):
        out.append("float16")
    if re.search(r"AT_DISPATCH_\w*BFLOAT16|\bBFloat16\b", code):
        out.append("bfloat16")
    return out


def declaration(fn: dict) -> str:
    """The function's declaration (its head, default values dropped), for the module's translation unit."""
    head = function_head(fn)
    head = re.sub(r"\s*=\s*[^,()]+(?=[,)])", "", head)  # defaults belong to the definition's unit
    return re.sub(r"^\s*(?:static|inline)\s+", "", " ".join(head.split())) + ";"


def scalar(name: str, params: dict):
    """The op's parameter a scalar argument named `name` takes (`epsilon` takes `eps`), or None."""
    for key in (name, SCALAR_ALIASES.get(name.lower(), ""), name.lower()):
        if key in params:
            return params[key]
    return None


def arguments(found: list[dict], inputs: list[dict], n_outputs: int, params: dict):
    """Ways to call the function with an op's tensors, best named first: lists, one per parameter, of
    "t:k" (the op's k-th tensor, outputs then inputs, the `tensors` contract's order), "float:v",
    "int:v" or "flag:0|1"; then "return:k" slots say which output each returned tensor is."""
    import itertools

    ins = [r for r in found if r["role"] == "in"]
    outs = [r for r in found if r["role"] == "out"]
    if len(ins) != len(inputs) or len(outs) < n_outputs:
        return
    scalars = []
    for r in found:
        if r["role"] in ("float", "int"):
            v = scalar(r["name"], params)
            if v is None:
                return
            scalars.append([f"{r['role']}:{float(v) if r['role'] == 'float' else int(v)!r}"])
        elif r["role"] == "flag":
            scalars.append(["flag:0", "flag:1"])
        elif r["role"] == "absent":
            scalars.append(["none:"])
    out_order = sorted(range(len(outs)), key=lambda i: (not launched.OUT_NAMES.match(outs[i]["name"]), i))
    out_of = {id(outs[i]): f"t:{n}" if n < n_outputs else "scratch" for n, i in enumerate(out_order)}
    for perm in launched._input_orders(ins, inputs):
        in_of = {id(r): f"t:{n_outputs + j}" for r, j in zip(ins, perm)}
        for values in itertools.product(*scalars):
            it = iter(values)
            yield [in_of[id(r)] if r["role"] == "in" else out_of[id(r)] if r["role"] == "out" else next(it)
                   for r in found]
