"""The typed boundary between validate and the workers that run candidates: the tasks a worker
receives (`TrialTask` for the trials, `CompileTask` for the compile pool) and the verdict read back
(`Verdict`).

- A task crosses to its worker as a pickle (sftbuild.executor's pools, GPU and interpreter workers,
  ray_executor, a one-shot sandbox under compute-sanitizer): plain values and a Binding only.
- A dict becomes a task only through `of`, which refuses a task naming an unknown field, lacking
  a required one or giving a field of the wrong type: one ValueError sentence.
- A field left out takes validate's config default, except that timing and memcheck are off and
  the dtypes are the op's or program's own; `sftbuild.validate.pipeline.gpu_task` sets every field.
- A worker's reply is plain data and untrusted: `Verdict.of` reads it, and a reply that is no
  verdict (no known status, a reason that is no string) is a `worker_error` drop, never a pass.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from sftbuild.binding import Binding
from sftbuild.config import ValidateConfig as _V

STATUSES = ("ok", "dropped")
_TYPES = {"id": str, "language": str, "code": str, "entry": dict, "dtypes": list, "sos": list, "shapes": int,
          "seeds": int, "timing": bool, "warmup": int, "runs": int, "max_numel": int, "device": str,
          "cache_dir": str, "arch": str, "harness": str, "harnesses": list, "headers": dict, "include_dirs": list,
          "include_sets": list, "link": bool, "kind": str}


def checked(cls, task, what: str, required: tuple, types: dict | None = None) -> dict:
    """`task`'s fields for `cls`, or ValueError: an unknown field, a required one missing, a wrong type
    (`types`: a field's type where it differs from the shared table)."""
    if not isinstance(task, dict):
        raise ValueError(f"a {what} must be a {cls.__name__} or a mapping, got {type(task).__name__}")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(task) - set(names))
    if unknown:
        raise ValueError(f"a {what} has no field {', '.join(map(repr, unknown))} (its fields: {', '.join(names)})")
    missing = [k for k in required if not isinstance(task.get(k), str)]
    if missing:
        raise ValueError(f"a {what} needs {', '.join(missing)} as text")
    for k, v in task.items():
        want = (types or {}).get(k, _TYPES.get(k))
        if v is not None and want is not None and (not isinstance(v, want) or (want is int and v is True)):
            raise ValueError(f"{what} field {k!r} must be {want.__name__}, got {type(v).__name__}")
    return task


@dataclasses.dataclass(frozen=True)
class TrialTask:
    """One record's trials, as a GPU or interpreter worker runs them."""

    id: str
    language: str
    code: str
    kind: str = ""  # the candidate kind that runs it (sftbuild.trial.kinds); "": the one its binding picks
    binding: Binding | None = None
    entry: dict = dataclasses.field(default_factory=dict)
    dtypes: list | None = None  # None: the op's own, or what the program declares
    program_dtypes: str = "declared"  # validate.dtypes: declared | all
    sos: list = dataclasses.field(default_factory=list)  # the compiled harnesses, one per check
    tree: str | None = None  # the record's package tree (provenance.tree)
    path: str | None = None  # the record's file in that tree
    shapes: int = _V.shapes
    seeds: int = _V.seeds
    timing: bool = False
    warmup: int = _V.warmup
    runs: int = _V.runs
    timing_budget_ms: float | None = None  # None: timing.BUDGET_MS
    compile_baseline: bool = False
    runtime_checks: dict | None = None  # None: every registered runtime check
    max_speedup: float = _V.max_speedup
    ext_cache: str | None = None
    memcheck: str = "off"
    racecheck: bool = False
    memcheck_timeout: float = _V.memcheck_timeout
    sample_timeout: float = _V.sample_timeout
    device: str | None = None  # None: cuda when there is one
    max_numel: int | None = None  # a cap on any tensor's elements (tests, memcheck's small run)

    @classmethod
    def of(cls, task: "TrialTask | dict") -> "TrialTask":
        """`task` as a TrialTask; a dict is checked field by field (ValueError, one sentence)."""
        if isinstance(task, cls):
            return task
        task = checked(cls, task, "trial task", ("id", "language", "code"))
        binding = task.get("binding")
        binding = Binding.from_dict(binding) if isinstance(binding, dict) and binding else binding or None
        return cls(**{**task, "binding": binding})


@dataclasses.dataclass(frozen=True)
class CompileTask:
    """One record's compile gate and harness builds, as the CPU pool runs them (validate.compile)."""

    code: str
    cache_dir: str
    id: str = ""
    name: str = ""  # the kernel: a build log naming it says the build compiled it out
    language: str = "cuda"
    kind: str = ""  # the candidate kind whose build this is (sftbuild.trial.kinds); "": a plain kernel build
    arch: str = _V.arch
    timeout: float = _V.compile_timeout
    nvcc: str = ""  # "": the one compile.find_nvcc finds
    include_sets: list = dataclasses.field(default_factory=list)
    headers: dict = dataclasses.field(default_factory=dict)  # the record's own headers, by path
    include_dirs: list = dataclasses.field(default_factory=list)
    harness: str | None = None  # the one harness this build compiles; None: the kernel alone
    harnesses: list = dataclasses.field(default_factory=list)  # every check's harness source
    launcher: str = ""
    link: bool = True  # False: the harness's device code only, for machines that cannot run it
    lean: dict | None = None  # the code and headers on the lean torch header (extension functions)

    @classmethod
    def of(cls, task: "CompileTask | dict") -> "CompileTask":
        """`task` as a CompileTask; a dict is checked field by field (ValueError, one sentence)."""
        return task if isinstance(task, cls) else cls(**checked(cls, task, "compile task", ("code", "cache_dir")))


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a worker says of one record: ok or dropped with a reason; the payload keeps the rest
    (detail, trials, errors, timing, speedup, memcheck, env, seconds) as it is stored."""

    status: str
    reason: str | None
    payload: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, reply: Any) -> "Verdict":
        """A worker's plain-data reply as a Verdict; the worker's own markers (recycle, _exit, _log)
        are dropped, and a reply that is no verdict is a drop that says so."""
        if not isinstance(reply, dict) or reply.get("status") not in STATUSES or \
                not isinstance(reply.get("reason"), (str, type(None))):
            shown = {k: reply.get(k) for k in ("status", "reason")} if isinstance(reply, dict) else type(reply).__name__
            return cls("dropped", "worker_error", {"detail": f"the worker's reply is no verdict: {shown!r}"[:300]})
        payload = {k: v for k, v in reply.items() if k not in ("status", "reason", "recycle", "_exit", "_log")}
        reason = reply.get("reason") or ("worker_error" if reply["status"] == "dropped" else None)
        return cls(reply["status"], reason, payload)
