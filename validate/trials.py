"""Correctness and timing trials. Runs only inside a GPU worker process.

For one bound CUDA record: load its harness .so, then for every check (op)
and every drawn (shape, dtype, seed):
  * inputs are made on the host from a seeded generator and copied to the GPU;
  * outputs are fresh allocations poisoned with NaN, so unwritten elements show;
  * the candidate runs, then the reference, then the candidate again on new
    values written into the same buffers (no caching by pointer);
  * inputs must be unchanged; the result is compared with a float64 reference
    and with torch's own kernel at that dtype (see sftbuild.ops.tolerance).
Timing uses CUDA events with the L2 flushed between runs.
"""
from __future__ import annotations

import ctypes
import random
import statistics

import torch

from sftbuild import ops
from sftbuild.ops.catalog import TORCH_DTYPES
from sftbuild.validate import harness as H

L2_FLUSH_BYTES = 256 << 20


def run_record(task: dict) -> dict:
    """Task: {id, sos (one .so per check), binding, entry, dtypes, shapes, seeds, timing, warmup, runs}. Returns a verdict dict."""
    from sftbuild.validate import guards

    guards.set_strict()  # the reference runs in full fp32
    try:
        return _run(task)
    except torch.cuda.OutOfMemoryError as e:
        return {"status": "dropped", "reason": "oom", "detail": str(e)[:500], "recycle": True}
    except RuntimeError as e:  # CUDA errors are sticky: this worker must be replaced
        msg = str(e)
        reason = "illegal_address" if "illegal" in msg else "cuda_error"
        return {"status": "dropped", "reason": reason, "detail": msg[:500], "recycle": True}


def _run(task: dict) -> dict:
    dev = torch.device("cuda")
    tried, worst, timing = [], {}, {}
    for i, check in enumerate(H.checks(task["binding"])):
        op = ops.get(check["op"])
        contract = H.CONTRACTS[H.contract_for(check.get("harness") or "", op.launch)]
        lib = ctypes.CDLL(task["sos"][i])
        cons = check.get("constraints") or {}
        pool = [s for s in op.shape_pool if _fits(s, cons)]
        rng = random.Random(f"{task['id']}:{check['op']}")
        shapes = rng.sample(pool, min(task["shapes"], len(pool)))
        dtypes = [d for d in op.dtypes if d in task["dtypes"]]
        if not shapes or not dtypes:  # nothing to try is never a pass
            return {"status": "dropped", "reason": "unbound",
                    "detail": f"no shape or dtype of op {op.name} fits the binding", "trials": tried}
        for shape in shapes:
            for dtype in dtypes:
                for seed in range(task["seeds"]):
                    ok, stats = _trial(lib, op, contract, check, shape, dtype, seed, dev)
                    tried.append({"op": op.name, "shape": list(shape), "dtype": dtype, "seed": seed,
                                  "ok": ok, **{k: stats.get(k) for k in ("max_abs", "max_rel", "norm_rel")}})
                    for k in ("max_abs", "max_rel", "norm_rel"):
                        if stats.get(k) is not None:
                            worst[k] = max(worst.get(k, 0.0), stats[k])
                    if not ok:
                        return {"status": "dropped", "reason": stats.get("reason", "incorrect"),
                                "detail": stats.get("why", ""), "trials": tried, "errors": worst}
        if task.get("timing"):
            shape = max(pool, key=lambda s: _numel(s))
            timing[op.name] = _time(lib, op, contract, check, shape, dtypes[0], dev,
                                    task["warmup"], task["runs"])
    payload = {"status": "ok", "reason": None, "trials": tried, "errors": worst, "timing": timing}
    if timing:
        payload["speedup"] = min(t["speedup"] for t in timing.values())
    return payload


def _fits(shape, cons) -> bool:
    if "max_cols" in cons and shape[-1] > cons["max_cols"]:
        return False
    if "max_numel" in cons and _numel(shape) > cons["max_numel"]:
        return False
    return True


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _inputs(op, shape, dtype, seed, dev, params):
    gen = torch.Generator().manual_seed(seed)
    return [t.to(dev).contiguous() for t in op.make_inputs(shape, dtype, "contiguous", gen, params)]


def _launch(lib, dtype, contract, inputs, outputs) -> int:
    ptrs, ints = contract(inputs, outputs)
    fn = getattr(lib, f"sftbuild_launch_{dtype}")
    fn.restype = ctypes.c_int
    parr = (ctypes.c_void_p * len(ptrs))(*ptrs)
    iarr = (ctypes.c_longlong * max(len(ints), 1))(*ints)
    return fn(parr, iarr, len(ints), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))


def _trial(lib, op, contract, check, shape, dtype, seed, dev):
    params = {**op.params, **(check.get("params") or {})}
    inputs = _inputs(op, shape, dtype, seed, dev, params)
    before = [t.clone() for t in inputs]
    ref_native = op.run_reference(inputs, params)
    outputs = [torch.full_like(ref_native, float("nan"))]
    code = _launch(lib, dtype, contract, inputs, outputs)
    torch.cuda.synchronize()
    if code != 0:
        return False, {"reason": "launch_failed" if code == -1 else "cuda_error",
                       "why": f"harness returned {code} for shape {shape}"}
    for a, b in zip(inputs, before):
        if not torch.equal(a, b):
            return False, {"reason": "cheat", "why": "the kernel modified its input"}
    ref64 = op.run_reference([t.double() for t in inputs], params)
    ok, stats = ops.compare(outputs[0], ref64, dtype, op.tolerance, native=ref_native)
    if not ok:
        return False, {**stats, "reason": "incorrect"}
    # new values in the same buffers must give new results
    gen = torch.Generator().manual_seed(seed + 1000)
    fresh = op.make_inputs(shape, dtype, "contiguous", gen, params)
    for t, f in zip(inputs, fresh):
        t.copy_(f.to(dev))
    outputs[0].fill_(float("nan"))
    if _launch(lib, dtype, contract, inputs, outputs) != 0:
        return False, {"reason": "cuda_error", "why": "second launch failed"}
    torch.cuda.synchronize()
    ref64 = op.run_reference([t.double() for t in inputs], params)
    ok2, stats2 = ops.compare(outputs[0], ref64, dtype, op.tolerance,
                              native=op.run_reference(inputs, params))
    if not ok2:
        return False, {**stats2, "reason": "incorrect", "why": "stale result on new input values: "
                       + stats2.get("why", "")}
    return True, stats


def _time(lib, op, contract, check, shape, dtype, dev, warmup, runs) -> dict:
    params = {**op.params, **(check.get("params") or {})}
    inputs = _inputs(op, shape, dtype, 0, dev, params)
    out = [torch.empty_like(op.run_reference(inputs, params))]
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=dev)
    cand = _events(lambda: _launch(lib, dtype, contract, inputs, out), flush, warmup, runs)
    base = _events(lambda: op.run_reference(inputs, params), flush, warmup, runs)
    return {"shape": list(shape), "dtype": dtype, "candidate_ms": cand, "eager_ms": base,
            "speedup": base["median"] / cand["median"] if cand["median"] > 0 else 0.0}


def _events(fn, flush, warmup, runs) -> dict:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return {"median": statistics.median(times), "p10": times[len(times) // 10],
            "p90": times[(9 * len(times)) // 10], "runs": runs}
