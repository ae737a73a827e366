"""Executors run task functions; stages never know which executor runs them.

A task function is a module-level function taking one picklable item and
returning one picklable result. Two kinds of work exist:

  map_cpu          compile, parse, hash: a process pool across the cores
  map_gpu          untrusted kernel runs: one long-lived worker process per GPU
  map_interpreted  untrusted Triton runs without a GPU: Triton's interpreter in sandboxed CPU
                   processes, as many as map_cpu uses (one per core by default)

A GPU worker that hangs past its timeout, crashes, or returns a result asking
for a fresh process (`recycle`: a sticky CUDA fault, or a candidate that changed
its process) is killed and replaced; a hung or crashed item gets a
`WorkerFailure` as its result and the run continues. GPU workers run untrusted code:
each is a sandboxed process (sftbuild.sandbox.start_worker) whose results are read
back as plain data. Every worker, of either kind, dies with the process that started it.

GPU workers outlive one `map_gpu` call and are reused by the next (their CUDA context
and JIT caches stay warm, which a reward server called every training step depends
on), as long as the task function is the same and the sandbox already binds the
folders the new items name: otherwise the worker starts afresh. LocalExecutor keeps
its interpreter workers the same way (the seconds a fresh process spends importing
torch and Triton are paid once, not per item), and replaces them on the same terms;
the base executor runs each interpreted item in a fresh one-shot sandbox.

A task may also bound one step of its own work from inside the worker
(`report_deadline`): a step that runs past its bound ends the item the same way, as a
timeout, long before the item's own timeout.
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import functools
import multiprocessing as mp
import os
import time
import traceback
from multiprocessing.connection import wait
from typing import Any, Callable, Iterable, Iterator

from tqdm import tqdm

from sftbuild import sandbox
from sftbuild.sandbox import WorkerFailure, die_with_parent  # noqa: F401  (re-exported)


def report_deadline(seconds: float | None, why: str = "") -> None:
    """Called by a task inside a GPU worker: what it does next must end within `seconds`, or the parent
    kills the worker and the item's result is WorkerFailure("timeout", why); None lifts the bound. The
    parent enforces it, so a worker stuck in a call that never returns (a hung kernel's synchronize)
    is stopped all the same. The item's own timeout still holds. Does nothing outside a GPU worker."""
    conn = sandbox.worker_connection()
    if conn is not None:
        conn.send(("deadline", (seconds, why)))


@dataclasses.dataclass
class _Step:
    """A bound on a task's current step, as reported by `report_deadline`."""

    seconds: float | None
    why: str


class Executor:
    name = "base"

    @property
    def gpu_count(self) -> int:
        return 0

    def map_cpu(self, fn: Callable, items: Iterable, desc: str = "", unit: str = "items") -> Iterator[tuple[Any, Any]]:
        """`fn(item)` on the CPU pool; results as they finish. Every map shows a bar of `unit`s done, with
        a rate and an ETA, unless the executor was made without progress."""
        raise NotImplementedError

    def map_gpu(self, fn: Callable, items: Iterable, timeout: float, desc: str = "",
                per_gpu: int = 1, unit: str = "items") -> Iterator[tuple[Any, Any]]:
        """`fn(item)` in GPU workers; `per_gpu` workers share each GPU (for work that times nothing,
        such as probing, where Triton's JIT on the CPU is the bottleneck)."""
        raise NotImplementedError

    def map_interpreted(self, fn: Callable, items: Iterable, timeout: float,
                        desc: str = "", unit: str = "items") -> Iterator[tuple[Any, Any]]:
        """`fn(item)` under Triton's interpreter (INTERPRETER_ENV) in sandboxed CPU processes without a
        GPU, as many at a time as there are cores; results in the order they finish, a WorkerFailure for
        an item that hung past `timeout` or whose process died. Step deadlines (`report_deadline`) are
        not enforced: the interpreter runs a kernel far slower than the reference's time says. Here
        each item gets a fresh process (sandbox.run_isolated)."""
        items = list(items)
        if not items:
            return
        func = f"{fn.__module__}:{fn.__qualname__}"

        def one(item):
            return item, sandbox.run_isolated(func, item, timeout, env=INTERPRETER_ENV)

        with cf.ThreadPoolExecutor(_interpreter_slots(len(items))) as pool:
            yield from pool.map(one, items)

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# One torch thread each: interpreter processes already run one per core, and torch's default of a
# thread per core in each of them oversubscribes the cores, where idle OpenMP threads spin (a tolerance
# comparison of 2^16 elements took 15 times the CPU time with 2 threads as with 1 on a loaded 2-core host)
# No GPU either: on a host that has one (`gpus: none`), a CUDA context made under the sandbox's address-space
# limit fails ("out of memory"), and Triton's interpreter would find the driver and use it
INTERPRETER_ENV = {"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def progress_bar(total: int, desc: str, unit: str, enabled: bool) -> tqdm:
    """A bar of `total` `unit`s: how many are done, their rate and the time left."""
    return tqdm(total=total, desc=desc, unit=f" {unit}", disable=not enabled, leave=False)


def _interpreter_slots(n_items: int, cpu_workers: int = 0) -> int:
    """Interpreter processes for `n_items`: no more than the items, nor than `cpu_workers` (the CPU
    processes the executor may run; 0: one per core). Each costs seconds of imports to start."""
    return max(1, min(n_items, cpu_workers or os.cpu_count() or 1))


def visible_gpus(spec: str = "auto") -> list[str]:
    """GPU ids to use, without creating a CUDA context in this process."""
    if spec == "none":
        return []
    if spec != "auto":
        return [s.strip() for s in spec.split(",") if s.strip()]
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [s.strip() for s in env.split(",") if s.strip() and s.strip() != "-1"]
    try:
        import torch

        n = torch.cuda.device_count() if torch.version.cuda else 0
    except Exception:
        n = 0
    return [str(i) for i in range(n)]


def gpu_ids() -> list[str]:
    """The indices of the GPUs on this machine (nvidia-smi, else torch), without a CUDA context."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=20)
            if out.returncode == 0:
                return [line.strip() for line in out.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        import torch

        n = torch.cuda.device_count() if torch.version.cuda else 0
    except Exception:
        n = 0
    return [str(i) for i in range(n)]


def missing_gpus(spec: str) -> tuple[list[str], list[str]]:
    """(ids `spec` names that this machine lacks, the ids it has); nothing is missing for auto or none."""
    if spec in ("auto", "none"):
        return [], []
    have = gpu_ids()
    return [g for g in visible_gpus(spec) if g not in have], have


class LocalExecutor(Executor):
    name = "local"

    def __init__(self, cpu_workers: int = 0, gpus: str = "auto", progress: bool = True):
        self.cpu_workers = cpu_workers or os.cpu_count() or 1
        self._gpu_spec = gpus
        self.progress = progress
        self._pool: cf.ProcessPoolExecutor | None = None
        self._workers: list[GpuWorker] = []  # kept across map_gpu calls; the first n serve a call
        self._interpreters: list[InterpreterWorker] = []  # kept across map_interpreted calls, the same way

    @functools.cached_property
    def gpus(self) -> list[str]:
        """The GPU ids this executor runs on, found when first asked: a command that runs nothing on a
        GPU (status, dedupe, review, export) does not import torch to count them (2 CPU-s a start)."""
        return visible_gpus(self._gpu_spec)

    def gpu_workers(self, n: int, ro=(), rw=()) -> list["GpuWorker"]:
        """n workers spread over the GPUs (worker i on GPU i mod count), started where missing with the
        folders `ro` and `rw` bound (map_gpu restarts a kept one whose sandbox lacks its items' folders)."""
        while len(self._workers) < n:
            self._workers.append(GpuWorker(self.gpus[len(self._workers) % len(self.gpus)], ro, rw))
        return self._workers[:n]

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def map_cpu(self, fn, items, desc="", unit="items"):
        items = list(items)
        if not items:
            return
        bar = progress_bar(len(items), desc or fn.__name__, unit, self.progress)
        if self.cpu_workers == 1 or len(items) == 1:
            for item in items:
                yield item, _call(fn, item)
                bar.update()
            bar.close()
            return
        if self._pool is None:
            # workers die with this process: a kill -9 of the run leaves no pool behind
            self._pool = cf.ProcessPoolExecutor(self.cpu_workers, mp_context=mp.get_context("spawn"),
                                                initializer=die_with_parent, initargs=(os.getpid(),))
        futures = {self._pool.submit(_call, fn, item): item for item in items}
        given = set()
        try:
            for fut in cf.as_completed(futures):
                given.add(fut)
                try:
                    res = fut.result()
                except Exception as e:  # a worker process died: the pool is broken for every item in it
                    self._pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = None
                    yield futures[fut], WorkerFailure("crash", repr(e))
                    bar.update()
                    # what had finished before the break is given; the rest runs again on a fresh pool
                    rest = []
                    for f, item in futures.items():
                        if f in given:
                            continue
                        if f.done() and not f.cancelled() and f.exception() is None:
                            yield item, f.result()
                            bar.update()
                        else:
                            rest.append(item)
                    yield from self.map_cpu(fn, rest, desc, unit)
                    return
                yield futures[fut], res
                bar.update()
        finally:
            bar.close()

    def map_gpu(self, fn, items, timeout, desc="", per_gpu=1, unit="items"):
        items = list(items)
        if not items:
            return
        if not self.gpus:
            raise RuntimeError("map_gpu called with no visible GPU")
        ro, rw = sandbox.task_paths(items)
        workers = self.gpu_workers(min(len(self.gpus) * max(1, per_gpu), len(items)), ro, rw)
        yield from self._serve(workers, fn, items, timeout, desc, ro, rw, steps=True, unit=unit)

    def map_interpreted(self, fn, items, timeout, desc="", unit="items"):
        """As Executor.map_interpreted, in kept InterpreterWorkers: one whose item hung, crashed or asked
        for it (`recycle`: the candidate changed its process) is replaced before its next item."""
        items = list(items)
        if not items:
            return
        ro, rw = sandbox.task_paths(items)
        slots = _interpreter_slots(len(items), self.cpu_workers)
        while len(self._interpreters) < slots:
            self._interpreters.append(InterpreterWorker(ro, rw))
        workers = self._interpreters[:slots]
        yield from self._serve(workers, fn, items, timeout, desc, ro, rw, steps=False, unit=unit)

    def _serve(self, workers, fn, items, timeout, desc, ro, rw, steps: bool, unit: str = "items"):
        """`fn(item)` for each item in the kept `workers`, each item within `timeout`, and each of its
        steps within what it reports when `steps`; a worker is restarted where it must be."""
        for w in workers:
            if w.fn not in (None, fn) or not w.reaches(ro, rw):  # no state carried from one kind of work
                w.ro, w.rw = sorted(set(w.ro) | set(ro)), sorted(set(w.rw) | set(rw))
                w.restart()
            elif w.retired:
                w.start()
            w.fn = fn
        bar = progress_bar(len(items), desc or fn.__name__, unit, self.progress)
        queue = list(reversed(items))
        busy: dict[GpuWorker, _Busy] = {}
        try:
            while queue or busy:
                for w in workers:
                    if w not in busy and queue:
                        item = queue.pop()
                        w.send(fn, item)
                        busy[w] = _Busy(item, time.monotonic() + timeout)
                ready = wait([w.conn for w in busy], timeout=0.5)
                now = time.monotonic()
                for w in list(busy):
                    b = busy[w]
                    item = b.item
                    if w.conn in ready:
                        result, recycle = w.receive()
                        if isinstance(result, _Step):
                            if steps:
                                b.step(result, now)
                            continue
                    elif now > b.deadline:
                        result, recycle = WorkerFailure("timeout", f"no result within {timeout:.0f} s"), True
                    elif b.step_deadline is not None and now > b.step_deadline:
                        result, recycle = WorkerFailure("timeout", b.why, round(now - b.first_step, 1)), True
                    else:
                        continue
                    del busy[w]
                    if recycle and queue:
                        w.restart()
                    elif recycle:  # no item waits for a fresh process: the next call starts one
                        w.retire()
                    bar.update()
                    yield item, result
        finally:
            bar.close()
            for w in busy:  # left mid-item (the caller stopped early): its result would arrive late
                w.retire()

    def close(self):
        for w in self._workers + self._interpreters:
            w.stop()
        self._workers, self._interpreters = [], []
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


@dataclasses.dataclass
class _Busy:
    """An item in a GPU worker: its own deadline and the bound of its current step, if any."""

    item: Any
    deadline: float
    step_deadline: float | None = None
    why: str = ""
    first_step: float = 0.0

    def step(self, step: _Step, now: float) -> None:
        if step.seconds is None:
            self.step_deadline = None
            return
        self.first_step = self.first_step or now
        self.step_deadline, self.why = now + step.seconds, step.why


wants_recycle = sandbox.asks_renewal  # a result that asks for a fresh worker process


def _call(fn, item):
    try:
        return fn(item)
    except Exception:
        return WorkerFailure("error", traceback.format_exc(limit=8))


class GpuWorker:
    """A long-lived sandboxed process bound to one GPU through CUDA_VISIBLE_DEVICES; `ro`/`rw`: the
    folders its tasks read and write (compiled objects, extension caches, package trees).

    A renewing worker (`renews`, sandbox.start_worker's `renew`) is replaced, after an item that asked
    for a fresh process or whose process died, by a fork of its first process, in the same sandbox;
    only a timeout, or a reply that cannot be trusted, starts a new sandbox."""

    renews = True

    def __init__(self, gpu: str, ro=(), rw=()):
        self.gpu, self.ro, self.rw = gpu, list(ro), list(rw)
        self.proc = None
        self.fn = None  # the task function it has run
        self.mark = 0  # where the current item's output starts (Proc.output_mark)
        self.start()

    def reaches(self, ro, rw) -> bool:
        """Whether its sandbox binds every folder in `ro` (read-only or writable) and `rw` (writable)."""
        return sandbox.binds(self.ro, self.rw, ro, rw)

    def start(self):
        self.conn, self.proc = self.launch()
        self.retired = False

    def retire(self):
        """Stop the process; the next map call that takes this worker starts a fresh one. (A worker
        replaced when no item waits for it would cost seconds of imports, torch's and Triton's, for
        nothing where the executor is closed next.)"""
        self.stop()
        self.retired = True

    def launch(self):
        # workers sharing a GPU take turns at timing through a lock file all of their sandboxes bind
        locks = os.path.join(sandbox.host_cache(), "locks")
        os.makedirs(locks, exist_ok=True)
        # Inductor output code compiles its kernels in this process: a pool of compile processes per worker
        # (one per core, each importing torch) would cost seconds and gigabytes for each worker started
        triton, built = sandbox.triton_cache(), sandbox.inductor_cache()
        env = {"CUDA_VISIBLE_DEVICES": self.gpu, "TORCHINDUCTOR_COMPILE_THREADS": "1", "TRITON_CACHE_DIR": triton,
               "TORCHINDUCTOR_CACHE_DIR": built,
               "SFTBUILD_TIMING_LOCK": os.path.join(locks, f"timing-gpu{self.gpu.replace(',', '_')}.lock")}
        return sandbox.start_worker(env, ro=self.ro, rw=[*self.rw, locks, triton, built], renew=self.renews)

    def send(self, fn, item):
        self.mark = self.proc.output_mark()  # the output this item's work writes starts here
        try:
            self.conn.send((fn, item))
        except (BrokenPipeError, OSError):
            self.restart()
            self.mark = self.proc.output_mark()
            self.conn.send((fn, item))

    def receive(self) -> tuple[Any, bool]:
        try:
            status, payload = self.conn.recv()
        except Exception as e:  # closed, or not a plain result: the worker is not to be trusted further
            closed = isinstance(e, (EOFError, ConnectionError))
            # a worker that closed its end is exiting: its exit code names the fault (a CUDA context
            # with much memory can take seconds to tear down); one that sent garbage is stopped now
            code = self.proc.wait(30 if closed else 0.5)
            if not closed:
                return WorkerFailure("crash", f"the worker's reply could not be read ({type(e).__name__}: "
                                              f"{str(e)[:200]}); the worker was replaced"), True
            if self.proc.timed_out:
                return WorkerFailure("crash", "the worker closed its connection and did not exit within 30 s"), True
            return WorkerFailure("crash", self.exit_detail(code)), True
        if status == "ended":  # a renewing worker's serving process died mid-item; a fresh one serves next
            return WorkerFailure("crash", self.exit_detail(payload)), False
        if status == "deadline":
            return _Step(*payload), False
        result = payload if status == "ok" else WorkerFailure("error", str(payload))
        recycle = status != "ok" or wants_recycle(payload)
        if recycle and self.renews:
            return result, not self._renewed()
        return result, recycle

    def _renewed(self) -> bool:
        """Whether the serving process that asked for its replacement ended as asked (the first process
        then forks a fresh one); else the whole worker is to be restarted."""
        if not wait([self.conn], 30):
            return False
        try:
            status, code = self.conn.recv()
        except Exception:
            return False
        return status == "ended" and code == sandbox.RENEW_EXIT

    def exit_detail(self, code: int | None) -> str:
        """`worker exit code 1: <its last lines of output>`: how the worker ended and what the item's
        work last printed (a check macro's file:line and CUDA error, a failed assertion)."""
        said = sandbox.last_lines(self.proc.output_since(self.mark))
        return f"worker {self.proc.ended_why(code)}" + (f": {said}" if said else "")

    def restart(self):
        self.stop()
        self.start()

    def stop(self):
        if self.proc is not None:
            self.proc.close()
        try:
            self.conn.close()
        except OSError:
            pass


class InterpreterWorker(GpuWorker):
    """A long-lived sandboxed CPU process running Triton's interpreter (INTERPRETER_ENV), with no GPU
    device bound: the same sandbox and address-space limit as a one-shot interpreter run."""

    def __init__(self, ro=(), rw=()):
        super().__init__("", ro, rw)

    def launch(self):
        return sandbox.start_worker(dict(INTERPRETER_ENV), ro=self.ro, rw=self.rw, gpu=False, renew=self.renews)
