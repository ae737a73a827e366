"""The validation pipeline shared by the validate stage and the reward: static, compile, run, memcheck.

`validate(records, cfg, executor, cache_dir)` yields (record, status, reason, payload)
for each record. Static checks read the code in this process (they never run it);
compiles go to the CPU pool, from one thread kept for the process, and the trials of what has
compiled start while the rest compiles; candidates run only in GPU workers, or, without a GPU,
Triton candidates run in the interpreter in sandboxed CPU processes (the executor's
`map_interpreted`), which are replaced on the same terms as GPU workers.
"""
from __future__ import annotations

import dataclasses
import os
import queue
import re
import threading

from sftbuild import sandbox
from sftbuild.binding import Binding
from sftbuild.executor import WorkerFailure
from sftbuild.trial import compile as C
from sftbuild.trial import kinds, logs, memcheck
from sftbuild.trial_types import CompileTask, TrialTask, Verdict
from sftbuild.validate import static

# sftbuild.trial.harness (and torch, through the op registry) is imported where a harness is rendered,
# in the stage's own process: the CPU pool's processes, which import this module for compile_any, build
# what they are given without torch (two seconds of CPU for each process a pool starts)

ALL_DTYPES = ["float32", "float16", "bfloat16"]


def validate(records, cfg, executor, cache_dir: str, nvcc: str = ""):
    """(record, status, reason, payload) for each record; logs and details in the payload are
    scrubbed of anything from files outside the record's own, the toolchain's and torch's."""
    for rec, status, reason, payload in _validate(records, cfg, executor, cache_dir, nvcc):
        yield rec, status, reason, scrub_payload(payload, [cache_dir])


def scrub_payload(payload, roots, depth: int = 0):
    """Every string under the keys that carry tool or candidate output scrubbed, and every other one
    without host secrets (sftbuild.trial.logs)."""
    if not isinstance(payload, dict) or depth > 4:
        return payload
    out = {}
    for k, v in payload.items():
        if isinstance(v, str) and k in LOG_KEYS:
            out[k] = logs.scrub(v, roots, cap=6000 if k == "log" else 2000)
        elif isinstance(v, dict):
            out[k] = scrub_payload(v, roots, depth + 1)
        elif isinstance(v, list):
            out[k] = [scrub_payload(x, roots, depth + 1) if isinstance(x, dict) else
                      logs.scrub(x, roots, cap=2000) if isinstance(x, str) and k in LOG_KEYS else
                      sandbox.without_secrets(x) if isinstance(x, str) else x for x in v]
        else:  # any text may carry what the record's code read and raised
            out[k] = sandbox.without_secrets(v) if isinstance(v, str) else v
    return out


LOG_KEYS = ("log", "detail", "why", "errors", "error", "stderr", "stdout", "message", "traceback")


