"""Guard regions around a trial's tensors, so that reads and writes past an edge show.

`Fence(tensors, names)` copies each tensor into a view carved out of a larger allocation of
its dtype, with `pad` guard elements on both sides (and in the gaps of a strided view). The
guards hold NaN for floating dtypes and a sentinel bit pattern for integers (0x5A in every
byte; True for bool), so:

  * a read past an edge picks up NaN, which poisons the result even when multiplied by
    zero (NaN * 0 = NaN): `blame_reads` then reruns the candidate with finite guards to
    name the tensor it read outside of;
  * a write past an edge changes a guard: `tripped()` (compared bit for bit) names the
    tensor and the side. Allocations may lie next to each other, so a long write past the end
    of one reaches the guard before the start of the next (and may pass over it whole): the
    verdict names the guard the write started from (`source`), and the others it reached.

Both give the verdict {"reason": "out_of_bounds", "why": ...}. What is covered is what the
loop hands the candidate: its inputs (reads and writes past their edges), and outputs the
loop allocates (the CUDA harnesses' output buffers, a Python candidate's in-place outputs);
outputs a Python candidate allocates itself are its own memory and are not fenced.
Tensors a fence cannot carve (empty, not strided, needing grad, overlapping/expanded, dtypes outside
GUARDED) pass through, and so does everything under SFTBUILD_NO_FENCES=1 (compute-sanitizer runs:
there the guards would hide the fault inside a valid allocation). Runs on any device; the CPU tests use it on CPU tensors.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import torch

PAD_BYTES = 16384  # guard bytes on each side; a multiple of every alignment a kernel may assume
MIN_PAD = 64  # elements, for wide dtypes
FINITE = 0  # what guards hold while `blame_reads` tests reads: a value that poisons nothing
REASON = "out_of_bounds"

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
GUARDED = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
           torch.int64, torch.uint8, torch.bool}  # dtypes every device fills and compares
_SENTINEL = {1: 0x5A, 2: 0x5A5A, 4: 0x5A5A5A5A, 8: 0x5A5A5A5A5A5A5A5A}
BEFORE, PAST, BETWEEN = "before the start of", "past the end of", "between the elements of"


class Trip(NamedTuple):
    """One changed guard region: its side of the tensor `name`, its first byte's address, and whether
    it changed in its half next to the tensor (`near`; a write that ran off the tensor's own edge
    does, one that came from another allocation reaches the far half first)."""

    side: str
    name: str
    address: int
    near: bool


def source(trips: list[Trip]) -> Trip:
    """The changed guard a write started from. A write runs off an edge into the guard next to it
    (`near`), and may run on through the allocations beyond: up past the end of the lowest guard it
    changed, or down before the start of the highest. So among the near guards: the lowest `past the
    end`, else the highest `before the start`, else the first. (A write far below a tensor that also
    fills the guard past the end of the tensor under it reads as that one's overrun: writes run up far
    more often than down.)"""
    near = [t for t in trips if t.near] or trips
    past = [t for t in near if t.side == PAST]
    if past:
        return min(past, key=lambda t: t.address)
    before = [t for t in near if t.side == BEFORE]
    if before:
        return max(before, key=lambda t: t.address)
    return near[0]


def guard_value(dtype: torch.dtype):
    """What a guard element holds: NaN for floats, True for bool, 0x5A.. in every byte for integers."""
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return True
    return _SENTINEL[torch.empty((), dtype=dtype).element_size()]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a tensor, as integers of the same width (so NaN == NaN)."""
    return t.view(torch.uint8) if t.dtype == torch.bool else t.view(_BITS[t.element_size()])


def carvable(t) -> bool:
    if os.environ.get("SFTBUILD_NO_FENCES") == "1":
        return False
    if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.dtype not in GUARDED:
        return False
    if t.layout != torch.strided or t.requires_grad:
        return False
    if not t.is_contiguous() and t.dim() and min(t.stride()) == 0:
        return False  # an expanded view: its elements overlap
    return True


