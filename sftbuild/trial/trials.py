"""Correctness and timing trials. Runs only inside a GPU worker process.

A record bound to its file's own CPU reference (`how: file_reference`) is the loop's
`FileReference` adapter instead (`run_file_reference`, at the end of this module), with the
same run-time checks.

For one bound CUDA record, every check (op) is an adapter (`HarnessOp`) of the one trial loop
(sftbuild.trial.loop), which runs every drawn (shape, dtype, seed), tallies and times:
  * shapes: the drawn ones plus one grown past the fixed-grid caps (sftbuild.trial.sizes);
  * inputs are made on the host from a seeded generator and copied to the GPU, each order's in
    a value class (sftbuild.ops.values) where it is well-posed for the op at the dtype;
  * outputs are fresh allocations, one per reference result, poisoned with NaN (integers
    with their minimum), so unwritten elements show; inputs an op updates in place
    (`mutates`) are cloned for the kernel and the clones are compared instead;
  * every tensor the kernel gets sits inside guard regions (sftbuild.trial.fences): a
    changed guard, or a result that depends on the guards' contents, is `out_of_bounds`;
  * each launch must finish within a bound from the reference's time (sftbuild.trial.deadline);
  * the candidate runs, then the reference, then the candidate again on new
    values written into the same buffers (no caching by pointer);
  * after each launch the run-time checks (sftbuild.trial.checks) judge what it left:
    inputs unchanged (except `mutates`), outputs real and of the reference's types; each
    result is compared with a float64 reference and with torch's own kernel at that dtype
    (see sftbuild.ops.tolerance); index outputs are compared by the values of x they pick,
    since ties allow several answers; the checks then judge whether the results moved
    with the inputs (a degenerate trial, or one cached by pointer: `loop.second_order`) and
    note degenerate references in the flags.
Timing (sftbuild.trial.timing) uses CUDA events with the L2 flushed between runs. The
process is snapshotted before the harness loads (sftbuild.trial.pristine): a harness that
changed torch or the process state is a cheat, and one that left anything changed gets a fresh
worker (`recycle`).
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import os
import random

import torch

from sftbuild import ops
from sftbuild.trial_types import TrialTask
from sftbuild.ops import special, values
from sftbuild.trial import checks as C
from sftbuild.trial import deadline, fences, pristine, sizes
from sftbuild.trial import harness as H
from sftbuild.trial import loop, timing
from sftbuild.trial.checks.input_independent import UNINFORMATIVE
from sftbuild.trial.tally import fold_worst


def run_record(task: TrialTask | dict) -> dict:
    """A CUDA record's trials (the task's sos: one .so per check). Returns a verdict dict."""
    from sftbuild.trial import guards

    task = TrialTask.of(task)
    guards.set_strict()  # the reference runs in full fp32
    # torch's first-use patches (Dynamo's, which the profiler or a trial may import) are made before
    # the snapshot, as for Python candidates: a worker whose first sample is a harness would otherwise
    # see Dynamo's import as the harness's change to the process
    pristine.warm()
    world = pristine.Pristine()
    return _untouched(_guarded_run(task), world)


def _guarded_run(task: TrialTask) -> dict:
    try:
        return _run(task)
    except torch.cuda.OutOfMemoryError as e:
        return {"status": "dropped", "reason": "oom", **loop.fault_detail(e), "recycle": True}
    except RuntimeError as e:  # CUDA errors are sticky: this worker must be replaced
        reason = "illegal_address" if "illegal" in str(e) else "cuda_error"
        # the detail starts with the sizes and block size of the trial that raised it (loop.fault_detail)
        return {"status": "dropped", "reason": reason, **loop.fault_detail(e), "recycle": True}
    except Exception as e:  # a binding whose harness contract does not fit the op: one verdict, not the run
        import traceback

        return {"status": "dropped", "reason": "harness_error",
                **loop.fault_detail(e, 2000, traceback.format_exc()[-1800:]), "recycle": True}


def _untouched(verdict: dict, world) -> dict:
    """A harness whose code changed the process (torch rebound, flags, dtype, stream, device) is a
    cheat; one that left anything changed (a torch.library override too) gets a fresh worker."""
    left = world.dirty()
    if not left:
        return verdict
    out = {**verdict, "recycle": True, "left_behind": left[:8]}
    changed = world.changes()
    if changed:
        out.update(status="dropped", reason="cheat",
                   detail="the candidate changed its process: " + "; ".join(changed[:6]))
    return out


def _run(task: TrialTask) -> dict:
    if task.binding is not None and task.binding.how == "file_reference":
        return run_file_reference(task)
    dev = torch.device("cuda")
    checks = C.selected(task.runtime_checks)
    return loop.run((HarnessOp(task, i, check, dev, checks) for i, check in enumerate(H.checks(task.binding))), task)


class HarnessOp(loop.Adapter):
    """One op a bound CUDA record is checked as (one harness .so each): the trial loop's adapter
    (sftbuild.trial.loop). Variants are the op's drawn shapes plus a grown one, contiguous inputs.
    Its launches are not profiled (a trial's `profile` is not used): the library and own-kernel
    checks see Python candidates only."""

    def __init__(self, task: TrialTask, i: int, check: dict, dev: torch.device, checks: list):
        self.op = op = ops.get(check["op"])
        self.task, self.check, self.dev, self.checks, self.notes = task, check, dev, checks, {}
        self.values: dict[str, bool] = {}  # value class -> whether it ran (False: ill-posed wherever drawn)
        self.name = f"op {op.name}"
        self.contract = H.CONTRACTS[H.contract_for(check.get("harness") or "", op.launch)]
        # a probed launcher's file may name cuBLAS in helpers it never calls (DeepSpeed's context.h)
        self.lib = (load_file_harness if check.get("harness") == "host_launcher" else load_harness)(task.sos[i])
        cons = op.constraints_with(check.get("constraints"))
        self.pool = [s for s in op.shape_pool if H.fits(s, cons)]
        rng = random.Random(f"{task.id}:{check['op']}")
        self.shapes = rng.sample(self.pool, min(task.shapes, len(self.pool)))
        self.dtypes = [d for d in op.dtypes if task.dtypes is None or d in task.dtypes]
        self.drawn = len(self.shapes)
        if task.shapes > 1 and self.dtypes:
            self.shapes = _with_grown(self.shapes, op, check, cons, self.dtypes[0], task, dev)

    def variants(self) -> list:
        return self.shapes

    def grown(self, variant) -> bool:
        return variant in self.shapes[self.drawn:]

    def describe(self, variant) -> dict:
        return {"op": self.op.name, "shape": list(variant)}

    def trial(self, t: loop.Trial):
        own = self.task.binding.values if self.task.binding else None
        declared = self.check.get("values", self.op.values if own is None else own)
        classes = values.schedule(declared, t.dtype)
        at = [values.slot(t.vi, self.dtypes.index(t.dtype), len(self.dtypes), t.seed, order, self.task.seeds)
              for order in (0, 1)]
        return _trial(self.lib, self.op, self.contract, self.check, t.variant, t.dtype, t.seed, self.dev,
                      self.checks, self.notes, [values.pick(classes, a) for a in at], self.values)

    def summary(self) -> dict:
        ran = sorted(k for k, v in self.values.items() if v)
        return {"value_classes": ran, **({"value_classes_ill_posed": sorted(k for k, v in self.values.items()
                                                                             if not v)} if len(ran) < len(self.values) else {})}

    def timed(self) -> tuple[str, dict]:
        """The op's largest pool shape at its first dtype."""
        op, lib, contract = self.op, self.lib, self.contract
        shape, dtype = max(self.pool, key=math.prod), self.dtypes[0]
        params = {**op.params, **(self.check.get("params") or {})}
        inputs = _inputs(op, shape, dtype, 0, self.dev, params)
        kin, out = _buffers(op, inputs, ops.as_outputs(op.run_reference(inputs, params)))
        return op.name, {"shape": list(shape), "dtype": dtype, **timing.compare_times(
            lambda: _launch(lib, dtype, contract, kin, out, params), lambda: op.run_reference(inputs, params),
            inputs, self.task)}


@functools.lru_cache(maxsize=1)
def _torch_libs_global() -> None:
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libc10.so", "libtorch_cpu.so", "libc10_cuda.so", "libtorch_cuda.so"):
        if os.path.exists(os.path.join(lib, name)):
            ctypes.CDLL(os.path.join(lib, name), mode=ctypes.RTLD_GLOBAL)


def load_harness(path: str) -> ctypes.CDLL:
    """dlopen a harness. ATen harnesses call into c10 (TORCH_CHECK, tensor types), so torch's own
    libraries are made global first, or the load fails with an undefined symbol."""
    _torch_libs_global()
    return ctypes.CDLL(path)


def _with_grown(shapes, op, check, cons, dtype, task, dev) -> list:
    """The drawn shapes plus one past the fixed-grid caps (sftbuild.trial.sizes), when the op makes
    inputs of it and its reference runs on them."""
    params = {**op.params, **(check.get("params") or {})}

    def works(shape):
        op.run_reference(_inputs(op, shape, dtype, 0, dev, params), params)
        return True

    blocks = sizes.block_sizes(task.code) | {256}  # 256: the harnesses' own default block
    return sizes.add_grown(shapes, cons, sizes.limit_for(task.max_numel), blocks, works)


def _fenced_buffers(op, fence, ref_native):
    """(kernel inputs, outputs): `_buffers` for the fenced inputs, with the clones and outputs the kernel
    gets carved out of guarded allocations too (added to `fence`, see sftbuild.trial.fences)."""
    kin, outputs = _buffers(op, fence.views, ref_native)
    if op.mutates and len(op.mutates) == len(ref_native):
        more = fences.Fence([kin[i] for i in op.mutates], [f"input {i}" for i in op.mutates])
        for i, v in zip(op.mutates, more.views):
            kin[i] = v
        outputs = [kin[i] for i in op.mutates]
    else:
        more = fences.Fence(outputs, "output")
        outputs = more.views
    fence.add(more)
    return kin, outputs


def _reads_outside(lib, op, contract, dtype, inputs, kin, outputs, params, fence, ref64, ref_native):
    """A wrong result that came from reading guard regions: the kernel runs again on the same inputs
    and is right when the guards hold finite values."""
    def rerun() -> bool:
        for t, k in zip(inputs, kin):
            if k is not t:
                k.copy_(t)
        if not op.mutates:
            for o in outputs:
                _poison(o)
        if _launch(lib, dtype, contract, kin, outputs, params) != 0:
            return False
        torch.cuda.synchronize()
        return _compare_all(op, outputs, inputs, ref64, ref_native, dtype, params)[0]

    return fences.blame_reads(fence, rerun)


def _inputs(op, shape, dtype, seed, dev, params, value_class="normal"):
    """The op's trial inputs, as every path draws them (sftbuild.ops.special)."""
    return [t.to(dev).contiguous() for t in special.trial_inputs(op, shape, dtype, seed, params,
                                                                 value_class=value_class)]


def _drawn(op, shape, dtype, seed, dev, params, name, ran) -> tuple:
    """(inputs, value class, reference at the dtype, in float64, the reference's seconds): the trial's
    inputs in class `name` (sftbuild.ops.values) where it is well-posed for the op at the dtype, else
    its own draw; `ran` notes whether each class ran. The references are computed before any launch."""
    xs = _inputs(op, shape, dtype, seed, dev, params, name)
    try:
        native, seconds = deadline.timed(lambda: ops.as_outputs(op.run_reference(xs, params)), dev.type == "cuda")
        double = ops.as_outputs(op.run_reference(ops.upcast(xs), params))
        if name == "normal" or values.well_posed(native, double, dtype, op.tolerance):
            ran[name] = True
            return xs, name, native, double, seconds
    except Exception:  # a reference that refuses the class's values (a domain check): its own draw
        if name == "normal":
            raise
    ran.setdefault(name, False)
    return _drawn(op, shape, dtype, seed, dev, params, "normal", ran)


def _launch(lib, dtype, contract, inputs, outputs, params=None) -> int:
    ptrs, ints = contract(inputs, outputs, params)
    fn = getattr(lib, f"sftbuild_launch_{dtype}")
    fn.restype = ctypes.c_int
    parr = (ctypes.c_void_p * len(ptrs))(*ptrs)
    iarr = (ctypes.c_longlong * max(len(ints), 1))(*ints)
    return fn(parr, iarr, len(ints), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))


