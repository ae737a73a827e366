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
        self._gpu = ray.remote(num_gpus=1, max_retries=0)(_call)

    @property
    def gpu_count(self) -> int:
        return int(self.ray.cluster_resources().get("GPU", 0))

    def map_cpu(self, fn, items, desc=""):
        yield from self._map(self._cpu, fn, items, None, desc or fn.__name__)

    def map_gpu(self, fn, items, timeout, desc=""):
        if not self.gpu_count:
            raise RuntimeError("map_gpu called with no GPU in the Ray cluster")
        yield from self._map(self._gpu, fn, items, timeout, desc or fn.__name__)

    def _map(self, remote, fn, items, timeout, desc):
        ray = self.ray
        refs = {remote.remote(fn, item): item for item in items}
        started = {ref: time.monotonic() for ref in refs}
        bar = tqdm(total=len(refs), desc=desc, disable=not self.progress, leave=False)
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
                for ref in done:
                    try:
                        res = ray.get(ref)
                    except ray.exceptions.TaskCancelledError:
                        res = WorkerFailure("timeout", f"cancelled after {timeout} s")
                    except Exception as e:  # the worker died or raised outside _call
                        res = WorkerFailure("crash", repr(e)[:2000])
                    bar.update()
                    yield refs[ref], res
                if timeout is not None:
                    # a queued task's clock starts when a GPU frees up, roughly: measure from submit
                    now = time.monotonic()
                    for ref in list(pending):
                        if now - started[ref] > timeout * (1 + len(refs) // max(self.gpu_count, 1)):
                            ray.cancel(ref, force=True)
                            pending.remove(ref)
                            bar.update()
                            yield refs[ref], WorkerFailure("timeout", f"no result within {timeout:.0f} s")
        finally:
            bar.close()
