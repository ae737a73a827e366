"""Probe a CUDA record through its host launcher: which op, if any, does it compute?

`probe(task)` is a task function (`sftbuild.bind.binders.launched.HostLauncher`'s): it runs only in a
sandboxed GPU worker. Invariants:
  * one build per record: the task's harness (the record's code, its launcher, and a C entry per
    dtype taking pointers, sizes and float scalars in the launcher's order) is compiled by the compile
    gate (cached by content), then loaded with ctypes; nothing is built per op or per mapping (a
    template launcher whose every instantiation does not compile is built once per dtype instead);
  * for each shortlisted op, the op's own inputs (special.trial_inputs) and float64 reference;
    mappings of tensors onto pointers and dimensions onto sizes are tried best named first
    (launched.mappings) on the first shape; one that matches is confirmed over at least 3 shapes at
    every dtype the launcher's pointer types allow, with the op's tolerance;
  * every written pointer is an output: the op's outputs are compared, the rest get scratch memory;
    inputs must come back unchanged, and unwritten outputs stay NaN and fail;
  * the answer is {"binding": {op, params, dtypes, harness: host_launcher, harness_args}, "evidence":
    {shapes, dtypes, worst_error, candidates_tried, candidates_rejected}} or {"unbound": reason, "evidence"}.
"""
from __future__ import annotations

import ctypes
import dataclasses
import math
import os
import re
import tempfile
import time

import torch

from sftbuild import ops
from sftbuild.ops import special
from sftbuild.bind.tasks import LauncherProbe
from sftbuild.trial_types import CompileTask
from sftbuild.bind.binders import COMPILE_CAUSES, launched
from sftbuild.trial import pyrun
from sftbuild.bind.probe import MAX_PROBE_NUMEL_GPU, probe_shapes
from sftbuild.trial.trials import load_file_harness

MIN_SHAPES = 3
ALIGNS = (4, 8)  # last-dimension multiples tried where a launcher leaves elements unwritten at the others
UNALIGNED = re.compile(r"NaN where|refused")
SCRATCH_MIN_BYTES = 1 << 20


def probe(task: LauncherProbe | dict) -> dict:
    task = LauncherProbe.of(task)
    start = time.monotonic()
    deadline = start + float(task.time_limit or launched.PROBE_SECONDS)
    if not on_gpu(task):
        return needs_gpu("a host launcher")
    fns, why, cause = _build(task)
    if not fns:
        return {"unbound": why, "cause": cause, "evidence": {}}
    return search(task.shortlist, lambda op: _try_op(fns, op, task, deadline), start, deadline,
                  "the launcher's outputs")


def on_gpu(task) -> bool:
    """Whether a CUDA probe can run here: its task is meant for the GPU and this process has one."""
    return (task.device or "cuda") == "cuda" and torch.cuda.is_available()


def needs_gpu(what: str) -> dict:
    """A CUDA probe's answer where it cannot run: unbound, for want of a GPU."""
    return {"unbound": f"probing {what} needs a GPU", "cause": "needs_gpu_to_probe", "evidence": {}}


def search(shortlist, attempt, start: float, deadline: float, what: str, extra: dict | None = None) -> dict:
    """A probe's search: each shortlisted op in turn, `attempt(op) -> (binding with its evidence, why
    not)`, until one matches or the time runs out; an op's exception is its rejection, not the probe's end."""
    extra = extra or {}
    tried, rejected = [], []
    for name in shortlist:
        if time.monotonic() > deadline:
            rejected.append({"op": name, "why": "the probe's time ran out"})
            break
        tried.append(name)
        try:
            found, why = attempt(ops.get(name))
        except KeyError as e:  # not in the registry
            found, why = None, str(e)[:200]
        except Exception as e:  # noqa: BLE001 - one op's failure
            found, why = None, f"{type(e).__name__}: {str(e)[:200]}"
        seen = {**extra, "candidates_tried": tried, "candidates_rejected": rejected,
                "seconds": round(time.monotonic() - start, 2)}
        if found:
            return {"binding": found, "evidence": {**found.pop("evidence"), **seen}}
        rejected.append({"op": name, "why": why[:300]})
    return {"cause": "no_op_matched", "unbound": f"no shortlisted op matched {what} ({len(tried)} tried: "
                       + "; ".join(f"{r['op']}: {r['why'][:80]}" for r in rejected[:4]) + ")",
            "evidence": {**extra, "candidates_tried": tried, "candidates_rejected": rejected,
                         "seconds": round(time.monotonic() - start, 2)}}