def _poison(t: torch.Tensor) -> torch.Tensor:
    """Fill so that unwritten elements show: NaN for floats, the most negative value for integers."""
    if t.is_floating_point() or t.is_complex():
        return t.fill_(float("nan"))
    if t.dtype == torch.bool:
        return t.fill_(True)
    return t.fill_(torch.iinfo(t.dtype).min)


def _buffers(op, inputs, ref_native):
    """(kernel inputs, outputs): inputs an op updates in place are cloned and the clones are its outputs;
    otherwise one poisoned buffer per reference result."""
    if op.mutates and len(op.mutates) == len(ref_native):
        kin = [t.clone() if i in op.mutates else t for i, t in enumerate(inputs)]
        return kin, [kin[i] for i in op.mutates]
    return list(inputs), [_poison(torch.empty_like(r)) for r in ref_native]


def _is_index(op, j: int, out: torch.Tensor) -> bool:
    """An int64 index output (argmax, sort/topk/cummax indices): ties make several answers right."""
    names = op.io.get("outputs") or []
    name = names[j].split(":")[0].strip() if j < len(names) else ""
    return name in ("idx", "indices") and out.dtype in (torch.int64, torch.int32)


def _compare_all(op, outputs, inputs, ref64, ref_native, dtype, params) -> tuple[bool, dict]:
    worst: dict = {}
    for j, (out, r64, nat) in enumerate(zip(outputs, ref64, ref_native)):
        if _is_index(op, j, out):
            ok, stats = _compare_index(out, r64, inputs[0], params.get("dim", -1))
        else:
            ok, stats = ops.compare(out, r64, dtype, op.tolerance, native=nat)
        if not ok:
            label = f"output {j}: " if len(outputs) > 1 else ""
            return False, {**stats, "why": label + stats.get("why", "")}
        fold_worst(worst, stats)
    return True, worst


