"""What every stage receives: the store, the config, the executor, and a way to speak.

Each stage module exposes `run(ctx, **options) -> dict` and follows the same
steps, which `StageRun` does for it:
  1. key the stage: its config, and what produced its results (sftbuild.producers: its plug-ins' names and
     versions, its templates and tables, the project's version); make the key its current one;
     results under the previous key that no change could reach are carried over (`unaffected`);
  2. open a run manifest (config, tool versions, host, GPU);
  3. skip records already finished under that hash (for stages keyed on the binding, under the
     record's current binding too: pass `binding_key` to `put`); commit results in small batches;
  4. close the manifest with the stage's stats, or, when the stage ends early (an error, a full disk),
     mark it interrupted with why.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import os
import platform
import shutil
import socket
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, Callable

from sftbuild import sandbox, stages
from sftbuild.config import Config, ConfigError
from sftbuild.executor import Executor, LocalExecutor, missing_gpus
from sftbuild.producers import current, fingerprint, unaffected
from sftbuild.record import config_hash
from sftbuild.store import Store


def make_executor(kind: str = "local", cpu_workers: int = 0, gpus: str = "auto",
                  progress: bool = True, ray_address: str = "") -> Executor:
    """The executor a config names: local process pools, or Ray (imported only when chosen).

    GPU ids named in `gpus` must exist here: a ConfigError says which do not."""
    missing, have = missing_gpus(gpus)
    if missing:
        has = f"its GPUs are {', '.join(have)}" if have else "it has none"
        raise ConfigError(f"executor.gpus: GPU {', '.join(missing)} does not exist on this machine ({has}); "
                          f"use auto, none, or ids it has")
    if kind == "local":
        return LocalExecutor(cpu_workers=cpu_workers, gpus=gpus, progress=progress)
    if kind == "ray":
        from sftbuild.ray_executor import RayExecutor

        return RayExecutor(address=ray_address, progress=progress)
    raise ValueError(f"unknown executor {kind!r}")


class UserError(Exception):
    """A problem the user can fix; the CLI prints it without a traceback and exits non-zero."""


class Waiting(UserError):
    """A stage that cannot run yet (export before the review passed); `run` reports it and stops."""


@dataclasses.dataclass
class Context:
    store: Store
    config: Config
    executor: Executor
    echo: Callable[[str], None] = print
    progress: bool = True

    def __post_init__(self):
        sandbox.configure(self.config.sandbox)  # workers started from here inherit the policy

    @property
    def workspace(self) -> Path:
        return self.store.root


_SAID: set[str] = set()


def say_sandbox_once(echo: Callable[[str], None]) -> None:
    """Each sandbox layer not in force, said once per process (it is also in every run manifest)."""
    for line in sandbox.unavailable():
        if line not in _SAID:
            _SAID.add(line)
            echo(line)


class StageRun:
    """Bookkeeping for one run of one stage: `with StageRun(ctx, 'validate', cfg) as run:`."""

    def __init__(self, ctx: Context, stage: str, config: Any, extra_key: Any = None):
        self.ctx = ctx
        self.stage = stage
        self.config = config
        self.base = config_hash({"config": config, "extra": extra_key, "stage": stage})
        self.producers = current(ctx.store, stage)
        self.chash = config_hash({"config": self.base, "producers": self.producers})
        self.stats: dict[str, Any] = {}
        self._pending: list[tuple] = []

    def __enter__(self) -> "StageRun":
        say_sandbox_once(self.ctx.echo)
        why = sandbox.refusal() if stages.get(self.stage).untrusted else None
        if why:  # before anything is recorded
            raise UserError(f"{self.stage}: {why}")
        store = self.ctx.store
        old = store.stage_producers(self.stage)
        if old and old["config_hash"] == store.stage_config(self.stage) != self.chash and old["base"] == self.base:
            languages = unaffected(old["producers"], self.producers)
            if languages:  # a change that reaches only some languages redoes only their records
                store.carry_languages(self.stage, old["config_hash"], self.chash, languages)
        store.set_stage_config(self.stage, self.chash, self.config, self.producers, self.base, fingerprint(self.stage))
        env = {**environment(), "sandbox": sandbox.layers()}
        self.run_id = self.ctx.store.start_run(self.stage, self.chash, self.config, env)
        return self

    def done(self, statuses=("ok", "dropped")) -> set[str]:
        return self.ctx.store.done_ids(self.stage, self.chash, statuses)

    def put(self, record_id: str, status: str, reason: str | None = None, payload: dict | None = None,
            flush_every: int = 16, binding_key: str | None = None) -> None:
        """One record's result; `binding_key`: the key of the binding it was reached under
        (default: the record's current one, for stages keyed on the binding)."""
        self._pending.append((record_id, self.stage, self.chash, status, reason, payload, binding_key))
        self.count(status, reason)
        if len(self._pending) >= flush_every:
            self.flush()

    def count(self, status: str, reason: str | None) -> None:
        key = status if status == "ok" else f"{status}:{reason}"
        self.stats[key] = self.stats.get(key, 0) + 1

    def flush(self) -> None:
        if self._pending:
            self.ctx.store.put_results(self._pending)
            self._pending = []

    def __exit__(self, exc_type, exc, tb):
        try:
            self.flush()
            if exc is None:
                self.ctx.store.finish_run(self.run_id, self.stats)
        except sqlite3.Error as e:  # a full disk: the manifest says so if it still can
            self._interrupted(e)
            raise
        if exc is not None:
            self._interrupted(exc)
        return False

    def _interrupted(self, exc: BaseException) -> None:
        try:
            self.ctx.store.interrupt_run(self.run_id, f"{type(exc).__name__}: {str(exc)[:200]}")
        except sqlite3.Error:
            pass  # the next run that takes the workspace lock marks it


@functools.lru_cache(maxsize=1)
def environment() -> dict:
    """Tool versions, host and GPU, recorded in every manifest and verdict."""
    env: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    for pkg in ("sftbuild", "torch", "triton", "datasketch", "datasets", "tree-sitter-cuda", "numpy"):
        try:
            env[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            env[pkg] = None
    env["nvcc"] = nvcc_version()
    env["gpus"] = gpu_names()
    return env


class NvccMissing(Exception):
    pass


def find_nvcc(configured: str = "") -> str:
    for cand in (configured, shutil.which("nvcc") or "",
                 os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if cand and os.path.exists(cand):
            return cand
    raise NvccMissing("nvcc was not found: install the CUDA toolkit, put nvcc on PATH, "
                      "or set validate.nvcc / CUDA_HOME")


@functools.lru_cache(maxsize=1)
def nvcc_version() -> str | None:
    """The toolchain line of `nvcc --version`; part of every compile cache key, so asked once a process."""
    try:
        nvcc = find_nvcc()
    except NvccMissing:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.strip().splitlines()[-1] if out.strip() else None


def gpu_names() -> list[str]:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]