def _validate(records, cfg, executor, cache_dir: str, nvcc: str = ""):
    gpus = executor.gpu_count
    budget = {"max_block_size": cfg.max_block_size, "shared_memory_budget": cfg.shared_memory_budget}
    if cfg.runtime_checks:  # a misspelt check name fails here, not as every record's verdict in a worker
        from sftbuild.trial import checks

        checks.selected(cfg.runtime_checks)
    todo = []
    for rec in records:
        findings = static.scan(rec.code, rec.language, budget, cfg.static_checks)
        if findings:
            f = findings[0]
            yield rec, "dropped", f.reason, {"static": [dataclasses.asdict(x) for x in findings[:8]],
                                             "detail": f"{f.check}: {f.detail}"}
            continue
        if not rec.binding:
            # the bind stage (probing included) has had its say: keep its reason; with nothing to check
            # it against, a compile would only delay the drop
            why = rec.unbound or (rec.entry or {}).get("unbound") or (
                "not bound yet (`sftbuild bind`)" if rec.language != "triton" else
                "no entry point launches its kernels" if not (rec.entry or {}).get("entry_points") else
                "not probed yet")
            yield rec, "dropped", "unbound", {"detail": why if isinstance(why, str) else str(why)}
            continue
        if kinds.of(rec.binding, rec.language) is None:
            yield rec, "dropped", "unbound", {"detail": f"no candidate kind runs a {rec.language} record bound as "
                                                        f"{rec.binding.kind!r}"}
            continue
        todo.append(rec)
    by_id = {r.id: r for r in todo}
    # without a GPU nothing can launch a harness: build its device code only (real ptxas figures)
    tasks = [dataclasses.replace(compile_task(r, cfg, nvcc, cache_dir), link=bool(gpus)) for r in todo]
    if any(kinds.for_task(t).builds_extension(t) for t in tasks):
        _prepare_extensions(cache_dir)
    slots = gpus * workers_per_gpu(cfg, gpus) if gpus else max(1, getattr(executor, "cpu_workers", 1))
    comp = {}
    # the trials of what has compiled run while the rest compiles: the CPU cores and the GPUs work together
    for compiled in _compiled(executor, tasks, slots):
        ready = []
        for task, res in compiled:
            rec = by_id[task.id]
            verdict = after_compile(rec, res, cfg)
            if verdict is not None:
                yield (rec, *verdict)
                continue
            ready.append((rec, res))
            comp[rec.id] = res
        if not ready:
            continue
        items = [gpu_task(rec, res, cfg, cache_dir) for rec, res in ready]
        # a program's own kernels after every program pair: workers running side by side would otherwise
        # compile the same kernels at once, where later ones find them in the shared Triton cache
        items.sort(key=lambda t: t.kind == "inductor_program")
        _prepare_ops(items)
        if gpus:
            results = executor.map_gpu(run_on_gpu, items, timeout=cfg.sample_timeout, desc="correctness",
                                       unit="records", per_gpu=workers_per_gpu(cfg, gpus))
        else:
            results = _without_gpu(items, cfg, executor)
        for item, out in results:
            rec = by_id[item.id]
            if out is None:
                yield rec, "waiting", "needs_gpu", {"compile": brief(comp[rec.id])}
                continue
            yield (rec, *finish(out, cfg, comp[rec.id]))


_COMPILER: dict = {}
_COMPILER_LOCK = threading.Lock()


def _compile_thread() -> queue.Queue:
    """The jobs queue of the process's compile thread, which never ends: the kernel sends a process
    PR_SET_PDEATHSIG when the thread that started it ends, and the CPU pool must outlive a call."""
    with _COMPILER_LOCK:
        if _COMPILER.get("pid") != os.getpid():  # a forked child has no such thread
            jobs: queue.Queue = queue.Queue()

            def serve():
                while True:
                    jobs.get()()

            threading.Thread(target=serve, daemon=True, name="compile_pool").start()
            _COMPILER.update(pid=os.getpid(), jobs=jobs)
        return _COMPILER["jobs"]


def _compiled(executor, tasks, slots: int, compile_fn=None):
    """The compile results in batches, while the compiles go on in a thread: each batch is what has
    finished when the last batch's trials ended, once it fills `slots` workers or the compiles are done."""
    done = object()
    results: queue.Queue = queue.Queue()

    def compile_all():
        try:
            for pair in executor.map_cpu(compile_fn or compile_any, tasks, desc="compile", unit="records"):
                results.put(pair)
        except BaseException as e:  # the caller raises it, as an inline compile would
            results.put(e)
        finally:
            results.put(done)

    _compile_thread().put(compile_all)
    finished = False
    while not finished:
        batch = []
        while not finished and (len(batch) < slots or not batch):
            batch.append(results.get())
            while True:  # and everything else already there
                try:
                    batch.append(results.get_nowait())
                except queue.Empty:
                    break
            failed = next((x for x in batch if isinstance(x, BaseException)), None)
            if failed is not None:
                raise failed
            finished = batch[-1] is done
        yield [pair for pair in batch if pair is not done]


