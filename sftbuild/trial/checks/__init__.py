"""Run-time checks: what one trial of a candidate left behind, judged by small plug-ins.

The trial loop (sftbuild.trial.loop) runs every candidate kind through an adapter
(trials.py for CUDA harnesses and file references, pyrun.py for Python candidates); each
gathers what it saw into an observation and hands it to `judge(checks, seen)`. There are
three observations, and a check answers those it cares about by overriding the matching
hook (each returns a `Finding` or None):

  Call     -> after_call     after every candidate call: inputs (and a snapshot from
                             before the call), outputs, the reference's output specs,
                             precision flags the call changed, torch/triton state the
                             candidate changed (sftbuild.trial.pristine), Triton launches
  Profile  -> after_profile  once per record, where the loop profiles: the CUDA kernels
                             the candidate launched and the names of its own kernels
  Outcome  -> after_trial    after both orders ran (the first matched the reference):
                             whether the second matched, and whether the candidate's and
                             the reference's results moved with the inputs

A field a loop cannot fill is None or empty, and checks that need it pass, so a check
costs nothing where it does not apply. The first drop decides the trial: `judge`
returns it as the loop's verdict dict {"reason", "why"}. A `note` finding drops
nothing: its `why` is collected under `notes[reason]` and ends up in the payload's flags.

A new check is one file in this folder:

    @RUNTIME_CHECKS.register
    class FiniteOutputs(RuntimeCheck):
        '''Outputs hold no Inf where the reference has none.'''
        name = "finite_outputs"

        def after_call(self, call):
            ...
            return self.found("incorrect", "output 0 has Inf")

Config selects checks by name (`validate.runtime_checks`); the hooks take plain
tensors, so every check can be tested on the CPU.
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from sftbuild.plugins import Plugin, Registry


@dataclasses.dataclass
class Finding:
    reason: str  # cheat | incorrect | degenerate | ...
    why: str
    check: str = ""
    note: bool = False  # True: recorded in the payload's flags, the trial goes on


@dataclasses.dataclass
class Call:
    """One candidate call, seen right after it returned (and the device synchronised)."""

    inputs: list  # what the candidate was given, as it is now
    outputs: list  # what it returned, or the buffers it wrote
    before: list | None = None  # snapshots of `inputs` taken before this call; None: not taken
    mutates: tuple[int, ...] = ()  # inputs the op updates in place: their updates are outputs
    expected: list | None = None  # `specs` of the reference's outputs at the trial's dtype; None: unknown
    tampered: list[str] = dataclasses.field(default_factory=list)  # process state the candidate changed
    flags_changed: list[str] = dataclasses.field(default_factory=list)  # precision flags the call flipped
    launches: int | None = None  # the candidate's Triton launches in this call; None: none expected

    def ask(self, check: "RuntimeCheck") -> Finding | None:
        return check.after_call(self)


@dataclasses.dataclass
class Profile:
    """The CUDA kernels one profiled candidate call launched."""

    kernels: list[str]  # kernel names, in launch order
    own: set[str] = dataclasses.field(default_factory=set)  # kernels defined in the candidate's source
    triton: set[str] = dataclasses.field(default_factory=set)  # the candidate's Triton kernels seen launching
    triton_launches: int = 0  # its Triton launches so far in this record
    times: dict[str, float] = dataclasses.field(default_factory=dict)  # GPU us per kernel name, when measured
    # the torch compute ops the call dispatched (guards.TorchWork): how many, the most elements one touched,
    # and the elements of the call's inputs; torch_ops None: not counted
    torch_ops: int | None = None
    torch_elements: int = 0
    input_elements: int = 0

    def ask(self, check: "RuntimeCheck") -> Finding | None:
        return check.after_profile(self)


@dataclasses.dataclass
class Outcome:
    """A trial whose two orders (fresh buffers; new values in the same buffers) ran, the first matching."""

    same_output: bool  # the candidate's outputs were bit-identical for the two input sets
    same_reference: bool  # so were the float64 reference's
    references: list  # the float64 reference's outputs for the second input set
    outputs: list = dataclasses.field(default_factory=list)  # the candidate's, second input set
    matched: bool = True  # the second order's outputs matched the reference too

    def ask(self, check: "RuntimeCheck") -> Finding | None:
        return check.after_trial(self)


class RuntimeCheck(Plugin):
    """Base of a run-time check: override the hooks for the observations it judges."""

    def after_call(self, call: Call) -> Finding | None:
        return None

    def after_profile(self, profile: Profile) -> Finding | None:
        return None

    def after_trial(self, outcome: Outcome) -> Finding | None:
        return None

    def found(self, reason: str, why: str, note: bool = False) -> Finding:
        return Finding(reason, why, self.name, note)


RUNTIME_CHECKS: Registry[RuntimeCheck] = Registry(
    "runtime_check", RuntimeCheck, package=__name__,
    doc="judge what a candidate's trial left behind; the first finding drops the record")


class Spec(NamedTuple):
    """What an output must be besides its values: the reference's dtype, device, shape and strides."""

    dtype: Any
    device: Any
    shape: tuple = ()
    stride: tuple | None = None  # None: not part of the contract (a buffer the loop allocated)
    free: bool = False  # the reference's strides follow the input layout: contiguous ones are right too


def specs(tensors: list, free: list | None = None) -> list:
    """The `Spec` of each tensor, None for anything else: what `Call.expected` holds.

    `free`: the specs of the same reference on contiguous inputs; a tensor whose strides differ
    from those follows its inputs' layout, so the candidate may return it contiguous instead. So
    may it where the reference returns a view that is no memory format (expanded, with gaps): a
    candidate must return memory of its own (checks/real_outputs)."""
    out = []
    for j, t in enumerate(tensors):
        if not (hasattr(t, "dtype") and hasattr(t, "device") and hasattr(t, "stride")):
            out.append(None)
            continue
        plain = free[j] if free and j < len(free) else None
        moved = plain is not None and not same_strides(t.shape, t.stride(), plain.stride)
        out.append(Spec(t.dtype, t.device, tuple(t.shape), tuple(t.stride()), moved or not dense(t.shape, t.stride())))
    return out


def dense(shape, stride) -> bool:
    """The elements fill their memory without gaps or overlap, in some order of the dimensions."""
    dims = sorted((st, n) for n, st in zip(shape, stride) if n > 1)
    step = 1
    for st, n in dims:
        if st != step:
            return False
        step *= n
    return True


def same_strides(shape, a, b) -> bool:
    """Strides that address the same elements the same way: dimensions of size 1 step nowhere."""
    if a is None or b is None or len(a) != len(b):
        return a == b
    return all(x == y for n, x, y in zip(shape, a, b) if n > 1) or 0 in tuple(shape)


def selected(selection: dict[str, Any] | None = None) -> list[RuntimeCheck]:
    """The checks a task's `runtime_checks` mapping (config `validate.runtime_checks`) selects, in order."""
    return RUNTIME_CHECKS.configured(selection, "validate.runtime_checks")


def judge(checks: list[RuntimeCheck], seen: Call | Profile | Outcome, notes: dict | None = None) -> dict | None:
    """The first drop among `checks` for `seen`, as {"reason", "why"}; None when all pass.

    Notes are appended to `notes[reason]` and do not stop the other checks."""
    for check in checks:
        f = seen.ask(check)
        if f is None:
            continue
        if f.note:
            if notes is not None:
                notes.setdefault(f.reason, []).append(f.why)
            continue
        return {"reason": f.reason, "why": f.why}
    return None