def _build(task: LauncherProbe) -> tuple[dict, str, str]:
    """{dtype: the harness's `sftbuild_raw_call_<dtype>`} for the dtypes whose instantiation compiles,
    why none did, and its cause code. One build of every dtype first; where it fails, one per dtype."""
    from sftbuild.trial.compile import compile_task

    major, minor = torch.cuda.get_device_capability()
    cache = os.environ.get("SFTBUILD_COMPILE_CACHE") or os.path.join(tempfile.gettempdir(), "sftbuild-probe-cache")
    base = CompileTask(id=task.id, code=task.code, include_sets=task.include_sets or [],
                       arch=f"sm_{major}{minor}", timeout=120, cache_dir=cache, headers=task.headers or {},
                       include_dirs=task.include_dirs or [])
    builds = [(task.dtypes, task.harness)] + [([d], src) for d, src in (task.harnesses or {}).items()]
    fns, why, cause = {}, "", ""
    for dtypes, src in builds:
        if fns:
            break
        res = compile_task(dataclasses.replace(base, harness=src))
        if not res.get("ok"):
            why = why or f"the launcher's harness did not compile ({res.get('reason')}): {res.get('where', '')}"[:400]
            cause = cause or COMPILE_CAUSES.get(res.get("reason"), "compile_error")
            continue
        try:  # lazily bound, as validation loads it: helpers the launcher never calls may name cuBLAS
            lib = load_file_harness(res["so"])
        except OSError as e:  # named as the harness, not by our build folder (a log scrubs that path away)
            why = why or f"the launcher's harness does not load: {str(e).replace(res['so'], 'harness.so')}"[:400]
            cause = cause or "toolchain"
            continue
        for d in dtypes:
            fns[d] = getattr(lib, f"sftbuild_raw_call_{d}")
            fns[d].restype = ctypes.c_int
    return fns, why, cause


def _try_op(fns, op, task, deadline) -> tuple[dict | None, str]:
    """The op's binding through the launcher, or why not; where the launcher left outputs unwritten or
    its assert refused the sizes, again on the op's shapes whose last dimension is a multiple of each
    of ALIGNS (DeepSpeed's float4 loads), which the binding then keeps as a constraint for validation."""
    found, why = _try_shapes(fns, op, task, deadline, probe_shapes(op, MIN_SHAPES, MAX_PROBE_NUMEL_GPU))
    for align in ALIGNS:
        if found or not UNALIGNED.search(why):
            break
        cons = {"multiple": {"-1": align}}
        pool = [s for s in op.shape_pool if ops.fits(s, cons)]
        if len(pool) < MIN_SHAPES:
            break
        found, why_aligned = _try_shapes(fns, op, task, deadline,
                                         probe_shapes(dataclasses.replace(op, shape_pool=pool), MIN_SHAPES,
                                                      MAX_PROBE_NUMEL_GPU))
        if found:
            found["constraints"] = cons
        else:
            why = f"{why}; at a last dimension a multiple of {align}: {why_aligned}"
    return found, why


def _try_shapes(fns, op, task, deadline, shapes) -> tuple[dict | None, str]:
    dtypes = [d for d in task.dtypes if d in op.dtypes and d in fns]
    dev = task.device or "cuda"
    if not dtypes:
        return None, "the op takes none of the launcher's dtypes"
    found = task.roles
    last = ""  # why the best-named mapping failed, the one most likely meant
    for dtype in dtypes:  # a launcher of the file's own float type (`floatX`) agrees at one of them
        params = dict(op.params)
        case = _case(op, shapes[0], dtype, 0, params, dev)
        if isinstance(case, str):
            return None, case
        meta_in = [{"name": n, "shape": list(t.shape), "int": not t.is_floating_point()}
                   for n, t in zip(_names(op), case[0])]
        meta_out = [{"shape": list(r.shape)} for r in case[1]]
        for mapping in launched.mappings(found, meta_in, meta_out, params):
            if time.monotonic() > deadline:
                return None, "the probe's time ran out"
            ok, err, why = _trial(fns[dtype], op, mapping, shapes[0], dtype, 0, params, dev, case)
            if not ok:
                last = last or why
                continue
            worst, passed = err, []
            for s, shape in enumerate(shapes):
                good = all(_trial(fns[dtype], op, mapping, shape, dtype, seed, dict(op.params), dev)[0]
                           for seed in (s, s + 7))
                if not good:
                    break
                passed.append(list(shape))
            if len(passed) < MIN_SHAPES:
                last = f"the mapping held at {len(passed)} of {len(shapes)} shapes"
                continue
            agreed = [d for d in dtypes if d == dtype or all(
                _trial(fns[d], op, mapping, shape, d, 1, dict(op.params), dev)[0] for shape in shapes)]
            return {"kind": "op", "op": op.name, "params": {k: v for k, v in params.items() if k in op.params},
                    "dtypes": agreed, "harness": "host_launcher", "harness_args": mapping,
                    "evidence": {"shapes": passed, "dtypes": agreed, "worst_error": worst}}, ""
    return None, last or "no mapping of its tensors fits the launcher"


