"""The review stage: a seeded, stratified sample for human reviewers, their verdicts, and the gate.

Strata are (source, language, op). Every stratum with records gets at least one
sampled record, then `fraction` of its records, chosen by a seeded hash so the
same inputs and seed always give the same sample. Export is blocked while a
sampled record has no verdict, or when more than `max_reject_rate` of the
sample is rejected.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict

from sftbuild.context import Context, StageRun, UserError
from sftbuild.store import StoreError


def stratum(rec) -> str:
    op = (rec.binding or {}).get("op") or (rec.binding or {}).get("kind") or "unbound"
    return f"{rec.source}/{rec.language}/{op}"


def draw(records, fraction: float, seed: int) -> list[tuple[str, str]]:
    groups = defaultdict(list)
    for r in records:
        groups[stratum(r)].append(r.id)
    out = []
    for key in sorted(groups):
        ids = sorted(groups[key], key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).hexdigest())
        n = max(1, math.floor(fraction * len(ids) + 0.5))
        out += [(i, key) for i in ids[:n]]
    return out


def run(ctx: Context) -> dict:
    cfg = ctx.config.review
    candidates = ctx.store.alive("review")
    ids = sorted(r.id for r in candidates)
    conf = {"fraction": cfg.fraction, "seed": cfg.seed, "max_reject_rate": cfg.max_reject_rate}
    with StageRun(ctx, "review", conf, extra_key=ids) as run:
        sample = draw(candidates, cfg.fraction, cfg.seed)
        key = hashlib.sha256(json.dumps([conf, ids]).encode()).hexdigest()[:16]
        ctx.store.set_review_sample(key, sample)
        _refresh(ctx, run, candidates)
        run.stats.update(candidates=len(candidates), sampled=len(sample))
    return run.stats


def _refresh(ctx, run, candidates) -> None:
    verdicts = {row["record_id"]: row for row in ctx.store.review_rows()}
    for r in candidates:
        row = verdicts.get(r.id)
        if row and row["verdict"] == "reject":
            run.put(r.id, "dropped", "rejected_in_review", {"reason": row["reason"], "reviewer": row["reviewer"]})
        elif row and row["verdict"] is None:
            run.put(r.id, "waiting", "needs_review")
        else:
            run.put(r.id, "ok", payload={"reviewed": bool(row)})


def verdict(ctx: Context, prefix: str, verdict: str, reason: str, reviewer: str) -> str:
    if verdict == "reject" and not reason.strip():
        raise UserError("a reject needs --reason")
    if ctx.store.stage_config("review") is None:
        raise UserError("no review sample yet: run `sftbuild review sample` first")
    try:
        rec = ctx.store.find(prefix)
        ctx.store.set_review_verdict(rec.id, verdict, reason, reviewer)
    except StoreError as e:
        raise UserError(str(e)) from e
    chash = ctx.store.stage_config("review")
    if verdict == "reject":
        ctx.store.put_result(rec.id, "review", chash, "dropped", "rejected_in_review",
                             {"reason": reason, "reviewer": reviewer})
    else:
        ctx.store.put_result(rec.id, "review", chash, "ok", None, {"reviewed": True, "reviewer": reviewer})
    return rec.id


def gate(ctx: Context) -> str | None:
    """Why export must wait, or None when the review sample passed."""
    if ctx.store.stage_config("review") is None:
        return "the review stage has not run (sftbuild review sample)"
    rows = ctx.store.review_rows()
    pending = [r for r in rows if r["verdict"] is None]
    if pending:
        return (f"{len(pending)} of {len(rows)} sampled records have no verdict "
                f"(see `sftbuild review list --pending`)")
    rejected = [r for r in rows if r["verdict"] == "reject"]
    if rows and len(rejected) / len(rows) > ctx.config.review.max_reject_rate:
        return (f"the review sample failed: {len(rejected)} of {len(rows)} rejected, over the allowed "
                f"{ctx.config.review.max_reject_rate:.0%}; fix the cause and rerun the stages")
    return None


def listing(ctx: Context) -> list[dict]:
    out = []
    for row in ctx.store.review_rows():
        rec = ctx.store.get(row["record_id"])
        out.append({**row, "name": rec.name})
    return out


def show(ctx: Context, prefix: str) -> str:
    try:
        rec = ctx.store.find(prefix)
    except StoreError as e:
        raise UserError(str(e)) from e
    desc = ctx.store.result(rec.id, "describe") or {}
    val = ctx.store.result(rec.id, "validate") or {}
    instr = (desc.get("payload") or {}).get("instructions", {})
    parts = [f"id: {rec.id}", f"source: {rec.source}  language: {rec.language}",
             f"provenance: {json.dumps(rec.provenance, sort_keys=True)}",
             f"binding: {json.dumps(rec.binding, sort_keys=True)}",
             f"validate: {val.get('status')} {val.get('reason') or ''}"]
    for k, v in sorted(instr.items()):
        parts.append(f"instruction[{k}]: {v}")
    parts += ["", rec.code]
    return "\n".join(parts)