class Guarded:
    """One tensor's copy inside a guarded allocation."""

    def __init__(self, t: torch.Tensor, name: str, pad: int | None = None):
        self.name = name
        self.pad = pad if pad is not None else max(MIN_PAD, PAD_BYTES // t.element_size())
        self.span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
        with torch.no_grad():
            self.base = torch.empty(self.pad + self.span + self.pad, dtype=t.dtype, device=t.device)
            self.view = self.base.as_strided(t.shape, t.stride(), self.pad)
            self.gaps = None  # where a strided view skips elements: guards too
            if self.span != t.numel():
                covered = torch.zeros(self.span, dtype=torch.bool, device=t.device)
                covered.as_strided(t.shape, t.stride(), 0).fill_(True)
                self.gaps = ~covered
            self.fill(guard_value(t.dtype))
            self.view.copy_(t)
        self.sentinel = _bits(self.base[:1]).clone()

    def _regions(self) -> list[tuple[str, torch.Tensor, torch.Tensor | None]]:
        inner = self.base[self.pad:self.pad + self.span]
        return [(BEFORE, self.base[:self.pad], None),
                (PAST, self.base[self.pad + self.span:], None),
                *([(BETWEEN, inner, self.gaps)] if self.gaps is not None else [])]

    def fill(self, value) -> None:
        """Set every guard element to `value` (the view's elements keep theirs)."""
        with torch.no_grad():
            for _, region, mask in self._regions():
                if mask is None:
                    region.fill_(value)
                else:
                    region.masked_fill_(mask, value)

    def restore(self) -> None:
        self.fill(guard_value(self.base.dtype))

    def trips(self) -> list[Trip]:
        """Every guard region of this tensor that changed."""
        out = []
        for side, region, mask in self._regions():
            changed = _bits(region) != self.sentinel
            if mask is not None:
                changed = changed & mask
            if not bool(changed.any()):
                continue
            half = max(1, changed.numel() // 2)
            near = bool(changed[-half:].any()) if side == BEFORE else bool(changed[:half].any()) \
                if side == PAST else True
            out.append(Trip(side, self.name, region.data_ptr(), near))
        return out

    def tripped(self) -> str | None:
        """Where a guard changed: 'before the start of', 'past the end of' or 'between the elements of'."""
        trips = self.trips()
        return f"{trips[0].side} {self.name}" if trips else None


class Fence:
    """Guarded copies of a trial's tensors; `views` replace them in the trial."""

    def __init__(self, tensors: list, names: list[str] | str = "input"):
        if isinstance(names, str):
            names = [f"{names} {i}" for i in range(len(tensors))]
        self.guarded: list[Guarded] = []
        self.views = []
        for t, name in zip(tensors, names):
            if carvable(t):
                g = Guarded(t, name)
                self.guarded.append(g)
                self.views.append(g.view)
            else:
                self.views.append(t)

    def add(self, more: "Fence") -> "Fence":
        self.guarded += more.guarded
        return self

    def tripped(self) -> dict | None:
        """The verdict for a write past a guarded tensor's edge, else None: the guard the write started
        from (`source`), and the others it reached."""
        trips = [t for g in self.guarded for t in g.trips()]
        if not trips:
            return None
        first = source(trips)
        why = f"write {first.side} {first.name} (its guard region changed"
        if not first.near:
            why += " in its far half only: the write came from another allocation"
        others = [f"{t.side} {t.name}" for t in trips if t is not first]
        if others:
            why += f"; it also reached the guards {', '.join(others[:4])}"
        return {"reason": REASON, "why": why + ")"}

    def restore(self) -> None:
        for g in self.guarded:
            g.restore()


def blame_reads(fence: Fence, rerun, only=None) -> dict | None:
    """After a wrong result: whether it came from reading guards. `rerun()` calls the candidate again
    on the same tensors and says whether its result is right now. With all of `only` (default: every
    guarded tensor's) guards finite, a right result may mean the wrong one came from outside; then each
    tensor's guards alone are NaN in turn, and a tensor is named when that makes the result wrong again.
    Unless one is named, the result did not depend on the guards (an unwritten element that happened
    to hold the right value): None. Guards are restored after."""
    suspects = [g for g in fence.guarded if only is None or g.name in only]
    if not suspects:
        return None
    try:
        for g in suspects:
            g.fill(FINITE)
        if not rerun():
            return None
        read = []
        for g in suspects:
            g.restore()
            if not rerun():
                read.append(g.name)
            g.fill(FINITE)
        if not read:  # right with every guard finite, right with each one NaN alone: not the guards
            return None
        return {"reason": REASON, "why": f"read outside {', '.join(read)} (NaN from the guard region reached the "
                                          "output; the result is right when the guards hold finite values)"}
    finally:
        fence.restore()