def _compare_index(cand, ref, x, dim) -> tuple[bool, dict]:
    """Indices are right when they are in range and pick the same values of x as the reference's."""
    if tuple(cand.shape) != tuple(ref.shape):
        return False, {"why": f"shape {tuple(cand.shape)} != {tuple(ref.shape)}"}
    if cand.numel() == 0:
        return True, {"exact": True}
    size = x.shape[dim]
    bad = int(((cand < 0) | (cand >= size)).sum())
    if bad:
        return False, {"exact": True, "mismatches": bad, "why": f"{bad} indices out of range [0, {size})"}
    picked, want = x.gather(dim, cand.long()), x.gather(dim, ref.to(cand.device).long())
    off = int((picked != want).sum() - (picked.isnan() & want.isnan()).sum())
    return off == 0, {"exact": True, "mismatches": off,
                      **({"why": f"{off} indices pick other values than the reference's"} if off else {})}


def _trial(lib, op, contract, check, shape, dtype, seed, dev, checks=None, notes=None, classes=("normal", "normal"),
           ran=None):
    """One (shape, dtype, seed): both orders, every run-time check, each order's inputs in its value
    class (`classes`; `ran` notes which ran). Returns (ok, stats)."""
    checks = C.selected() if checks is None else checks
    params = {**op.params, **(check.get("params") or {})}
    ran = {} if ran is None else ran
    first_in, cls, ref_native, ref64, ref_s = _drawn(op, shape, dtype, seed, dev, params, classes[0], ran)
    fence = fences.Fence(first_in, "input")
    inputs = fence.views
    before = [t.clone() for t in inputs]
    kin, outputs = _fenced_buffers(op, fence, ref_native)
    with deadline.watch(ref_s, "a kernel launch"):
        code = _launch(lib, dtype, contract, kin, outputs, params)
        torch.cuda.synchronize()
    if code != 0:
        return False, {"reason": "launch_failed" if code == -1 else "cuda_error",
                       "why": f"harness returned {code} for shape {shape}"}
    why = fence.tripped() or C.judge(checks, C.Call(kin, outputs, before=before, mutates=tuple(op.mutates),
                                 expected=C.specs(ref_native)))
    if why:
        return False, why
    ok, stats = _compare_all(op, outputs, inputs, ref64, ref_native, dtype, params)
    if not ok:
        why = _reads_outside(lib, op, contract, dtype, inputs, kin, outputs, params, fence, ref64, ref_native)
        return False, {**stats, "reason": "incorrect", **(why or {"why": stats.get("why", "") + values.on(cls)})}
    first, first64 = [o.clone() for o in outputs], ref64
    # new values in the same buffers must give new results
    fresh, cls, ref_native, ref64, _ = _drawn(op, shape, dtype, seed + 1000, dev, params, classes[1], ran)
    for t, k, f in zip(inputs, kin, fresh):
        t.copy_(f.to(dev))
        if k is not t:
            k.copy_(t)
    if not op.mutates:
        for o in outputs:
            _poison(o)
    with deadline.watch(ref_s, "a kernel launch"):
        if _launch(lib, dtype, contract, kin, outputs, params) != 0:
            return False, {"reason": "cuda_error", "why": "second launch failed"}
        torch.cuda.synchronize()
    why = fence.tripped() or C.judge(checks, C.Call(kin, outputs, mutates=tuple(op.mutates),
                                                    expected=C.specs(ref_native)))
    if why:
        return False, why
    ok, more = loop.second_order(checks, notes, first, outputs, first64, ref64,
                                 _compare_all(op, outputs, inputs, ref64, ref_native, dtype, params))
    if not ok and more.get("reason") == "incorrect":
        more = {**more, "why": more.get("why", "") + values.on(cls)}
    return (True, {**stats, **more}) if ok else (False, more)


