"""Probe a CUDA record through its extension function: which op, if any, does it compute?

`probe(task)` is a task function (`sftbuild.bind.binders.extension.ExtensionFunction`'s): it runs only
in a sandboxed GPU worker. Invariants:
  * one build per record: the record's code and its function, with a PYBIND11_MODULE exposing the
    function, through the validate stage's extension build (`extension.build`: the lean torch
    header, a shared precompiled pybind unit, cached by content); nothing is built per op;
  * for each shortlisted op, the op's own inputs (special.trial_inputs) and float64 reference; the
    ways to call it (`extension.arguments`: tensors by name first, scalars from the op's parameters,
    flags false then true) are tried on the first shape; one that matches is confirmed over at least
    3 shapes at every dtype the function dispatches on, with the op's tolerance;
  * returned tensors are the op's outputs in order; a function returning nothing writes the output
    tensors it is given (NaN-filled first: an unwritten one fails); inputs must come back unchanged;
  * the answer is {"binding": {op, params, dtypes, harness: extension_function, harness_args:
    {args}}, "evidence": {shapes, dtypes, worst_error, dispatch, exposed, candidates_tried,
    candidates_rejected}} or {"unbound": reason, "evidence"}.
"""
from __future__ import annotations

import hashlib
import math
import os
import tempfile
import time
from pathlib import Path

import torch

from sftbuild import ops
from sftbuild.ops import special
from sftbuild.bind.binders import extension as ext
from sftbuild.trial import pyrun
from sftbuild.bind.binders import COMPILE_CAUSES
from sftbuild.bind.launcher_probe import MIN_SHAPES, needs_gpu, on_gpu, search
from sftbuild.bind.tasks import ExtensionProbe
from sftbuild.bind.probe import MAX_PROBE_NUMEL, MAX_PROBE_NUMEL_GPU, probe_shapes


def probe(task: ExtensionProbe | dict) -> dict:
    task = ExtensionProbe.of(task)
    start = time.monotonic()
    deadline = start + float(task.time_limit or ext.PROBE_SECONDS)
    if not on_gpu(task):
        return needs_gpu("an extension function")
    fn, why, cause = build(task)
    if fn is None:
        return {"unbound": why, "cause": cause, "evidence": {"seconds": round(time.monotonic() - start, 2)}}
    return run_probe(fn, task, start, deadline)


def run_probe(fn, task: ExtensionProbe | dict, start: float, deadline: float, dev: str = "cuda") -> dict:
    """The probe's search over the shortlist with `fn` the built function (a test may pass a Python
    stand-in and `dev` cpu)."""
    task = ExtensionProbe.of(task)
    extra = {k: getattr(task, k) for k in ("dispatch", "exposed") if getattr(task, k)}
    return search(task.shortlist, lambda op: _try_op(fn, op, task, deadline, dev), start, deadline,
                  "the extension function's outputs", extra)


def build(task: ExtensionProbe):
    """(the module's function, "", "") or (None, why the build failed, its cause code)."""
    from sftbuild.trial import extension

    cache = os.environ.get("SFTBUILD_COMPILE_CACHE") or os.path.join(tempfile.gettempdir(), "sftbuild-probe-cache")
    dirs = []
    if task.headers:  # the record's tree, by content, the kernel's own folder first
        tree = Path(cache) / "ext-trees" / hashlib.sha256(repr(sorted(task.headers.items())).encode()).hexdigest()[:16]
        for rel, text in task.headers.items():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / rel).write_text(text, encoding="utf-8")
        dirs = [str(tree / d) for d in task.include_dirs or ["."]]
    name = "sftbuild_ext_" + hashlib.sha256((task.code + task.source).encode()).hexdigest()[:12]
    res = extension.build(name, task.declaration, [task.code, task.source], [task.function], cache,
                          timeout=180, include_dirs=dirs)
    if not res.get("ok"):
        log = (res.get("log") or "").strip().splitlines()
        first = next((line for line in log if "error" in line), log[0] if log else "")
        return (None, f"the extension function's module did not build ({res.get('reason')}): {first}"[:400],
                COMPILE_CAUSES.get(res.get("reason"), "compile_error"))
    try:
        return getattr(extension.load(name, res["so"]), task.function), "", ""
    except Exception as e:  # a module that builds yet does not load (an undefined symbol)
        return None, f"the extension function's module did not load: {type(e).__name__}: {str(e)[:200]}", "toolchain"


