"""The one trial loop: every candidate kind (CUDA harness, CUDA file reference, Triton op, module
pair, Inductor program).

A candidate kind supplies an `Adapter`; the loop owns the plan and the verdict:

  * for each adapter (a CUDA record has one per op it binds, a Python candidate one), every
    variant (shape set) x dtype x layout x seed, in that order;
  * a grown variant (past the fixed-grid caps, sftbuild.trial.sizes) runs one seed in its
    first layout;
  * one trial of each adapter is profiled (where the adapter can profile): the first of its grown
    variant, else its first trial; at the largest size the work outweighs launch latency, so a
    wrapper's bookkeeping (a `.sum()` of partial results) takes its true small share of GPU time;
  * every trial is a row of the tally (sftbuild.trial.tally); the first failed one drops
    the record with the rows tried so far; an adapter with nothing to try drops it as `unbound`;
    a trial the adapter skips (ok None: a launch configuration the runtime refused) is no row;
  * once every trial passed, an adapter whose every trial was marked `uninformative` (its
    reference never moved with the inputs: checks/input_independent) drops the record as
    `uninformative`, which blames the inputs, not the candidate; then an adapter may still drop
    the record (`verdict`), then each
    adapter's timed call is timed against its reference (sftbuild.trial.timing) when the
    task asks for timing; a timing that refuses the candidate (times that disagree with the GPU's
    own timeline, a wrong output on the last timed run) drops the record.

An exception a trial raises (a sticky CUDA fault ends the record) leaves the loop with the trial's
place on it (`fault_detail`): the verdict built from it starts with the sizes, block size, dtype and
seed of the trial in progress, which is the one that launched the fault (every trial synchronizes
after its launches), however long the error's own text is.

`second_order` is the shared end of a trial: the candidate ran again on new values in the same
buffers, and the run-time checks (sftbuild.trial.checks) judge the outcome, so a result cached
by pointer or one that does not depend on the input gets the same reason in every kind.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

import torch

from sftbuild.trial_types import TrialTask
from sftbuild.trial import checks as C
from sftbuild.trial.checks.input_independent import UNINFORMATIVE
from sftbuild.trial.tally import Tally


class Trial(NamedTuple):
    """One point of the plan: variant number `vi` of the adapter's variants, and whether to profile it."""

    vi: int
    variant: object
    dtype: str
    layout: str
    seed: int
    profile: bool = False


class Adapter:
    """One candidate kind's side of the loop: its plan's axes and one trial. Subclasses set `name`,
    `dtypes` and `notes` and give `variants`, `describe` and `trial`; the rest has defaults."""

    name = "the candidate"  # in messages: "op relu"
    dtypes: list  # a kind with no dtype axis has [None]: its rows carry no dtype
    notes: dict  # check notes (reason -> [why]) its trials collected: the payload's flags
    unbound = ""  # why there is nothing to try; empty: "no shape or dtype of NAME fits the binding"

    def variants(self) -> list:
        raise NotImplementedError

    def layouts_for(self, dtype) -> list:
        return ["contiguous"]

    def grown(self, variant) -> bool:
        return False

    def describe(self, variant) -> dict:
        """The row's fields that say which variant was tried."""
        raise NotImplementedError

    def trial(self, t: Trial) -> tuple[bool | None, dict]:
        """(ok, stats); ok None: skipped, not a trial."""
        raise NotImplementedError

    def where(self, t: Trial) -> str:
        """Where trial `t` ran, in words, for an exception it raised: its row's fields."""
        return "at " + ", ".join(f"{k} {v}" for k, v in row(self, t).items())

    def summary(self) -> dict:
        """What it adds to a passed payload, read before timing."""
        return {}

    def verdict(self) -> dict | None:
        """After every trial passed: {"reason", "detail"} to drop the record anyway, else None."""
        return None

    def timed(self) -> tuple[str, dict] | None:
        """(name, timing.compare_times of its candidate against its reference), or None: not timed."""
        return None


def plan(adapter, seeds: int) -> list[Trial]:
    """Every trial of one adapter, in the loop's order (see the module doc)."""
    out, big = [], None
    for vi, variant in enumerate(adapter.variants()):
        grown = adapter.grown(variant)
        for dtype in adapter.dtypes:
            layouts = adapter.layouts_for(dtype)
            for layout in layouts[:1] if grown else layouts:
                for seed in range(1 if grown else seeds):
                    big = len(out) if grown and big is None else big
                    out.append(Trial(vi, variant, dtype, layout, seed))
    if out:  # where the work outweighs launch latency: a wrapper's bookkeeping (a partial-sum .sum()) is small
        at = big if big is not None else 0
        out[at] = out[at]._replace(profile=True)
    return out


def row(adapter: Adapter, t: Trial) -> dict:
    """The tally row's fields that say which trial `t` is."""
    axes = {k: v for k, v in (("dtype", t.dtype), ("layout", t.layout)) if v is not None}
    return {**adapter.describe(t.variant), **axes, "seed": t.seed}


FAULT_ATTR = "sftbuild_trial"  # set on an exception a trial raised: {"where": str, "row": dict}