# ---- bound to the file's own CPU reference (trial/file_reference.py) ----------------------

FILE_TOLERANCE = {4: 2e-3, 8: 1e-6, 2: 3e-2}  # by the launcher's element size: fp32, fp64, fp16/bf16


def run_file_reference(task: TrialTask) -> dict:
    """Trials of a kernel called through its file's host launcher, judged against the file's CPU
    function on host copies of the same inputs.

    For each planned size (main()'s sizes shrunk, see `file_reference.plans`), block size from the
    file that main() would pair with that size (`file_reference.pairs`) and seed (the one trial loop,
    sftbuild.trial.loop, with `FileReference` its adapter):
    arrays the launcher takes const are inputs (random in the range of the file's own generator) and
    must come back unchanged; arrays main() fills (zeros, ones, random) that the launcher writes are
    in/out, both sides start from the same values; arrays main() only allocates are outputs,
    poisoned with NaN (integers with their minimum) on the device; the launcher's scratch buffers
    start at zero. Every array sits inside guard regions (sftbuild.trial.fences): a write past an
    edge is `out_of_bounds`, a read past one reads NaN; each launcher call is bounded by the CPU
    reference's time (sftbuild.trial.deadline). The arrays main() validates (else every array the
    launcher writes) are compared with the CPU result: within a tolerance relative to the
    reference's magnitude (looser when the launcher stores 16-bit floats) or, where the binding read
    main()'s own acceptance test for the array (`atol + |ref| * rtol`, sftbuild.trial.acceptance),
    within whichever of the two is wider; the verdict names the rule. NaN never passes,
    integers exactly. Each trial runs again on new values in the same buffers (a stale result fails;
    the first run's result again is a cheat, cached by pointer); a reference that is constant in
    every trial says nothing about the kernel, so the record is dropped as `uninformative`."""
    adapter = FileReference(task, torch.device("cuda"), C.selected(task.runtime_checks))
    return loop.run([adapter], dataclasses.replace(task, seeds=max(1, task.seeds), timing=False))


