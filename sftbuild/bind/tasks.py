"""The tasks bind's probes receive: what a binder's `plan` gives its `task_fn` in a sandboxed worker.

  * One type per probing binder, each with the fields every probe shares (`ProbeTask`): the record's
    id and code, the shortlist of ops, the dtypes and shapes to try, the time limit and the device.
  * A task crosses to its worker as a pickle; a dict (a test, a plug-in binder's plan) becomes one
    only through `of`, which refuses an unknown field, a missing id or code, or a field of the
    wrong type, in one ValueError sentence (sftbuild.trial_types' rule).
  * The bind stage narrows a task's device and time limit with `dataclasses.replace`; a plug-in
    binder whose plan is a plain dict keeps its dict.
"""
from __future__ import annotations

import dataclasses

from sftbuild.trial_types import checked


@dataclasses.dataclass(frozen=True)
class ProbeTask:
    """What every probe reads: which record, which ops to try, at which dtypes and shapes, how long."""

    id: str
    code: str
    shortlist: list = dataclasses.field(default_factory=list)
    dtypes: list = dataclasses.field(default_factory=list)
    shapes: int = 3
    time_limit: float = 120.0
    device: str = ""  # "": cuda where there is one

    @classmethod
    def of(cls, task):
        """`task` as this type; a dict is checked field by field (ValueError, one sentence)."""
        types = {"harnesses": dict}  # a launcher probe's: one harness source per dtype
        return task if isinstance(task, cls) else cls(**checked(cls, task, "probe task", ("id", "code"), types))


@dataclasses.dataclass(frozen=True)
class TritonProbe(ProbeTask):
    """A Triton record probed through its own entry points (sftbuild.bind.probe)."""

    entry: dict = dataclasses.field(default_factory=dict)
    tree: str | None = None  # the package tree the record's module imports from
    path: str | None = None  # the record's file in that tree
    package_refs: list = dataclasses.field(default_factory=list)  # the package's own references
    hints: dict = dataclasses.field(default_factory=dict)  # the package's defaults, by parameter name


@dataclasses.dataclass(frozen=True)
class LauncherProbe(ProbeTask):
    """A CUDA record probed through its host launcher (sftbuild.bind.launcher_probe)."""

    harness: str = ""  # the probe's harness: every dtype's launcher in one source
    harnesses: dict = dataclasses.field(default_factory=dict)  # one per dtype, where the one fails
    roles: list = dataclasses.field(default_factory=list)  # the launcher's parameters' roles
    kernels: list = dataclasses.field(default_factory=list)
    headers: dict = dataclasses.field(default_factory=dict)
    include_dirs: list = dataclasses.field(default_factory=list)
    include_sets: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class ExtensionProbe(ProbeTask):
    """A CUDA record probed through its extension function (sftbuild.bind.extension_probe)."""

    function: str = ""  # the name the module exposes
    declaration: str = ""
    source: str = ""  # the function's code
    roles: list = dataclasses.field(default_factory=list)
    returns: int = 0  # how many tensors it returns
    dispatch: str = ""  # the dtypes its dispatch names, in words
    exposed: str | None = None  # the module definition that exposes it
    headers: dict = dataclasses.field(default_factory=dict)
    include_dirs: list = dataclasses.field(default_factory=list)