def _names(op) -> list[str]:
    return [s.split(":")[0].strip() for s in op.io.get("inputs") or []]


def _inputs(op, shape, dtype, seed, params, dev="cuda") -> list:
    drawn = [t.to(dev).contiguous() for t in special.trial_inputs(op, shape, dtype, seed, params)]
    most = max((t.numel() for t in drawn), default=1)
    return [_padded(t, most) for t in drawn]


def _padded(t: torch.Tensor, most: int) -> torch.Tensor:
    """`t` at the start of a buffer of PADDING times `most` elements of 8 bytes (`most`: the trial's
    largest tensor): a wrong size mapping (whose sizes `launched.mappings` keeps within PADDING times
    the largest tensor), through any pointer type, reads or writes past the tensor into memory of
    ours, not past the allocation (a CUDA fault would end every later trial)."""
    nbytes = 8 * (launched.PADDING * max(most, t.numel()) + 256)
    room = torch.zeros(nbytes // t.element_size(), dtype=t.dtype, device=t.device)
    view = room[:t.numel()].view(t.shape)
    view.copy_(t)
    return view


def _case(op, shape, dtype, seed, params, dev) -> tuple | str:
    """(inputs, float64 references, native references) of one trial, or why the reference fails."""
    try:
        inputs = _inputs(op, shape, dtype, seed, params, dev)
        return inputs, ops.as_outputs(op.run_reference(ops.upcast(inputs), params)), \
            ops.as_outputs(op.run_reference(inputs, params))
    except Exception as e:
        return f"the reference fails: {type(e).__name__}: {str(e)[:120]}"


def _trial(fn, op, mapping, shape, dtype, seed, params, dev="cuda", case=None) -> tuple[bool, float, str]:
    """One call of the launcher on the op's inputs at `shape` (or on `case`, drawn once for the
    mappings tried on it): (agrees, worst error, why not). `dev` is cuda but where a test emulates the
    launcher on the CPU."""
    case = case or _case(op, shape, dtype, seed, params, dev)
    if isinstance(case, str):
        return False, 0.0, case
    inputs, refs64, natives = case
    most = max(t.numel() for t in [*inputs, *natives])
    outs = [_padded(torch.full_like(r, float("nan")) if r.is_floating_point() else torch.zeros_like(r), most)
            for r in natives]
    tensors = outs + inputs
    before = [t.clone() for t in inputs]
    most = max(t.numel() * t.element_size() for t in tensors)
    size = max(SCRATCH_MIN_BYTES, launched.PADDING * most)
    scratch = [torch.zeros(size, dtype=torch.uint8, device=dev) for p in mapping["ptrs"] if p == "scratch"]
    free = iter(scratch)
    ptrs = [next(free).data_ptr() if p == "scratch" else tensors[int(p.split(":")[1])].data_ptr()
            for p in mapping["ptrs"]]
    try:
        ints = [launched.size_value(e, tensors) for e in mapping["ints"]]
    except (IndexError, ValueError):
        return False, 0.0, "a size names a dimension the op's tensors lack"
    parr = (ctypes.c_void_p * max(1, len(ptrs)))(*ptrs)
    iarr = (ctypes.c_longlong * max(1, len(ints)))(*ints)
    farr = (ctypes.c_double * max(1, len(mapping["floats"])))(*mapping["floats"])
    code = fn(parr, iarr, farr)
    if dev == "cuda":
        torch.cuda.synchronize()
    changed = any(not torch.equal(a, b) for a, b in zip(before, inputs))
    for a, b in zip(inputs, before):  # the next mapping tried on this case gets the inputs unchanged
        a.copy_(b)
    if code == launched.REFUSED:
        return False, 0.0, f"the launcher's own assert refused sizes {ints}"
    if code == launched.DIVIDED_BY_ZERO:
        return False, 0.0, f"the launcher divided by zero at sizes {ints}"
    if code != 0:
        return False, 0.0, f"the launch failed (CUDA error {code})"
    if changed:
        return False, 0.0, "the launcher changed an input"
    ok, stats = pyrun.compare_outputs(outs, refs64, natives, dtype, op.tolerance)
    err = max([stats.get(k) or 0.0 for k in ("norm_rel", "max_rel")] + [0.0])
    if not ok or not math.isfinite(err):
        return False, err, f"worst error {err:.3g}: {stats.get('why', '')}"[:200]
    return True, err, ""