def fault_detail(e: BaseException, limit: int = 500, msg: str | None = None) -> dict:
    """A dropped verdict's `detail` for exception `e`, at most `limit` characters: the place of the
    trial that raised it first (`where`), then its message (`msg`, else str(e)); and that trial's row
    (`trial`) when known."""
    at = getattr(e, FAULT_ATTR, None) or {}
    msg = str(e) if msg is None else msg
    out = {"detail": (f"{at['where']}: {msg}" if at.get("where") else msg)[:limit]}
    if at.get("row"):
        out["trial"] = at["row"]
    return out


def _mark(e: BaseException, adapter: Adapter, t: Trial) -> None:
    """Put trial `t`'s place on `e` (see `fault_detail`), unless an inner trial already did."""
    if getattr(e, FAULT_ATTR, None):
        return
    try:
        setattr(e, FAULT_ATTR, {"where": adapter.where(t), "row": row(adapter, t)})
    except Exception:  # an exception that takes no attributes, or a variant that cannot be described
        pass


def run(adapters: Iterable, task: TrialTask) -> dict:
    """Every adapter's trials, then its timing; returns the verdict payload. `adapters` may be a
    generator: each is made when the one before it has passed its trials."""
    tally, done = Tally(), []
    for adapter in adapters:
        done.append(adapter)
        trials = plan(adapter, task.seeds)
        if not trials:  # nothing to try is never a pass
            return {"status": "dropped", "reason": "unbound", "trials": tally.tried,
                    "detail": adapter.unbound or f"no shape or dtype of {adapter.name} fits the binding"}
        passed, marked = 0, []
        for t in trials:
            try:
                ok, stats = adapter.trial(t)
            except Exception as e:  # ends the record (the caller's verdict): with this trial's place on it
                _mark(e, adapter, t)
                raise
            if ok is None:
                continue
            dropped = tally.add(row(adapter, t), ok, stats)
            if dropped:
                return dropped
            passed += 1
            if stats.get(UNINFORMATIVE):
                marked.append(stats[UNINFORMATIVE])
        if passed and len(marked) == passed:  # no trial could tell a kernel from a constant: the inputs' fault
            return {"status": "dropped", "reason": UNINFORMATIVE, "trials": tally.tried,
                    "detail": f"{adapter.name}: {marked[0]} in any of its trials (special values "
                              "included where the result is boolean): they cannot tell a kernel from a "
                              "constant, so the candidate is not judged"}
        drop = adapter.verdict()
        if drop:
            return {"status": "dropped", **drop, "trials": tally.tried}
    payload = {"status": "ok", "reason": None, "trials": tally.tried, "errors": tally.worst}
    notes: dict = {}
    for adapter in done:
        for key, value in adapter.summary().items():  # lists (the value classes each op ran) add up
            both = isinstance(value, list) and isinstance(payload.get(key), list)
            payload[key] = sorted(set(payload[key]) | set(value)) if both else value
        for reason, whys in adapter.notes.items():
            notes.setdefault(reason, []).extend(whys)
    if notes:
        payload["flags"] = {k: sorted(set(v)) for k, v in notes.items()}
    if task.timing:
        refused = _time(done, task, payload)
        if refused:
            return {"status": "dropped", "reason": refused["reason"], "detail": refused["why"],
                    "trials": tally.tried, "timing": payload.get("timing")}
    return payload


def _time(adapters: list, task: TrialTask, payload: dict) -> dict | None:
    """Each adapter's timing into the payload; the first refusal (sftbuild.trial.timing), if any."""
    measured = dict(t for t in (a.timed() for a in adapters) if t is not None)
    refused = next((m["refused"] for m in measured.values() if m.get("refused")), None)
    if measured:
        payload["timing"] = measured
        payload["speedup"] = min(m["speedup"] for m in measured.values())
        for m in measured.values():
            payload.setdefault("flags", {}).update(m.get("flags", {}))
    return refused


def second_order(checks: list, notes: dict | None, first: list, outputs: list, first64: list, refs64: list,
                 compared: tuple[bool, dict]) -> tuple[bool, dict]:
    """Judge the second order of a trial (new values in the same buffers): `first`/`outputs` are the
    candidate's results on the two input sets, `first64`/`refs64` the float64 reference's, `compared`
    the comparison of `outputs` with the reference. Returns (ok, stats): for a failed trial the drop
    (a check's finding first, else `incorrect`); for a passed one its marks, {UNINFORMATIVE: why}
    where the trial could not tell a kernel from a constant (checks/input_independent), which the
    caller adds to the trial's stats for `run`. Other notes go to `notes`."""
    ok, stats = compared
    same_cand = all(torch.equal(a, b) for a, b in zip(first, outputs) if isinstance(a, torch.Tensor))
    same_ref = all(torch.equal(a, b) for a, b in zip(first64, refs64) if isinstance(a, torch.Tensor))
    seen: dict = {}
    why = C.judge(checks, C.Outcome(same_cand, same_ref, refs64, outputs, matched=ok), seen)
    marks = {UNINFORMATIVE: seen.pop(UNINFORMATIVE)[0]} if UNINFORMATIVE in seen else {}
    if notes is not None:
        for reason, whys in seen.items():
            notes.setdefault(reason, []).extend(whys)
    if why:
        return False, {**(stats if not ok else {}), **why}
    if not ok:
        return False, {**stats, "reason": "incorrect",
                       "why": "wrong on new values in the same buffers: " + stats.get("why", "")}
    return True, marks
