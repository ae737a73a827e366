"""The validate stage: static checks, compile gate and resource checks on CPUs, correctness and timing on GPUs.

Records are routed by language and binding kind: bound CUDA through jinja2 harnesses,
Triton wrappers (op or inductor bindings) and KernelBench pairs as tensor-level
candidates (see pipeline.py, trials.py and pyrun.py).

Outcome per record (status, reason):
  ok                      compiled, bound, correct on every trial (and fast enough)
  dropped cheat | forbidden_call | bad_launch     static or run-time cheat detection
  dropped sandbox_violation   the record's code tried a write, network call or process the sandbox refuses
  dropped compile_error   nvcc or Triton failed on the kernel's code; compile_timeout past the limit
  dropped missing_header | toolchain | closure_error   the compile failed, not on the kernel's code: a
                          header nowhere to be found, the toolkit's own headers, or a part of the
                          record's headers the kernel never uses (the first error's line is named)
  dropped resources       registers, spills, shared memory or stack over the limits
  dropped unbound         nothing to check it against (dropped before the compile, with bind's reason)
  dropped incorrect | uninformative | memcheck | cuda_error | illegal_address | timeout | crash | too_slow
  dropped out_of_bounds   a write changed a guard region, or the result depended on one's contents
  dropped racecheck | synccheck   compute-sanitizer's finding on shared-memory code (sampled with memcheck)
  waiting needs_gpu       bound and compiled; correctness needs a GPU this machine lacks
  waiting duplicate       not checked: a near duplicate of a record of its cluster that is validated ok
                          or still waiting; checked only if that one is dropped (no verdict: see below)

GPU time goes to distinct work: where dedupe before validation stored clusters of near-identical
records (`sftbuild validate` and `sftbuild run` cluster first; sftbuild.dedupe.prevalidate), each
cluster's best-ranked member is checked first and the next one only if it is dropped, in rounds
(sftbuild.validate.clusters; a cluster that keeps failing checks 2, 4, 8, ... at once after its
first two drops, so the rounds stay few). A held-back record's `waiting:duplicate` result is no verdict and goes
to no verdict log: it is looked at again on every run, so when the verdict it stands behind changes,
it is checked in its turn. Without stored clusters every record is checked, as before.

Verdicts are keyed on the record's binding (its key), so a record whose binding changes
(gained later, re-probed, changed in the registry) is validated again and the old verdict
no longer counts.

Compile results go to <workspace>/cache/compile, or to $SFTBUILD_COMPILE_CACHE when set.
"""
from __future__ import annotations

import dataclasses
import os

from sftbuild.binding import key_of
from sftbuild.context import Context, StageRun, UserError, environment
from sftbuild.trial import compile as C
from sftbuild.validate import pipeline
from sftbuild.validate.clusters import Rounds


def run(ctx: Context) -> dict:
    cfg = ctx.config.validate
    try:
        nvcc = C.find_nvcc(cfg.nvcc)
    except C.NvccMissing as e:
        raise UserError(str(e)) from e
    conf = dataclasses.asdict(cfg)
    with StageRun(ctx, "validate", conf) as run:
        alive = ctx.store.alive("validate")
        by_id = {r.id: r for r in alive}
        counted = {**dict.fromkeys(run.done(("dropped",)), "dropped"), **dict.fromkeys(run.done(("ok",)), "ok")}
        # a record waiting (for a GPU, or behind its cluster's representative) is looked at again
        todo = [r.id for r in alive if r.id not in counted]
        # results are keyed by content, so workspaces may share one cache (the test suite does)
        cache = os.environ.get("SFTBUILD_COMPILE_CACHE") or str((ctx.workspace / "cache" / "compile").resolve())

        def check(batch):
            for rec, status, reason, payload in pipeline.validate([by_id[i] for i in batch], cfg, ctx.executor,
                                                                  cache, nvcc):
                env = {**environment(), **(payload.get("env") or {})}
                # result and verdict log in one transaction: a kill between them cannot split the two
                ctx.store.put_verdict(rec.id, "validate", run.chash, status, reason, payload, env,
                                      detail={**payload, "tried": _tried(payload)},
                                      binding_key=key_of(rec.binding))
                run.count(status, reason)
                yield rec.id, status

        # unbound records first, all at once: dropped without a compile, so no cluster spends rounds on them
        unbound = [i for i in todo if not by_id[i].binding]
        if unbound:
            counted.update(check(unbound))
            todo = [i for i in todo if i not in counted]
        rounds = Rounds(ctx.store.clusters(), todo, {k: v for k, v in counted.items() if k in by_id})
        while batch := rounds.next():
            for rid, status in check(batch):
                rounds.record(rid, status)
        for rid, payload in rounds.held().items():
            run.put(rid, "waiting", "duplicate", payload, binding_key=key_of(by_id[rid].binding))
    return run.stats


def _tried(payload: dict) -> dict:
    """The shapes and dtypes a verdict rests on."""
    rows = payload.get("trials") or []
    shapes = dict.fromkeys(tuple(r["shape"]) for r in rows if r.get("shape"))  # first-seen order
    return {"dtypes": sorted({r.get("dtype") for r in rows if r.get("dtype")}),
            "shapes": [list(s) for s in shapes][:16]}