def workers_per_gpu(cfg, n_gpus: int) -> int:
    """`validate.workers_per_gpu`, or when 0 half the cores per GPU, at most 8: each worker keeps about
    one core busy (Python, Triton's JIT) while its GPU work is small."""
    return cfg.workers_per_gpu or max(1, min(8, (os.cpu_count() or 2) // max(1, n_gpus) // 2))


def _prepare_ops(items) -> None:
    """torch's op catalogue (sftbuild.ops.opdb), scanned here and cached before the workers start
    when a record is bound to one of its ops: where no catalogue was shipped or cached for this torch,
    every worker would scan op_db on its own (a minute each), inside its first sample's time limit."""
    names = {t.binding.op for t in items if t.binding}
    name = next((n for n in names if isinstance(n, str) and n.startswith("opdb.")), None)
    if name is None:
        return
    from sftbuild import ops

    try:
        ops.get(name)
    except KeyError:  # not in this torch's op_db: the sample's own verdict says so
        pass


def _prepare_extensions(cache_dir: str) -> None:
    """The precompiled torch header, once, before the pool starts builds that would all wait on it."""
    from sftbuild.trial import extension

    try:
        extension.prepare(os.path.join(cache_dir, "ext"))
    except Exception:  # each build then makes it, or falls back to the full header, on its own
        pass


def _without_gpu(items, cfg, executor):
    """Triton candidates through the interpreter (executor.map_interpreted); everything else waits for
    a GPU (None). Yields (task, result); a task keeps its item's id."""
    tasks = []
    for item in items:
        if not cfg.cpu_interpret or not kinds.for_task(item).interpretable(item) or item.dtypes == ["bfloat16"]:
            yield item, None
            continue
        # the interpreter's bf16 arithmetic is silently wrong, so bf16 is left to the GPU
        tasks.append(dataclasses.replace(item, device="cpu", timing=False,
                                         dtypes=[d for d in item.dtypes or [] if d != "bfloat16"]))
    if tasks:
        yield from executor.map_interpreted(run_interpreted, tasks, timeout=cfg.sample_timeout,
                                            desc="correctness (interpreter)", unit="records")


def run_interpreted(task: TrialTask) -> dict:
    """The interpreter's task: the trials (sftbuild.trial.pyrun). What escapes them (a candidate's
    SystemExit) ends the sample as a one-shot sandbox ends it, and a kept process with it."""
    from sftbuild.trial import pyrun

    try:
        return pyrun.run_python(task)
    except BaseException as e:
        return {"status": "dropped", "reason": "error", "detail": repr(e)[:2000], "recycle": True}


def finish(out, cfg, comp) -> tuple:
    if isinstance(out, WorkerFailure):
        # timeout: hung past the limit; crash: the worker process died; worker_error: it raised
        reason = {"timeout": "timeout", "error": "worker_error"}.get(out.kind, "crash")
        stopped = {"stopped_after_s": out.seconds} if out.seconds is not None else {}
        out = {"status": "dropped", "reason": reason, "detail": out.detail, **stopped}
    verdict = Verdict.of(out)
    status, reason, out = verdict.status, verdict.reason, dict(verdict.payload)
    if status == "ok" and cfg.max_slowdown and out.get("speedup") and out["speedup"] < 1.0 / cfg.max_slowdown:
        status, reason = "dropped", "too_slow"
    out["compile"] = brief(comp)
    return status, reason, out


def _kind_name(binding, language: str) -> str:
    """The candidate kind that runs the record, "" where none does (a compile of the kernel alone)."""
    kind = kinds.of(binding, language)
    return kind.name if kind else ""


def compile_task(rec, cfg, nvcc, cache) -> CompileTask:
    from sftbuild.trial import harness as H

    harnesses = []
    b = rec.binding
    if rec.language == "cuda" and b and b.harness:
        harnesses = [H.render(rec, check, list(b.dtypes) or ALL_DTYPES) for check in H.checks(b)]
    task = CompileTask(id=rec.id, name=rec.name, language=rec.language, kind=_kind_name(b, rec.language),
                       code=rec.code, harnesses=harnesses,
                       launcher=(b.launcher if b else None) or "", include_sets=rec.entry.get("include_sets", []),
                       arch=cfg.arch, headers=rec.entry.get("headers") or {},
                       include_dirs=rec.entry.get("include_dirs") or [], timeout=cfg.compile_timeout, nvcc=nvcc,
                       cache_dir=cache)
    if b and b.harness == "extension_function":  # torch/extension.h's parse nears 30 s
        from sftbuild.trial.extension import lean_tree

        lean = lean_tree(rec.code, task.headers, task.include_dirs)
        if lean:
            task = dataclasses.replace(task, lean={"code": lean[0], "headers": lean[1]})
    return task


def compile_any(task: CompileTask | dict) -> dict:
    """The build the task's candidate kind asks for (sftbuild.trial.kinds): CUDA harnesses, a load_inline
    extension, or the Triton gate; a kernel no kind runs (unbound) gets its language's gate alone."""
    task = CompileTask.of(task)
    kind = kinds.for_task(task)
    if kind.build == "harness" if kind else task.language == "cuda":
        return compile_cuda(task)
    if kind and kind.builds_extension(task):
        return compile_inline(task)
    res = triton_gate(task) if _jit_kernels(task.code) else {"ok": True, "resources": {}, "seconds": 0}
    return {**res, "sos": []}


def _jit_kernels(code: str) -> bool:
    """Whether the module defines a `@...jit` kernel at top level, the only ones the gate compiles: read
    from the syntax tree, nothing evaluated. (A module without any, such as a program pair's solution
    that compiles its kernels from strings, costs no gate process.) Unparsable code goes to the gate,
    which reports the syntax error."""
    import ast

    if "jit" not in code:
        return False
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    return bool(C.jit_functions(tree))


def triton_gate(task: CompileTask | dict) -> dict:
    """The Triton compile gate in a sandboxed process of its own, forked from a kept one with Triton's
    compiler loaded (sandbox.run_forked): compiling a kernel runs its definition. Its result
    is cached by content, as nvcc's is (sftbuild.trial.compile.cached_gate): a module that several
    records or reruns share is compiled once per cache; a gate that timed out or failed is not kept."""
    return C.cached_gate(task, _triton_gate)


def _triton_gate(task: CompileTask) -> dict:
    from sftbuild.sandbox import run_forked

    timeout = max(task.timeout * 2, 60)
    res = run_forked("sftbuild.trial.compile:triton_gate", task, timeout)
    if isinstance(res, WorkerFailure):
        reason = "compile_timeout" if res.kind == "timeout" else "compile_error"
        return {"ok": False, "reason": reason, "log": f"Triton compile gate: {res.kind}: {res.detail}"[:4000],
                "seconds": 0.0, "cached": False}
    if res.get("status") == "dropped":  # the gate itself raised
        return {"ok": False, "reason": "compile_error", "log": f"Triton compile gate: {res.get('detail', '')}",
                "seconds": 0.0, "cached": False}
    return {**{k: v for k, v in res.items() if k not in ("_exit", "_log")}, "keep": True}


def compile_inline(task: CompileTask) -> dict:
    """Build a KernelBench solution's load_inline extension ahead of the GPU run, when its sources
    are string constants; otherwise the GPU worker builds it through the same cache."""
    from sftbuild.trial import extension, inline_sources

    found = inline_sources.extract(task.code)
    if found is None:
        return {"ok": True, "resources": {}, "seconds": 0, "sos": [], "prebuilt": False}
    res = extension.build(**found, cache_dir=os.path.join(task.cache_dir, "ext"), arch=task.arch,
                          nvcc=task.nvcc, timeout=max(task.timeout, 120))
    if not res["ok"] and res.get("reason") == "link_error":  # no CUDA torch here: the GPU worker links
        res = {**res, "ok": True}
    return {**res, "resources": {}, "sos": [], "prebuilt": True}


def compile_cuda(task: CompileTask | dict) -> dict:
    """`_compile_cuda`, on the lean torch header first where the task has it (an extension function's
    record), and on the code as it is where that fails: the lean header is ours, its gaps are not
    the kernel's."""
    task = CompileTask.of(task)
    if task.lean:
        res = _compile_cuda(dataclasses.replace(task, **task.lean))
        if res.get("ok") and not res.get("harness_failed"):
            return {**res, "header": "lean"}
    return _compile_cuda(task)


def _compile_cuda(task: CompileTask) -> dict:
    """One launchable .so per check; the kernel alone (the gate) only where there is no harness, a
    harness failed, or a harness took longer than the gate's budget. A harness includes the kernel's
    code, so a harness that compiles has compiled the kernel too (its ptxas figures cover the
    kernel's); when one fails, the gate says whose fault it is: the kernel's (the gate's
    compile_error), a guard's (`compiled_out`) or ours (`harness_failed`); when one is slow, whether
    the kernel alone compiles within the gate's budget (else `compile_timeout`)."""
    alone = dataclasses.replace(task, harness=None, harnesses=[])  # the kernel's own gate
    if not task.harnesses:
        return {**C.compile_task(alone), "sos": []}
    sos, resources, seconds, first = [], {}, 0.0, None
    for src in task.harnesses:
        # the harness is our scaffolding around torch headers, not the candidate: it gets a wider budget
        res = C.compile_task(dataclasses.replace(alone, harness=src, timeout=max(task.timeout * 4, 120)))
        seconds += res["seconds"]
        if not res["ok"]:
            gate = C.compile_task(alone)
            if not gate["ok"]:
                return {**gate, "sos": []}
            if any(compiled_out(res.get("log", ""), n) for n in (task.name, task.launcher)):
                return {**res, "reason": "compiled_out", "sos": []}
            return {**res, "sos": [], "harness_failed": True}
        if res["seconds"] > task.timeout:  # the harness outlasted the kernel's own budget: the gate decides
            gate = C.compile_task(alone)
            if not gate["ok"]:
                return {**gate, "sos": []}
        first = first or res
        if res["so"]:
            sos.append(res["so"])
        resources = _merge(resources, res["resources"])
    return {**first, "so": None, "sos": sos, "harnesses_built": len(task.harnesses), "resources": resources,
            "seconds": round(seconds, 3)}


def compiled_out(log: str, kernel: str) -> bool:
    """The harness names the kernel (or the file's launcher of it, for a file-reference binding) and
    the compiler says it does not exist: its code is there, so a preprocessor guard removed it on
    this toolchain (torch 2.11's warp merge sort tests CUDA_VERSION >= 110600, false on every CUDA
    release; llm.c's fp32-only launchers sit under `#ifndef ENABLE_BF16` in files that define it).
    Not our harness's fault, nor the kernel's."""
    k = re.escape(kernel)
    return bool(kernel) and bool(re.search(rf'(has no member|identifier) "{k}"( is undefined)?', log))


def _merge(a: dict, b: dict) -> dict:
    out = {k: max(a.get(k, 0), b.get(k, 0)) for k in ("registers", "smem", "stack", "spill_stores", "spill_loads")}
    out["kernels"] = {**a.get("kernels", {}), **b.get("kernels", {})}
    return out


def after_compile(rec, res, cfg):
    if isinstance(res, WorkerFailure):
        return ("dropped", "compile_error", {"detail": res.detail})
    if not res["ok"]:
        reason = res.get("reason") or "compile_error"
        if res.get("harness_failed") and reason != "compile_timeout":
            reason = "harness_error"
        log = res.get("log", "")
        first = res.get("where") or next((ln.strip() for ln in log.splitlines() if "error" in ln.lower()),
                                         log.strip()[:300])
        return ("dropped", reason, {"log": log[-4000:], "detail": ("harness: " if res.get("harness_failed") else "")
                                    + first[:300]})
    r = res.get("resources") or {}
    over = []
    if r.get("registers", 0) > cfg.max_registers:
        over.append(f"{r['registers']} registers > {cfg.max_registers}")
    if r.get("spill_stores", 0) + r.get("spill_loads", 0) > cfg.max_spill_bytes:
        over.append(f"{r['spill_stores'] + r['spill_loads']} spill bytes > {cfg.max_spill_bytes}")
    if r.get("smem", 0) > cfg.shared_memory_budget:
        over.append(f"{r['smem']} bytes shared memory > {cfg.shared_memory_budget}")
    if r.get("stack", 0) > cfg.max_stack_bytes:
        over.append(f"{r['stack']} bytes stack > {cfg.max_stack_bytes}")
    if over:
        return ("dropped", "resources", {"compile": brief(res), "why": "; ".join(over)})
    if rec.language == "cuda" and not res["sos"] and not res.get("harnesses_built"):
        return ("dropped", "unbound", {"compile": brief(res)})
    return None


def brief(res) -> dict:
    if isinstance(res, WorkerFailure):
        return {"failure": res.kind}
    return {"seconds": res.get("seconds"), "cached": res.get("cached"), "resources": res.get("resources"),
            **{k: res[k] for k in ("aot", "header", "phases") if res.get(k)}}


def task_dtypes(binding: Binding | None, mode: str = "declared") -> list[str]:
    """The dtypes a record's trials may use: its binding's, a KernelBench pair's declared by its
    get_inputs() (under `validate.dtypes: declared`), else every float dtype (an op's own list, or
    what the reference runs at, narrows them: pyrun.program_dtypes)."""
    if binding and binding.dtypes:
        return list(binding.dtypes)
    if binding and binding.kind == "kernelbench" and binding.reference and mode == "declared":
        from sftbuild.ops.programs import declared_dtypes

        return declared_dtypes(binding.reference)
    return list(ALL_DTYPES)


def gpu_task(rec, res, cfg, cache_dir) -> TrialTask:
    binding = rec.binding
    runtime_checks = cfg.runtime_checks
    if binding and binding.kind == "inductor" and (rec.entry or {}).get("extern"):
        # one kernel run inside its program: the library calls are the program's host code, not the record's
        runtime_checks = {**(runtime_checks or {}), "library_kernels": False}
    return TrialTask(
        id=rec.id, language=rec.language, kind=_kind_name(binding, rec.language), code=rec.code,
        sos=res.get("sos", []), binding=binding, entry=rec.entry,
        dtypes=task_dtypes(binding, cfg.dtypes), program_dtypes=cfg.dtypes,
        tree=(rec.provenance or {}).get("tree"), path=(rec.provenance or {}).get("path"),
        shapes=cfg.shapes, seeds=cfg.seeds, timing=cfg.timing, warmup=cfg.warmup,
        runs=cfg.runs, compile_baseline=cfg.compile_baseline, runtime_checks=runtime_checks,
        max_speedup=cfg.max_speedup, ext_cache=os.path.join(cache_dir, "ext"),
        memcheck=cfg.memcheck if memcheck.chosen(rec.id, cfg.memcheck, cfg.memcheck_fraction) else "off",
        racecheck=cfg.racecheck, memcheck_timeout=cfg.memcheck_timeout, sample_timeout=cfg.sample_timeout)


def run_on_gpu(task: TrialTask | dict) -> dict:
    """The GPU worker's task: trials, then compute-sanitizer on one small trial when chosen."""
    import importlib
    import time

    started = time.monotonic()
    task = TrialTask.of(task)
    runner = kinds.for_task(task).runner  # the trials of the task's candidate kind
    mod, _, fn = runner.partition(":")
    out = getattr(importlib.import_module(mod), fn)(task)
    seconds = {"trials": round(time.monotonic() - started, 3)}
    env = _env()
    if out.get("status") == "ok" and task.memcheck != "off":
        tools = memcheck.tools_for(task.code, task.racecheck)
        mc = memcheck.run(task, runner, tools, task.memcheck_timeout)
        out["memcheck"] = mc
        if mc.get("ok") is False:  # reason: the tool (memcheck, racecheck, synccheck), with its one-line message
            out.update(status="dropped", reason=mc.get("tool") or "memcheck",
                       detail=mc.get("finding") or mc.get("log") or mc.get("why", ""))
    elif out.get("reason") == "out_of_bounds":
        name_fault(task, runner, out, task.sample_timeout - (time.monotonic() - started))
    if "memcheck" in out:
        seconds["memcheck"] = round(time.monotonic() - started - seconds["trials"], 3)
    out["env"], out["seconds"] = env, seconds  # the sample's time in its worker, by phase
    return out


def _prefork(task: TrialTask) -> None:
    """Before a GPU or interpreter worker forks the processes that run candidates: the runner's imports
    and torch's first-use patches, made once in the process each is forked from, without a CUDA context
    (a forked process cannot use its parent's)."""
    import importlib

    from sftbuild.trial import pristine

    importlib.import_module(kinds.for_task(TrialTask.of(task)).runner.partition(":")[0])
    pristine.warm()


run_on_gpu.prefork = run_interpreted.prefork = _prefork


def name_fault(task: TrialTask, runner: str, out: dict, left: float) -> None:
    """A record whose guards tripped: memcheck runs on it to name the fault, within what is `left` of the
    sample's time (less a margin for the reply); the reason stays out_of_bounds (a small trial may not
    reach the fault), the tool's own message joins the detail."""
    budget = min(task.memcheck_timeout, left - 10.0)
    if budget < 10.0:
        out["memcheck"] = {"ok": None, "why": "no time left in the sample to run memcheck"}
        return
    mc = memcheck.run(task, runner, ("memcheck",), budget)
    out["memcheck"] = mc
    if mc.get("log") and mc.get("finding"):  # the tool ran and reported: not a run that timed out
        out["detail"] = f"{out.get('detail', '')}; memcheck: {mc['finding']}"


def _env() -> dict:
    import torch

    env = {"torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        env["triton"] = None
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        try:
            env["driver"] = torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None
        except Exception:
            env["driver"] = None
    return env
