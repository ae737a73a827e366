"""Run the same task functions on a Ray cluster (`--executor ray`).

map_cpu: one Ray task per item. map_gpu: one Ray task per item with num_gpus=1 and
max_retries=0; an item past its timeout is cancelled with force (its worker process is
killed, as the local executor recycles a worker) and yields a WorkerFailure, as does a
task whose worker crashed.
"""
from __future__ import annotations

import time

from tqdm import tqdm

from sftbuild.executor import Executor, WorkerFailure, _call


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, address: str = "", progress: bool = True, **init_kw):
        import ray

        self.ray = ray
        if not ray.is_initialized():
            ray.init(address=address or None, ignore_reinit_error=True, log_to_driver=False, **init_kw)
        self.progress = progress
        self._cpu = ray.remote(max_retries=0)(_call)
        # one task per GPU worker process: a sticky CUDA fault never reaches the next sample
        self._gpu = ray.remote(num_gpus=1, max_retries=0, max_calls=1)(_call)

    @property
    def gpu_count(self) -> int:
        return int(self.ray.cluster_resources().get("GPU", 0))

    def map_cpu(self, fn, items, desc=""):
        items = list(items)
        yield from self._map(self._cpu, fn, items, None, len(items), desc or fn.__name__)

    def map_gpu(self, fn, items, timeout, desc=""):
        if not self.gpu_count:
            raise RuntimeError("map_gpu called with no GPU in the Ray cluster")
        # at most one task in flight per GPU, so a task's clock starts when it really starts
        yield from self._map(self._gpu, fn, list(items), timeout, self.gpu_count, desc or fn.__name__)

    def _map(self, remote, fn, items, timeout, slots, desc):
        ray = self.ray
        queue = list(reversed(items))
        refs: dict = {}
        started: dict = {}
        bar = tqdm(total=len(items), desc=desc, disable=not self.progress, leave=False)
        try:
            while queue or refs:
                while queue and len(refs) < slots:
                    item = queue.pop()
                    ref = remote.remote(fn, item)
                    refs[ref] = item
                    started[ref] = time.monotonic()
                done, _ = ray.wait(list(refs), num_returns=1, timeout=0.5)
                for ref in done:
                    item = refs.pop(ref)
                    try:
                        res = ray.get(ref)
                    except ray.exceptions.TaskCancelledError:
                        res = WorkerFailure("timeout", f"cancelled after {timeout} s")
                    except Exception as e:  # the worker died or raised outside _call
                        res = WorkerFailure("crash", repr(e)[:2000])
                    bar.update()
                    yield item, res
                if timeout is not None:
                    now = time.monotonic()
                    for ref in [r for r in refs if now - started[r] > timeout]:
                        ray.cancel(ref, force=True)
                        bar.update()
                        yield refs.pop(ref), WorkerFailure("timeout", f"no result within {timeout:.0f} s")
        finally:
            bar.close()
