"""Run the same task functions on a Ray cluster (`--executor ray`).

map_cpu: one Ray task per item (compiles, static checks).
map_gpu: one long-lived actor per GPU in the cluster (num_gpus=1, so Ray pins it to its own
device), fed one item at a time, as the local executor feeds its GPU workers. The actor is
killed and replaced after a timeout, a crash, or a result that asks for a fresh process (a
sticky CUDA fault), so one bad kernel costs one verdict. A fresh actor's start-up (imports,
CUDA context) does not count against the per-item timeout.
"""
from __future__ import annotations

import time

from sftbuild.executor import Executor, WorkerFailure, _call, progress_bar, wants_recycle


class _Slot:
    """The item-at-a-time body of a GPU actor."""

    def ready(self) -> bool:
        return True

    def call(self, fn, item):
        return _call(fn, item)


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, address: str = "", progress: bool = True, **init_kw):
        import ray

        self.ray = ray
        if not ray.is_initialized():
            ray.init(address=address or None, ignore_reinit_error=True, log_to_driver=False, **init_kw)
        self.progress = progress
        self._cpu = ray.remote(max_retries=0)(_call)
        self._actor = ray.remote(num_gpus=1, max_restarts=0, max_task_retries=0)(_Slot)

    @property
    def gpu_count(self) -> int:
        return int(self.ray.cluster_resources().get("GPU", 0))

    def map_cpu(self, fn, items, desc="", unit="items"):
        ray = self.ray
        items = list(items)
        refs = {self._cpu.remote(fn, item): item for item in items}
        with progress_bar(len(items), desc or fn.__name__, unit, self.progress) as bar:
            while refs:
                done, _ = ray.wait(list(refs), num_returns=1)
                for ref in done:
                    item = refs.pop(ref)
                    bar.update()
                    yield item, self._get(ref)

    def map_gpu(self, fn, items, timeout, desc="", per_gpu=1, unit="items"):  # Ray packs one actor per GPU
        items = list(items)
        if not items:
            return
        if not self.gpu_count:
            raise RuntimeError("map_gpu called with no GPU in the Ray cluster")
        ray = self.ray
        queue = list(reversed(items))
        slots = [_GpuActor(self._actor) for _ in range(min(self.gpu_count, len(items)))]
        bar = progress_bar(len(items), desc or fn.__name__, unit, self.progress)
        try:
            while queue or any(s.item is not None for s in slots):
                for s in slots:
                    if s.idle() and queue:
                        s.submit(fn, queue.pop(), timeout)
                pending = [r for s in slots for r in (s.starting, s.ref) if r is not None]
                ray.wait(pending, num_returns=1, timeout=0.5)
                done = set(ray.wait(pending, num_returns=len(pending), timeout=0)[0])
                now = time.monotonic()
                for s in slots:
                    if s.starting is not None and s.starting in done:
                        s.started(self._get(s.starting))
                    if s.ref is None or s.deadline is None:
                        continue
                    if s.ref in done:
                        result = self._get(s.ref)
                        recycle = isinstance(result, WorkerFailure) and result.kind == "crash" or \
                            wants_recycle(result)
                    elif now > s.deadline:
                        result, recycle = WorkerFailure("timeout", f"no result within {timeout:.0f} s"), True
                    else:
                        continue
                    item = s.finish(recycle)
                    bar.update()
                    yield item, result
        finally:
            bar.close()
            for s in slots:
                s.kill()

    def _get(self, ref):
        try:
            return self.ray.get(ref)
        except Exception as e:  # the actor or worker died, or raised outside _call
            return WorkerFailure("crash", repr(e)[:2000])


class _GpuActor:
    """One GPU actor and the item it is working on; an item is sent once the actor is up."""

    STARTS = 3  # an actor that fails to come up this many times in a row stops the run

    def __init__(self, cls):
        self.cls, self.failed_starts = cls, 0
        self.item = self.ref = self.deadline = self._pending = None
        self._spawn()

    def _spawn(self):
        self.actor = self.cls.remote()
        self.starting = self.actor.ready.remote()

    def idle(self) -> bool:
        return self.item is None

    def submit(self, fn, item, timeout):
        self.item, self._pending = item, (fn, item, timeout)
        if self.starting is None:
            self._send()

    def started(self, ok):
        self.starting = None
        if isinstance(ok, WorkerFailure):
            self.failed_starts += 1
            if self.failed_starts >= self.STARTS:
                raise RuntimeError(f"a GPU actor failed to start {self.STARTS} times: {ok.detail[:500]}")
            self._respawn()
            return
        self.failed_starts = 0
        if self._pending is not None:
            self._send()

    def _send(self):
        fn, item, timeout = self._pending
        self.ref = self.actor.call.remote(fn, item)
        self.deadline = time.monotonic() + timeout

    def finish(self, recycle: bool):
        item = self.item
        self.item = self.ref = self.deadline = self._pending = None
        if recycle:
            self._respawn()
        return item

    def _respawn(self):
        self.kill()
        self._spawn()

    def kill(self):
        import ray

        try:
            ray.kill(self.actor, no_restart=True)
        except Exception:
            pass