def _try_op(fn, op, task, deadline, dev) -> tuple[dict | None, str]:
    dtypes = [d for d in task.dtypes if d in op.dtypes]
    if not dtypes:
        return None, "the op takes none of the function's dtypes"
    shapes = probe_shapes(op, MIN_SHAPES, MAX_PROBE_NUMEL_GPU if dev == "cuda" else MAX_PROBE_NUMEL)
    params = dict(op.params)
    case = _case(op, shapes[0], dtypes[0], 0, params, dev)
    if isinstance(case, str):
        return None, case
    meta = [{"name": n, "shape": list(t.shape)} for n, t in zip(_names(op), case[0])]
    last = ""
    for args in ext.arguments(task.roles, meta, len(case[1]), params):
        if time.monotonic() > deadline:
            return None, "the probe's time ran out"
        ok, worst, why = _trial(fn, op, task.roles, args, shapes[0], dtypes[0], 0, params, dev, case)
        if not ok:
            last = last or why
            continue
        passed = []
        for s, shape in enumerate(shapes):
            if not all(_trial(fn, op, task.roles, args, shape, dtypes[0], seed, params, dev)[0]
                       for seed in (s, s + 7)):
                break
            passed.append(list(shape))
        if len(passed) < MIN_SHAPES:
            last = f"the call held at {len(passed)} of {len(shapes)} shapes"
            continue
        agreed, errs = [dtypes[0]], [worst]
        for d in dtypes[1:]:
            trials = [_trial(fn, op, task.roles, args, shape, d, 1, params, dev) for shape in shapes]
            if all(t[0] for t in trials):
                agreed.append(d)
                errs += [t[1] for t in trials]
        return {"kind": "op", "op": op.name, "params": params, "dtypes": agreed,
                "harness": "extension_function", "harness_args": {"args": args},
                "evidence": {"shapes": passed, "dtypes": agreed, "worst_error": max(errs)}}, ""
    return None, last or "no way of calling it fits the op's tensors and parameters"


def _names(op) -> list[str]:
    return [s.split(":")[0].strip() for s in op.io.get("inputs") or []]


def _case(op, shape, dtype, seed, params, dev) -> tuple | str:
    """(inputs, float64 references, native references) of one trial, or why the reference fails."""
    try:
        inputs = [t.to(dev).contiguous() for t in special.trial_inputs(op, shape, dtype, seed, params)]
        return inputs, ops.as_outputs(op.run_reference(ops.upcast(inputs), params)), \
            ops.as_outputs(op.run_reference(inputs, params))
    except Exception as e:
        return f"the reference fails: {type(e).__name__}: {str(e)[:120]}"


def _trial(fn, op, found, args, shape, dtype, seed, params, dev, case=None) -> tuple[bool, float, str]:
    """One call of the function on the op's inputs at `shape`: (agrees, worst error, why not)."""
    case = case or _case(op, shape, dtype, seed, params, dev)
    if isinstance(case, str):
        return False, 0.0, case
    inputs, refs64, natives = case
    outs = [torch.full_like(r, float("nan")) if r.is_floating_point() else torch.zeros_like(r) for r in natives]
    tensors = outs + inputs
    before = [t.clone() for t in inputs]
    call, returned = [], {}
    for r, a in zip(found, args):
        kind, _, v = a.partition(":")
        if r["name"].startswith("return:"):
            if kind == "t":
                returned[int(r["name"].split(":")[1])] = int(v)
        elif kind == "t":
            call.append(tensors[int(v)])
        elif kind == "scratch":
            call.append(torch.zeros_like(inputs[0]))
        else:
            call.append({"float": float, "int": int, "flag": lambda x: x == "1", "none": lambda x: None}[kind](v))
    try:
        got = fn(*call)
        if dev == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # TORCH_CHECK and friends: this call is not the function's
        return False, 0.0, f"the call raised {type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}"
    finally:
        changed = any(not torch.equal(a, b) for a, b in zip(before, inputs))
        for a, b in zip(inputs, before):
            a.copy_(b)
    if changed:
        return False, 0.0, "the function changed an input"
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    for k, t in returned.items():
        if k >= len(got) or not isinstance(got[k], torch.Tensor) or got[k].numel() != tensors[t].numel() \
                or got[k].dtype != tensors[t].dtype:
            return False, 0.0, f"returned tensor {k} is not output {t} ({list(tensors[t].shape)}, {dtype})"
        tensors[t].copy_(got[k].reshape(tensors[t].shape))
    ok, stats = pyrun.compare_outputs(outs, refs64, natives, dtype, op.tolerance)
    err = max([stats.get(k) or 0.0 for k in ("norm_rel", "max_rel")] + [0.0])
    if not ok or not math.isfinite(err):
        return False, err, f"worst error {err:.3g}: {stats.get('why', '')}"[:200]
    return True, err, ""
