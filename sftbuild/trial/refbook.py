"""Reference results computed before any candidate code runs, kept for the record's trials.

A candidate imported into the process can rebind torch (torch.softmax, Tensor.__add__, ...)
or register its own kernels for torch's operators; a reference computed after that computes
the candidate's answer. So pyrun fills a `Book` first, while the process is as the worker
left it: for every (variant, dtype, seed) of the trial plan, the inputs of both orders
(fresh buffers; new values in the same buffers), each in a value class (sftbuild.ops.values: one
class per input set by its slot, the problem's own draw for the first order of seed 0 and wherever
the class is ill-posed at the dtype), the reference's outputs on each at the
trial's dtype and in float64 (and, where the outputs are gradients, in float64 with its intermediates rounded at the dtype:
sftbuild.ops.rounding), and, for every layout the plan tries, the specs
(sftbuild.trial.checks.specs) of the reference's outputs on inputs in that layout; outputs the
problem names in `free_outputs()` (a backward check's input gradients) hold no strides of their own,
and a problem's `expected(specs, dtype)` may put a probed entry's own output contract in place of the
reference's (pyrun.OpProblem.expected).
Trials take copies of the inputs and compare with what the book holds; nothing in it is
recomputed once candidate code has run.

Memory: results stay on the device up to `budget` bytes (a quarter of the free device
memory, at most 8 GiB); the rest waits on the host and is copied back when its trial runs.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from sftbuild.ops import rounding, values
from sftbuild.trial import checks, deadline

MAX_ON_DEVICE = 8 << 30


@dataclasses.dataclass
class Entry:
    """One (variant, dtype, seed): both orders' inputs and the reference's results on them."""

    inputs: list  # order 1, as the problem made them (contiguous)
    fresh: list  # order 2: the new values written into the same buffers
    native: list  # the reference on `inputs` at the trial's dtype
    double: list  # ... in float64
    native2: list  # the reference on `fresh`
    double2: list
    specs: dict  # layout -> specs of the reference's outputs on `inputs` in that layout
    seconds: float = 0.0  # the reference's time on `inputs`: bounds each candidate call (deadline.watch)
    # float64 results on either side of `inputs` / `fresh` (a problem's `sides`): where they part, the
    # inputs sit on a kink of the function, and either side's value is right there; empty: none
    sides: list = dataclasses.field(default_factory=list)
    sides2: list = dataclasses.field(default_factory=list)
    # per output, how far the float64 results move with every intermediate rounded once at the trial's
    # dtype (sftbuild.ops.rounding.spread): the reference's own spread where its terms cancel; empty: none
    spread: list = dataclasses.field(default_factory=list)
    spread2: list = dataclasses.field(default_factory=list)
    # the value class of each order's inputs (sftbuild.ops.values): "normal" is the problem's own draw
    values: tuple = ("normal", "normal")


class Book:
    """Every reference result a record's trials need, computed up front (see the module doc)."""

    def __init__(self, prob, seeds: int, dev: torch.device, arrange: Callable, budget: int | None = None):
        """`prob`: a pyrun Problem before its candidate is bound; `arrange(t, layout)`: the same values
        in a layout (pyrun.layout_of)."""
        self.dev = dev
        self.budget = _default_budget(dev) if budget is None else budget
        self.used = 0
        self.entries: dict[tuple, Entry] = {}
        self.skipped: set[str] = set()  # value classes that were ill-posed somewhere (their trials fell back)
        for vi, variant in enumerate(prob.variants()):
            for di, dtype in enumerate(prob.dtypes):
                for seed in range(1 if prob.grown(variant) else seeds):  # one seed past the caps
                    at = [values.slot(vi, di, len(prob.dtypes), seed, order, seeds) for order in (0, 1)]
                    self.entries[(vi, dtype, seed)] = self._entry(prob, variant, dtype, seed, arrange, at)
        self.parameters = self._parameters(prob)

    def get(self, vi: int, dtype: str, seed: int) -> Entry:
        """The entry, on the device (copies of anything kept on the host)."""
        e = self.entries[(vi, dtype, seed)]
        return dataclasses.replace(e, **{f: [_to(t, self.dev) for t in getattr(e, f)] for f in _TENSORS},
                                   **{f: [[_to(t, self.dev) for t in side] for side in getattr(e, f)]
                                      for f in _SIDES})

    def _entry(self, prob, variant, dtype, seed, arrange, at=(None, None)) -> Entry:
        classes = values.schedule(getattr(prob, "value_classes", lambda: None)(), dtype)
        inputs, native, double, seconds, cls = self._draw(prob, variant, dtype, seed, classes, at[0])
        fresh, native2, double2, _, cls2 = self._draw(prob, variant, dtype, seed + 1000, classes, at[1])
        plain = checks.specs(native)
        specs = {"contiguous": plain}
        for layout in prob.layouts_for(dtype):
            if layout != "contiguous":
                ref = prob.reference(variant, dtype, [arrange(t, layout) for t in inputs])
                specs[layout] = checks.specs(ref, free=plain)
                del ref
        loose = set(getattr(prob, "free_outputs", lambda: ())())
        specs = {lay: [s._replace(free=True) if j in loose and s is not None else s for j, s in enumerate(sp)]
                 for lay, sp in specs.items()}
        if hasattr(prob, "expected"):  # a probed entry's own output contract (pyrun.OpProblem.expected)
            specs = {lay: prob.expected(sp, dtype) for lay, sp in specs.items()}
        sides = getattr(prob, "sides", lambda *a: [])
        entry = Entry(inputs, fresh, native, double, native2, double2,
                      specs, seconds, sides(variant, dtype, inputs), sides(variant, dtype, fresh),
                      _spread(prob, variant, dtype, inputs, double), _spread(prob, variant, dtype, fresh, double2),
                      (cls, cls2))
        for f in _TENSORS:
            setattr(entry, f, [self._keep(t) for t in getattr(entry, f)])
        for f in _SIDES:
            setattr(entry, f, [[self._keep(t) for t in side] for side in getattr(entry, f)])
        return entry

    def _parameters(self, prob) -> dict | None:
        """The first trial's inputs and the reference's results after each change of its parameters
        (`prob.parameter_changes`, module pairs): {vi, dtype, changes: [(what, values, native,
        double)]}, on the inputs of entry (vi, dtype, seed 0); None where the problem has none."""
        if not hasattr(prob, "parameter_changes") or not prob.dtypes or not self.entries:
            return None
        dtype = prob.dtypes[0]
        inputs = self.entries[(0, dtype, 0)].inputs
        changes = prob.parameter_changes(prob.variants()[0], dtype, inputs)
        return {"vi": 0, "dtype": dtype, "changes": changes} if changes else None

    def _draw(self, prob, variant, dtype, seed, classes, at):
        """(inputs, reference at the dtype, in float64, the reference's seconds, value class) for one
        input set: in the class slot `at` picks (sftbuild.ops.values) where it is well-posed, else
        the problem's own draw (and the class is noted in `skipped`)."""
        name = values.pick(classes, at)
        xs = prob.inputs(variant, dtype, seed, self.dev, value_class=name)
        try:
            native, seconds = deadline.timed(lambda: prob.reference(variant, dtype, xs), self.dev.type == "cuda")
            double = prob.reference(variant, dtype, xs, double=True)
            if name == "normal" or values.well_posed(native, double, dtype, prob.tolerance()):
                return xs, native, double, seconds, name
        except Exception:  # a reference that refuses the class's values (a domain check): its own draw
            if name == "normal":
                raise
        self.skipped.add(name)
        return self._draw(prob, variant, dtype, seed, classes, None)

    def _keep(self, t):
        if not isinstance(t, torch.Tensor) or t.device.type == "cpu":
            return t
        n = t.numel() * t.element_size()
        if self.used + n <= self.budget:
            self.used += n
            return t
        return t.cpu()


_TENSORS = ("inputs", "fresh", "native", "double", "native2", "double2", "spread", "spread2")
_SIDES = ("sides", "sides2")


def _spread(prob, variant, dtype, inputs, double) -> list:
    """The reference's spread for a problem whose outputs are gradients (`gradients()`: a backward
    op, or a backward kernel checked through its entry's autograd), where terms cancel to ~0 by
    construction (x - mean over one value); [] elsewhere, where the floors and torch's own error
    cover rounding, and for a variant grown past the caps: its float64 reference is the slowest run
    of the book, and cancelling outputs show at the drawn sizes already."""
    if not getattr(prob, "gradients", lambda: False)() or getattr(prob, "grown", lambda v: False)(variant):
        return []
    return rounding.spread(lambda: prob.reference(variant, dtype, inputs, double=True), list(double), dtype)


def _to(t, dev):
    return t.to(dev) if isinstance(t, torch.Tensor) and t.device.type != dev.type else t


def _default_budget(dev: torch.device) -> int:
    if dev.type != "cuda":
        return MAX_ON_DEVICE
    free, _ = torch.cuda.mem_get_info(dev)
    return min(MAX_ON_DEVICE, free // 4)