# seconds one CPU reference run may take at the largest trial size: a slower one drops that size for
# the next smaller (the trials run it sizes x seeds x 2 times; at least one size always stays)
REFERENCE_BUDGET_S = 2.0


class FileReference(loop.Adapter):
    """A kernel called through its file's host launcher: the trial loop's adapter. Variants are
    (trial size, block size) pairs; the file fixes dtypes and layouts, so rows carry neither. A block
    size the CUDA runtime refused (as main() would have seen) skips its trials; a wrong result is
    never excused, only a refused launch. The CPU reference is computed once per size and seed
    (`ReferenceCache`); a size whose reference takes longer than REFERENCE_BUDGET_S is left out
    while a smaller one remains."""

    dtypes = [None]
    unbound = "no trial size fits the file's main()"

    def __init__(self, task: TrialTask, dev: torch.device, checks: list):
        from sftbuild.trial import file_reference as FR

        self.ref, self.dev, self.checks, self.notes = task.binding.harness_args["ref"], dev, checks, {}
        self.name = f"launcher {self.ref['launcher']}"
        self.lib = load_file_harness(task.sos[0])
        for name, res in (("sftbuild_file_launch", ctypes.c_int), ("sftbuild_file_reference", ctypes.c_int),
                          ("sftbuild_file_elem_bytes", ctypes.c_int)):
            getattr(self.lib, name).restype = res
        plans = FR.plans(self.ref, max(1, min(task.shapes, 3)), task.max_numel or FR.MAX_ELEMENTS,
                         FR.device_fields(dev))
        self.references = ReferenceCache(self.lib, self.ref)
        # the largest size goes while one CPU run of it exceeds the budget (its result is kept for the trials)
        while len(plans) > 1 and self.references.get(plans[0], 0)[3] > REFERENCE_BUDGET_S:
            plans = plans[1:]
        self.pairs = FR.pairs(self.ref, plans)  # each size with the block sizes main() would pair it with
        self.refused, self.tried = {}, 0

    def variants(self) -> list:
        return self.pairs

    def layouts_for(self, dtype) -> list:
        return [None]

    def describe(self, variant) -> dict:
        return {"sizes": variant[0]["counts"], "block_size": variant[1]}

    def trial(self, t: loop.Trial):
        p, block = t.variant
        if block in self.refused:
            return None, {}
        ok, stats, moved = _file_trial(self.lib, self.ref, p, block, t.seed, self.dev, self.checks, self.references)
        if stats.get("code") in LAUNCH_CONFIG_ERRORS:  # the launcher said this block size does not fit
            self.refused[block] = stats["why"]
            return None, stats
        self.tried += 1
        # a reference that did not move: the loop drops the record as uninformative when none did
        return ok, (stats if moved or not ok else {**stats, UNINFORMATIVE: "the CPU reference's result did not "
                                                   "change when the inputs did"})

    def where(self, t: loop.Trial) -> str:
        """main()'s names for the trial's sizes, its block size and seed (a CUDA fault's place)."""
        p, block = t.variant
        return f"{_located({}, self.ref, p, block)['why']}, seed {t.seed}"

    def summary(self) -> dict:
        return {"timing": {}, "reference_calls": self.references.calls, "acceptance": file_rules(self.ref, self.lib),
                **({"refused_block_sizes": self.refused} if self.refused else {})}

    def verdict(self) -> dict | None:
        if not self.tried:
            return {"reason": "cuda_error",
                    "detail": "the launcher refused every block size: " + "; ".join(self.refused.values())}
        return None


# cudaErrorInvalidValue, cudaErrorInvalidConfiguration: a launch configuration the runtime refuses
LAUNCH_CONFIG_ERRORS = (1, 9)


def load_file_harness(path: str) -> ctypes.CDLL:
    """dlopen with lazy binding: a repo's own helpers (llm.c's common.h setup calls cuBLAS) may name
    library functions the launcher never calls; they stay unresolved instead of failing the load."""
    _torch_libs_global()
    return ctypes.CDLL(path, mode=os.RTLD_LAZY | os.RTLD_LOCAL)


