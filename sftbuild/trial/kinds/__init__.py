"""Candidate kinds: how one kind of record is built and where its trials run, chosen by its binding.

A kind answers `takes(binding, language)` from the record's binding (what it is checked against and
how it is launched: binding kind, `how`, `harness`) and its language; the code's text never decides
it. Kinds are asked in `order`, then by name, and the first that takes the record runs it. A new kind
is one small file in this folder; triton_op.py is the shortest whole one.

Invariants:
  * `runner` ("module:function") runs one task in a sandboxed worker and returns a verdict dict; the
    main process never imports it (validate's pipeline names it to the executor, memcheck to its tool).
  * `build` says what the CPU pool builds first: "harness" (nvcc, one launchable .so per check around
    the unchanged kernel) or "module" (the Triton gate, or a load_inline extension).
  * A kind's version is part of the validate stage's key: raise it when a change could change a verdict.
  * A record no kind takes is dropped as `unbound`, naming its binding.
"""
from __future__ import annotations

from sftbuild.binding import Binding
from sftbuild.plugins import Plugin, Registry
from sftbuild.trial_types import CompileTask, TrialTask


class Kind(Plugin):
    """A kind of candidate: which bound records it runs, how they are built, where their trials run."""

    languages: tuple[str, ...] = ()  # the record languages it may take
    runner: str = ""  # "module:function": the trials of one task, run in a worker
    build: str = "module"  # "harness": CUDA launchers rendered and built by nvcc; "module": a Python module
    interpreted: bool = False  # its trials may run under the Triton interpreter where there is no GPU

    def takes(self, binding: Binding, language: str) -> bool:
        """Whether this kind runs a record of `language` bound by `binding`."""
        return False

    def interpretable(self, task: TrialTask) -> bool:
        """Whether this task's trials can run under the Triton interpreter (no GPU): a kind that may be
        interpreted, whose module holds Triton code and neither builds a CUDA extension nor launches
        through Inductor's CUDA launcher (`async_compile.triton`), which the interpreter cannot run."""
        code = task.code
        return self.interpreted and "triton" in code and "load_inline" not in code and \
            "async_compile.triton(" not in code

    def builds_extension(self, task: TrialTask | CompileTask) -> bool:
        """Whether the task's module builds a CUDA extension (load_inline) the CPU pool may build first."""
        return False


KINDS: Registry[Kind] = Registry("candidate_kind", Kind, __name__, doc=__doc__)


def of(binding: Binding | None, language: str) -> Kind | None:
    """The kind that runs a record bound by `binding`, or None (unbound, or no kind takes it)."""
    if not binding:
        return None
    for cls in sorted(KINDS, key=lambda c: (c.order, c.name)):
        if language in cls.languages and cls().takes(binding, language):
            return cls()
    return None


def for_task(task: TrialTask | CompileTask) -> Kind | None:
    """The kind a worker's task names (`kind`), or the one its binding picks where it names none."""
    if task.kind:
        return KINDS.get(task.kind)()
    return of(getattr(task, "binding", None), task.language)
