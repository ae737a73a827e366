"""Executors run task functions; stages never know which executor runs them.

A task function is a module-level function taking one picklable item and
returning one picklable result. Two kinds of work exist:

  map_cpu  compile, parse, hash: a process pool across the cores
  map_gpu  untrusted kernel runs: one long-lived worker process per GPU

A GPU worker that hangs past its timeout, crashes, or reports a sticky CUDA
fault is killed and replaced; that item gets a `WorkerFailure` as its result
and the run continues. GPU workers run untrusted code: each is a sandboxed process
(sftbuild.sandbox.start_worker) whose results are read back as plain data. Every worker,
of either kind, dies with the process that started it.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import time
import traceback
from multiprocessing.connection import wait
from typing import Any, Callable, Iterable, Iterator

from tqdm import tqdm

from sftbuild import sandbox
from sftbuild.sandbox import WorkerFailure, die_with_parent  # noqa: F401  (re-exported)


class Executor:
    name = "base"

    @property
    def gpu_count(self) -> int:
        return 0

    def map_cpu(self, fn: Callable, items: Iterable, desc: str = "") -> Iterator[tuple[Any, Any]]:
        raise NotImplementedError

    def map_gpu(self, fn: Callable, items: Iterable, timeout: float, desc: str = "",
                per_gpu: int = 1) -> Iterator[tuple[Any, Any]]:
        """`fn(item)` in GPU workers; `per_gpu` workers share each GPU (for work that times nothing,
        such as probing, where Triton's JIT on the CPU is the bottleneck)."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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


class LocalExecutor(Executor):
    name = "local"

    def __init__(self, cpu_workers: int = 0, gpus: str = "auto", progress: bool = True):
        self.cpu_workers = cpu_workers or os.cpu_count() or 1
        self.gpus = visible_gpus(gpus)
        self.progress = progress
        self._pool: cf.ProcessPoolExecutor | None = None

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def map_cpu(self, fn, items, desc=""):
        items = list(items)
        if not items:
            return
        bar = tqdm(total=len(items), desc=desc or fn.__name__, disable=not self.progress, leave=False)
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
        try:
            for fut in cf.as_completed(futures):
                try:
                    res = fut.result()
                except Exception as e:  # a worker process died
                    res = WorkerFailure("crash", repr(e))
                    self._pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = None
                    yield futures[fut], res
                    bar.update()
                    # resubmit what had not finished on a fresh pool
                    rest = [futures[f] for f in futures if not f.done()]
                    yield from self.map_cpu(fn, rest, desc)
                    return
                yield futures[fut], res
                bar.update()
        finally:
            bar.close()

    def map_gpu(self, fn, items, timeout, desc="", per_gpu=1):
        items = list(items)
        if not items:
            return
        if not self.gpus:
            raise RuntimeError("map_gpu called with no visible GPU")
        ro, rw = sandbox.task_paths(items)
        workers = [GpuWorker(g, ro, rw) for g in (list(self.gpus) * max(1, per_gpu))[: len(items)]]
        bar = tqdm(total=len(items), desc=desc or fn.__name__, disable=not self.progress, leave=False)
        queue = list(reversed(items))
        busy: dict[GpuWorker, tuple[Any, float]] = {}
        try:
            while queue or busy:
                for w in workers:
                    if w not in busy and queue:
                        item = queue.pop()
                        w.send(fn, item)
                        busy[w] = (item, time.monotonic() + timeout)
                ready = wait([w.conn for w in busy], timeout=0.5)
                now = time.monotonic()
                for w in list(busy):
                    item, deadline = busy[w]
                    if w.conn in ready:
                        result, recycle = w.receive()
                    elif now > deadline:
                        result, recycle = WorkerFailure("timeout", f"no result within {timeout:.0f} s"), True
                    else:
                        continue
                    del busy[w]
                    if recycle:
                        w.restart()
                    bar.update()
                    yield item, result
        finally:
            bar.close()
            for w in workers:
                w.stop()

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


def wants_recycle(result) -> bool:
    """A result that asks for a fresh worker process (a sticky CUDA fault poisons the context)."""
    return bool(getattr(result, "recycle", False) or (isinstance(result, dict) and result.get("recycle")))


def _call(fn, item):
    try:
        return fn(item)
    except Exception:
        return WorkerFailure("error", traceback.format_exc(limit=8))


class GpuWorker:
    """A long-lived sandboxed process bound to one GPU through CUDA_VISIBLE_DEVICES; `ro`/`rw`: the
    folders its tasks read and write (compiled objects, extension caches, package trees)."""

    def __init__(self, gpu: str, ro=(), rw=()):
        self.gpu, self.ro, self.rw = gpu, list(ro), list(rw)
        self.proc = None
        self.start()

    def start(self):
        self.conn, self.proc = sandbox.start_worker({"CUDA_VISIBLE_DEVICES": self.gpu}, ro=self.ro, rw=self.rw)

    def send(self, fn, item):
        try:
            self.conn.send((fn, item))
        except (BrokenPipeError, OSError):
            self.restart()
            self.conn.send((fn, item))

    def receive(self) -> tuple[Any, bool]:
        try:
            status, payload = self.conn.recv()
        except Exception:  # closed, or not a plain result: the worker is not to be trusted further
            code = self.proc.wait(5)
            return WorkerFailure("crash", f"worker {sandbox.exit_reason(code)}"), True
        if status == "ok":
            return payload, wants_recycle(payload)
        return WorkerFailure("error", str(payload)), True

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