def _file_buffers(ref, p, seed, lib=None):
    """Host arrays for one trial, one per pointer of the CPU call: (tensors, roles); see
    `file_reference.roles` (null arrays are empty and passed as NULL; an input main() only
    allocates, filled by an earlier step, gets random values, or that step's values where the
    binding names it (`prepare`) and the harness `lib` is given)."""
    from sftbuild.trial import file_reference as FR

    gen = torch.Generator().manual_seed(seed)
    bufs, roles = [], FR.roles(ref)
    ptrs = [c for c in ref["cpu_params"] if c["ptr"]]
    for c, b, n, high, role in zip(ptrs, ref["buffers"], p["counts"], p["high"], roles):
        if role in ("input", "staged") and b["gen"] == "empty":  # filled by an earlier step of main(): any values
            b = {**b, "gen": "uniform", "lo": -1.0, "hi": 1.0}
        integer = c["type"] not in ("float", "double")
        dtype = torch.float64 if c["type"] == "double" else torch.int32 if integer else torch.float32
        if b["gen"] == "int" or (integer and b["gen"] not in ("zeros", "null")):
            t = torch.randint(0, max(1, high or 2), (n,), generator=gen, dtype=torch.int64).to(dtype)
        elif b["gen"] == "uniform":
            t = (torch.rand(n, generator=gen, dtype=torch.float64) * (b["hi"] - b["lo"]) + b["lo"]).to(dtype)
        elif b["gen"] == "ones":
            t = torch.ones(n, dtype=dtype)
        elif b["gen"] in ("zeros", "null"):
            t = torch.zeros(n, dtype=dtype)
        else:
            t = torch.empty(n, dtype=dtype)
        bufs.append(t)
    if lib is not None and ref.get("prepare") and p.get("prepare") is not None:
        _prepare(lib, ref, p, bufs, gen)
    return bufs, roles


def _prepare(lib, ref, p, bufs, gen) -> None:
    """Runs the earlier CPU step main() runs before the reference (`ref["prepare"]`) on the host
    arrays: the arrays it fills get main()'s values; arrays only it takes are made as main() makes them."""
    from sftbuild.trial import file_reference as FR

    prep, extra = ref["prepare"], []
    types = [q["type"] for q in prep["params"] if q["ptr"]]
    for b, n in zip(prep["extra"], p["prepare"]["counts"]):
        t = torch.zeros(n, dtype=torch.float64)
        if b["gen"] == "uniform":
            t = torch.rand(n, generator=gen, dtype=torch.float64) * (b["hi"] - b["lo"]) + b["lo"]
        elif b["gen"] == "ones":
            t = torch.ones(n, dtype=torch.float64)
        extra.append(t)
    arrays = [bufs[i] if where == "host" else extra[i] for where, i in FR.prepare_arrays(ref)]
    arrays = [a if a.dtype != torch.float64 or ty == "double" else a.float() for a, ty in zip(arrays, types)]
    kinds = [q["kind"] for q in prep["params"] if not q["ptr"]]
    ints = [v for v, k in zip(p["prepare"]["args"], kinds) if k == "int"]
    floats = [v for v, k in zip(p["prepare"]["args"], kinds) if k != "int"]
    parr = (ctypes.c_void_p * max(1, len(arrays)))(*_addresses(arrays))
    iarr = (ctypes.c_longlong * max(1, len(ints)))(*ints)
    farr = (ctypes.c_double * max(1, len(floats)))(*floats)
    lib.sftbuild_file_prepare.restype = ctypes.c_int
    lib.sftbuild_file_prepare(parr, iarr, farr)


def _addresses(tensors) -> list[int]:
    return [t.data_ptr() if t.numel() else 0 for t in tensors]


def _file_call(lib, ref, p, dev_bufs, block) -> int:
    from sftbuild.trial import file_reference as FR

    ints, floats = FR.launcher_scalars(ref, p)
    parr = (ctypes.c_void_p * max(1, len(dev_bufs)))(*_addresses(dev_bufs))
    carr = (ctypes.c_longlong * max(1, len(dev_bufs)))(*[t.numel() for t in dev_bufs])
    iarr = (ctypes.c_longlong * max(1, len(ints)))(*ints)
    farr = (ctypes.c_double * max(1, len(floats)))(*floats)
    return lib.sftbuild_file_launch(parr, carr, iarr, farr, ctypes.c_int(block))


def file_reference_outputs(lib, ref, p, host_bufs) -> list:
    """The CPU function run on copies of `host_bufs`; returns the copies after the call."""
    out = [t.clone() for t in host_bufs]
    ints = [a for a, c in zip(p["args"], ref["cpu_params"]) if c["kind"] == "int"]
    floats = [a for a, c in zip(p["args"], ref["cpu_params"]) if c["kind"] == "float"]
    parr = (ctypes.c_void_p * max(1, len(out)))(*_addresses(out))
    iarr = (ctypes.c_longlong * max(1, len(ints)))(*ints)
    farr = (ctypes.c_double * max(1, len(floats)))(*floats)
    lib.sftbuild_file_reference(parr, iarr, farr)
    return out


