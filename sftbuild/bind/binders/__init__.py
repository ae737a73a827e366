"""Binding strategies: tie an unbound kernel to an op (or a program) and a way to launch it.

The bind stage (`sftbuild.bind.stage`) tries the configured binders, in `order`, on every record
that harvest did not already bind (declared or exact); the first answer wins and is stored as a
`sftbuild.binding.Binding`. When every binder declines, the record is stored `unbound` with the
reason. A binder is one strategy, in one of two styles.

Static: `bind(record) -> dict | None` reads the record and returns the binding dict (op, params,
harness, harness_args, dtypes, ...; the schema is ../BINDINGS.md) or None. Static binders see
CUDA records unless they set `languages`.

    @BINDERS.register
    class ByName(Binder):
        '''Read the op from the kernel's name.'''
        name = "by_name"
        order = 50

        def bind(self, record):
            ...

Running: strategies that must run the kernel (probing an entry point on generated inputs)
define `plan(record) -> dict | None`, a picklable task, and `task_fn = "module:function"`. The
stage runs the task in a GPU worker, or without a GPU, for Triton, in a sandboxed process under
the Triton interpreter; never in the stage's own process. The stage sets the task's `device`
(`cuda`, or `cpu` under the interpreter, where bf16 arithmetic is wrong) unless the plan did. The task returns
`{"binding": {...}, "evidence": {...}}` or `{"unbound": "reason sentence", "evidence": {...}}`, and
`accept(record, result)` turns that into a Binding (or a binding dict) with how `probed`, or None.
A declined record carries a cause code (`CAUSES`): a task's result says it (`cause`), a running
binder that made no task says it through `cause(record)`; the bind stage keeps the furthest one
reached (no_op_matched where only static binders applied).
Running binders see every language unless they set `languages`.

`how` says how a binder's answers were found (default: its name when that is a `how`, else
`probed` for running binders and `inferred` for static ones); `by` in the stored binding is the
binder's name. A binder that reads data files lists them in `files`, so the bind stage re-runs
when they change. `sftbuild list binder` shows
the strategies; `bind.binders` in the config turns one off.

A name is a hypothesis: validate confirms an inferred binding on the GPU or drops the record.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from sftbuild.binding import CAUSES, COMPILE_CAUSES, HOWS, Binding, furthest  # noqa: F401  (re-exported)
from sftbuild.plugins import Plugin, Registry


# what stops a record a binder declined, least far along first: `furthest` keeps the cause of the
# binder that got furthest (a plan that could not run beats a kernel with no entry point)


class Binder(Plugin):
    """A way to find a binding for a kernel that harvest did not bind."""

    files: tuple[Path, ...] = ()  # data files its answers depend on
    languages: tuple[str, ...] | None = None  # None: CUDA for static binders, every language for running ones
    how: str = ""  # default: the binder's name when that is a `how`, else probed (running) or inferred
    task_fn: str = ""  # "module:function" that runs a plan's task, for running binders

    def why_not(self, record) -> str:
        """One phrase on why this binder found nothing for `record` ("" when there is nothing to add)."""
        return ""

    def cause(self, record) -> str:
        """The cause code (`CAUSES`) of a decline with no task: no op matched a static binder's reading;
        a running binder had no entry point to plan, unless it says why not (`why_not`) and has nothing
        to say: then it found one and no op fit it (no op named like it, none fitting its data flow)."""
        if not self.runs_code:
            return "no_op_matched"
        if type(self).why_not is Binder.why_not:
            return "no_entry_point"
        return "no_entry_point" if self.why_not(record) else "no_op_matched"

    def bind(self, record) -> dict | None:
        """A binding dict for `record`, or None (static binders)."""
        return None

    def plan(self, record) -> dict | None:
        """A task for `task_fn` (a type of sftbuild.bind.tasks, or a dict), or None when this binder has
        nothing to try (running binders)."""
        return None

    @property
    def runs_code(self) -> bool:
        return type(self).plan is not Binder.plan

    def found_how(self) -> str:
        return self.how or (self.name if self.name in HOWS else "probed" if self.runs_code else "inferred")

    def applies(self, record) -> bool:
        if not (record.entry or {}).get("kernels"):
            return False
        langs = self.languages if self.languages is not None else (None if self.runs_code else ("cuda",))
        return langs is None or record.language in langs

    def binding(self, found: dict | Binding, evidence: dict | None = None) -> Binding:
        """A Binding from what `bind` or `accept` returned, stamped with this binder's how and name."""
        if isinstance(found, Binding):
            return found
        return Binding.from_dict({"kind": "op", **found, "how": found.get("how") or self.found_how(),
                                  "by": self.name}, evidence=evidence)

    def accept(self, record, result: dict) -> Binding | dict | None:
        """The binding a task's result supports, or None; default: its `binding` with its `evidence`."""
        if not isinstance(result, dict) or not result.get("binding"):
            return None
        return self.binding({**result["binding"], "how": result["binding"].get("how") or "probed"},
                            result.get("evidence"))


BINDERS: Registry[Binder] = Registry("binder", Binder, __name__,
                                     doc="strategies that bind kernels to ops, tried in order by the bind stage")


def infer(record, binders: Iterable[Binder] | None = None) -> Binding | None:
    """The first binding a static binder finds for `record`, or None (running binders are skipped).

    `binders`: the strategies to try, in order (default: every registered one)."""
    for binder in BINDERS.configured({}) if binders is None else binders:
        if binder.runs_code or not binder.applies(record):
            continue
        found = binder.bind(record)
        if found:
            return binder.binding(found)
    return None


def files(binders: Iterable[Binder] | None = None) -> list[Path]:
    """Every data file the binders read."""
    return [f for b in (BINDERS.configured({}) if binders is None else binders) for f in b.files]


def data_hash(binders: Iterable[Binder] | None = None) -> str:
    """A hash of the binders' names, their parameters and the data files they read."""
    import hashlib

    h = hashlib.sha256()
    for b in (BINDERS.configured({}) if binders is None else binders):
        h.update(f"{b.name}:{b.params!r}\0".encode())
        for path in b.files:
            if Path(path).exists():
                h.update(Path(path).read_bytes())
    return h.hexdigest()[:16]


def unbound_reason(record, tried: list[str]) -> str:
    """The sentence stored for a record every binder declined."""
    if not (record.entry or {}).get("kernels"):
        return "no kernel entry to bind"
    if not tried:
        return f"no binder handles {record.language} kernels"
    return f"no binder found a binding ({', '.join(tried)} declined)"