class ReferenceCache:
    """The CPU reference of one trial size and seed, computed once and shared by every block size.

    A trial's host arrays and the CPU function's results depend only on the size plan and the seed
    (`_file_buffers`), never on the block size, so each (plan, seed) is computed once. Only the
    current plan's entries are kept (the loop runs a plan's block sizes one after another), which
    bounds the memory to one plan's seeds. `calls` counts the CPU function's runs."""

    def __init__(self, lib, ref: dict):
        self.lib, self.ref, self.calls = lib, ref, 0
        self._plan, self._entries = None, {}

    def get(self, p: dict, seed: int) -> tuple[list, list, list, float]:
        """(host arrays, roles, the CPU function's results, its seconds) for plan `p` and `seed`;
        callers must not change the tensors."""
        key = (tuple(p["counts"]), tuple(a for a in p["args"] if a is not None))
        if key != self._plan:
            self._plan, self._entries = key, {}
        if seed not in self._entries:
            host, roles = _file_buffers(self.ref, p, seed, self.lib)
            want, seconds = deadline.timed(lambda: file_reference_outputs(self.lib, self.ref, p, host), False)
            self.calls += 1
            self._entries[seed] = (host, roles, want, seconds)
        return self._entries[seed]


def _file_trial(lib, ref, p, block, seed, dev=None, checks=None, references: ReferenceCache | None = None):
    """One (sizes, block size, seed), run twice on new values. Returns (ok, stats, reference moved).
    After each call the run-time checks judge the arrays it was given (inputs unchanged); a failed
    second run is judged as every kind's is (`loop.second_order`: a result cached by pointer is a
    cheat). A trial whose reference did not move is no drop here: the record's must move in some
    trial (`loop.run`, as every kind's). `references` shares the CPU results between block sizes."""
    from sftbuild.trial import file_reference as FR

    dev = dev or torch.device("cuda")
    checks = C.selected() if checks is None else checks
    references = references or ReferenceCache(lib, ref)
    host, roles, _, _ = references.get(p, seed)
    ptr_of = {i: k for k, i in enumerate(i for i, c in enumerate(ref["cpu_params"]) if c["ptr"])}
    compared = [ptr_of[i] for i in ref["compare"]]
    fence = fences.Fence([t.to(dev, copy=True) for t in host]
                         + [torch.zeros(n, dtype=torch.float32, device=dev) for n in p["scratch"]],
                         file_buffer_names(ref, len(host)))
    d, scratch = list(fence.views), list(fence.views[len(host):])
    zeroed = FR.scratch_zeroed(ref)
    moved, worst, first = False, {}, None
    for run in range(2):
        host, _, want, ref_s = references.get(p, seed + 1000 * run)
        if run:  # new values in the same buffers
            for t, h in zip(d, host):
                t.copy_(h.to(dev))
            for t, z in zip(scratch, zeroed):  # device-only buffers main() clears before each call
                if z:
                    t.zero_()
        for t, r, w in zip(d, roles, want):
            if r == "output":
                _poison(t)
            elif r == "staged":  # the step starts from what the CPU function computed before it
                t.copy_(w.to(dev))
        before = [t.clone() if r in ("input", "staged") else None for t, r in zip(d, roles)]
        with deadline.watch(ref_s, "a launcher call"):  # bounded by the CPU reference's time
            code = _file_call(lib, ref, p, d, block)
            torch.cuda.synchronize()
        if code != 0:
            return False, {"reason": "launch_failed" if code == -1 else "cuda_error", "code": code,
                           "why": f"launcher {ref['launcher']} returned {code} (block size {block})"}, moved
        why = fence.tripped() or C.judge(checks, C.Call(d, [], before=before))
        if why:
            return False, _located(why, ref, p, block), moved
        # compared on the device: float64 there gives the same verdict, without copying the results back
        outs = [(k, d[k].clone(), want[k].to(dev)) for k in compared]
        got, want = [g for _, g, _ in outs], [w for _, _, w in outs]
        ok, stats = _compare_file(lib, ref, compared, outs)
        if not ok and run:
            return False, _located(loop.second_order(checks, None, first[0], got, first[1], want, (ok, stats))[1],
                                   ref, p, block), moved
        if not ok:
            return False, _located({**stats, "reason": "incorrect"}, ref, p, block), moved
        fold_worst(worst, stats)
        # the reference says something when it varies within an array or with the inputs
        moved |= any(w.numel() > 1 and bool((w != w.flatten()[0]).any()) for w in want)
        if run == 0:
            first = (got, want)
        else:
            moved |= not all(torch.equal(a, w) for a, w in zip(first[1], want))
    return True, worst, moved


def _located(verdict: dict, ref: dict, p: dict, block: int) -> dict:
    """A failed trial's verdict, its `why` saying at which sizes and block size it failed (main()'s
    names for the CPU call's scalars): a kernel that only fails below its own block size, or past
    what main() runs, shows it. A cheat's verdict is the same whatever the sizes, and stays as it is."""
    if verdict.get("reason") == "cheat":
        return verdict
    sizes = ", ".join(f"{a}={v}" for a, v, c in zip(ref["call_args"], p["args"], ref["cpu_params"]) if not c["ptr"])
    where = f"at {sizes}, block size {block}" if sizes else f"at block size {block}"
    return {**verdict, "why": f"{verdict['why']} ({where})" if verdict.get("why") else where}


def file_buffer_names(ref: dict, n_host: int) -> list[str]:
    """What a guard's verdict calls each buffer: main()'s name for the CPU call's arrays, the
    launcher's or the file's name for the device-only ones."""
    from sftbuild.trial import file_reference as FR

    host = [b.get("arg") or f"array {i}" for i, b in enumerate(ref["buffers"][:n_host])]
    return host + [f"{name} (device-only)" for name in FR.scratch_names(ref)]


def _compare_file(lib, ref, compared, outs) -> tuple[bool, dict]:
    """Every compared array (k, kernel's, CPU reference's) within tolerance, main()'s own for that
    array where the binding read it (`ref["acceptance"]`); a failure names its argument and the rule."""
    worst: dict = {}
    rules = ref.get("acceptance") or {}
    for k, got, w in outs:
        arg = ref["call_args"][ref["compare"][compared.index(k)]]
        ok, stats = compare_file_output(got, w, lib.sftbuild_file_elem_bytes(k), rules.get(arg))
        if not ok:
            return False, {**stats, "why": f"{arg}: {stats['why']} [{stats['rule']}]" if "rule" in stats
                           else f"{arg}: {stats['why']}"}
        fold_worst(worst, stats)
    return True, worst


def file_rules(ref: dict, lib) -> dict[str, str]:
    """{compared argument: the rule its trials use}, as `compare_file_output` names it."""
    ptr_of = {i: k for k, i in enumerate(i for i, c in enumerate(ref["cpu_params"]) if c["ptr"])}
    rules = ref.get("acceptance") or {}
    return {ref["call_args"][i]: rule_name(rules.get(ref["call_args"][i]), lib.sftbuild_file_elem_bytes(ptr_of[i]))
            for i in ref["compare"]}


def rule_name(rule: dict | None, elem_bytes: int) -> str:
    """How a verdict names the rule `compare_file_output` applies to an array of `elem_bytes` elements."""
    from sftbuild.trial import acceptance

    named = f"default: {FILE_TOLERANCE.get(elem_bytes, 3e-2):g} x (max|ref| + |ref|)"
    if rule and acceptance.atol_value(rule, elem_bytes) is not None:
        return f"the wider of the file's {acceptance.describe(rule, elem_bytes)} and the {named}"
    return named


def compare_file_output(got: torch.Tensor, want: torch.Tensor, elem_bytes: int,
                        rule: dict | None = None) -> tuple[bool, dict]:
    """Kernel output vs CPU reference: NaN never passes; infinities must be the reference's own;
    floats within FILE_TOLERANCE relative to the reference's magnitude or, where `rule` gives the
    file's own allowance `atol + |ref| * rtol` (sftbuild.trial.acceptance, `atol` read at
    `elem_bytes`), within whichever of the two is wider; integers exactly. Stats name the rule used."""
    if got.shape != want.shape:
        return False, {"why": f"{got.numel()} elements, the reference has {want.numel()}"}
    if not want.is_floating_point():
        bad = int((got != want).sum())
        return bad == 0, {"exact": True, "mismatches": bad, **({"why": f"{bad} integers differ"} if bad else {})}
    want64, got64 = want.double(), got.double()
    if torch.isnan(want64).any():
        return False, {"why": "the CPU reference has NaN"}
    if torch.isnan(got64).any():
        return False, {"why": f"{int(torch.isnan(got64).sum())} NaN (unwritten or invalid) elements"}
    inf = torch.isinf(want64)
    if inf.any():  # e.g. a causal mask's -inf: the same infinity, and the rest compared as usual
        if not torch.equal(got64[inf], want64[inf]):
            return False, {"why": "infinities differ from the reference's"}
        if inf.all():
            return True, {"exact": True}
        want64, got64 = want64[~inf], got64[~inf]
    if torch.isinf(got64).any():
        return False, {"why": f"{int(torch.isinf(got64).sum())} infinite elements where the reference is finite"}
    from sftbuild.trial import acceptance

    scale = max(float(want64.abs().max()) if want64.numel() else 0.0, 1e-6)
    err = (got64 - want64).abs()
    atol = acceptance.atol_value(rule, elem_bytes) if rule else None
    tol = FILE_TOLERANCE.get(elem_bytes, 3e-2)
    bound = tol * scale + tol * want64.abs()
    if atol is not None:  # the file's own test, as main() calls it for this array: what either accepts passes
        # (its maintainers' standard, or ours where the trial's inputs are not main()'s and its own is tighter)
        bound = torch.maximum(bound, atol + rule["rtol"] * want64.abs())
    bad = int((err > bound).sum())
    stats = {"max_abs": float(err.max()) if err.numel() else 0.0, "scale": scale, "tolerance": tol,
             "rule": rule_name(rule, elem_bytes)}
    if bad:
        j = int((err - bound).argmax())
        return False, {**stats, "mismatches": bad,
                       "why": f"{bad} elements off, e.g. [{j}] {float(got64[j]):.6g} vs {float(want64[j]):.6g}"}
    return True, stats
