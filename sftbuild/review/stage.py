"""The review stage: a seeded, stratified sample with a stated bound, reviewers' verdicts, and the gate.

`run` draws the sample (see review/sample.py for its size, strata and seed) over the records
that passed dedupe. A new sample never deletes a verdict: records it still holds keep theirs,
and verdicts on records it leaves out stay in the store (`review_rows(retired=True)`) and in
the append-only verdict log. A share `review.overlap` of the sample needs two reviewers.

Export is blocked while a sampled record lacks its verdicts, or when more than
`max_reject_rate` of the sample is rejected. `status` says what the sample proves.
"""
from __future__ import annotations

import hashlib
import json

from sftbuild.context import Context, StageRun, UserError
from sftbuild.review import evidence, sample
from sftbuild.review_gate import gate
from sftbuild.store import StoreError

VERDICTS = ("accept", "reject")


def families(records) -> dict[str, str]:
    """{record id: the op family of its binding, its binding kind, or 'unbound'}, from the op cards
    (sftbuild.ops.cards: no torch once an earlier command described the ops)."""
    from sftbuild.ops.cards import cards

    known = cards(r.binding.op for r in records if r.binding and r.binding.op)

    def family(rec) -> str:
        b = rec.binding
        if b and b.op:
            return (known[b.op] or {}).get("family", b.op)
        return b.kind if b else "unbound"
    return {r.id: family(r) for r in records}


def run(ctx: Context) -> dict:
    cfg = ctx.config.review
    candidates = ctx.store.alive("review")
    ids = sorted(r.id for r in candidates)
    conf = {"fraction": cfg.fraction, "seed": cfg.seed, "max_reject_rate": cfg.max_reject_rate,
            "defect_rate": cfg.defect_rate, "confidence": cfg.confidence, "overlap": cfg.overlap}
    try:
        fam = families(candidates)
        drawn = sample.draw({r.id: (r.source, fam[r.id], r.language) for r in candidates}, cfg.fraction,
                            cfg.defect_rate, cfg.confidence, cfg.seed, cfg.overlap)
    except ValueError as e:
        raise UserError(str(e)) from e
    with StageRun(ctx, "review", conf, extra_key=ids) as run:
        key = hashlib.sha256(json.dumps([conf, ids]).encode()).hexdigest()[:16]
        kept = ctx.store.set_review_sample(key, drawn.rows)
        _refresh(ctx, run, candidates)
        run.stats.update(candidates=len(candidates), sampled=drawn.size, strata=len(drawn.strata),
                         double=sum(1 for r in drawn.rows if r[2] > 1), **kept)
    if kept["retired_verdicts"]:
        ctx.echo(f"review: {kept['retired_verdicts']} verdicts are on records this sample no longer holds; "
                 f"they stay in the store (`sftbuild review list --retired`)")
    ctx.echo(f"review: {drawn.size} of {drawn.population} records sampled; the sample proves: "
             f"{sample.statement(drawn.size, drawn.population, 0, 0, cfg.defect_rate, cfg.confidence)}")
    return run.stats


def _refresh(ctx, run, candidates) -> None:
    verdicts = {row["record_id"]: row for row in ctx.store.review_rows()}
    for r in candidates:
        run.put(r.id, *_result(verdicts.get(r.id)))


def _result(row) -> tuple:
    if row and row["verdict"] == "reject":
        return "dropped", "rejected_in_review", {"reason": row["reason"], "reviewer": row["reviewer"]}
    if row and row["verdict"] is None:
        return "waiting", "needs_review", None
    return "ok", None, {"reviewed": bool(row), **({"reviewer": row["reviewer"]} if row else {})}


def verdict(ctx: Context, prefix: str, verdict: str, reason: str, reviewer: str, via: str = "cli") -> str:
    """Record one reviewer's verdict on a sampled record (id prefix allowed); returns its id."""
    if verdict not in VERDICTS:
        raise UserError(f"a verdict is accept or reject, not {verdict!r}")
    if verdict == "reject" and not (reason or "").strip():
        raise UserError("a reject needs --reason")
    if not (reviewer or "").strip():
        raise UserError("a verdict needs a reviewer name")
    if ctx.store.stage_config("review") is None:
        raise UserError("no review sample yet: run `sftbuild review sample` first")
    try:
        rec = ctx.store.find(prefix)
        ctx.store.set_review_verdict(rec.id, verdict, reason, reviewer.strip(), via=via)
    except StoreError as e:
        raise UserError(str(e)) from e
    row = next((r for r in ctx.store.review_rows() if r["record_id"] == rec.id), None)
    ctx.store.put_result(rec.id, "review", ctx.store.stage_config("review"), *_result(row))
    return rec.id


def listing(ctx: Context, retired: bool = False) -> list[dict]:
    out = []
    for row in ctx.store.review_rows(retired=retired):
        ev = evidence.gather(ctx.store, row["record_id"])
        where = "unbound" if not ev.record.binding else ev.where
        out.append({**row, "name": ev.record.name, "where": where})
    return out


def status(ctx: Context, export_waits=gate) -> dict:
    """Progress, what the sample proves so far, and reviewer agreement on doubly reviewed records;
    `export_waits(ctx)`: why export would refuse now, or None (the CLI passes export's own answer)."""
    cfg = ctx.config.review
    if ctx.store.stage_config("review") is None:
        raise UserError("no review sample yet: run `sftbuild review sample` first")
    rows = ctx.store.review_rows()
    population = len(ctx.store.alive("review"))
    decided = [r for r in rows if r["verdict"]]
    rejects = sum(1 for r in decided if r["verdict"] == "reject")
    votes: dict[str, list[dict]] = {}
    for v in ctx.store.review_votes():
        votes.setdefault(v["record_id"], []).append(v)
    pairs = [(vs[0]["verdict"], vs[1]["verdict"]) for r in rows if r["copies"] > 1
             and len(vs := votes.get(r["record_id"], [])) >= 2]
    reasons: dict[str, int] = {}
    for r in decided:
        if r["verdict"] == "reject":
            for code in (r["reason"] or "other").split("; "):
                reasons[code] = reasons.get(code, 0) + 1
    strata: dict[str, int] = {}
    for r in rows:
        strata[r["stratum"]] = strata.get(r["stratum"], 0) + 1
    return {"population": population, "sampled": len(rows), "strata": strata, "decided": len(decided), "rejected": rejects,
            "double": sum(1 for r in rows if r["copies"] > 1), "double_done": len(pairs),
            "kappa": sample.cohen_kappa(pairs) if pairs else None,
            "agreement": (sum(a == b for a, b in pairs) / len(pairs)) if pairs else None,
            "reasons": reasons, "reviewers": sorted({v["reviewer"] for vs in votes.values() for v in vs}),
            "proves": sample.statement(len(rows), population, rejects, len(decided), cfg.defect_rate,
                                       cfg.confidence),
            "gate": export_waits(ctx) or "open: export may run"}


def status_lines(st: dict) -> list[str]:
    out = [f"sampled: {st['sampled']} of {st['population']} records; verdicts: {st['decided']} "
           f"({st['rejected']} rejected)",
           f"the sample proves: {st['proves']}",
           "strata (source/op family/language, * = merged): "
           + ", ".join(f"{k} {v}" for k, v in sorted(st["strata"].items()))]
    if st["double"]:
        if st["kappa"] is not None:
            agree = f"Cohen's kappa {st['kappa']:.2f} ({st['agreement']:.0%} agreement)"
        elif st["double_done"]:
            agree = f"{st['agreement']:.0%} agreement (kappa undefined: one label only)"
        else:
            agree = "kappa once both verdicts are in"
        out.append(f"double review: {st['double_done']} of {st['double']} records have both verdicts; {agree}")
    if st["reasons"]:
        out.append("reject reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(st["reasons"].items())))
    if st["reviewers"]:
        out.append("reviewers: " + ", ".join(st["reviewers"]))
    out.append(f"export gate: {st['gate']}")
    return out


def show(ctx: Context, prefix: str) -> str:
    try:
        rec = ctx.store.find(prefix)
    except StoreError as e:
        raise UserError(str(e)) from e
    ev = evidence.gather(ctx.store, rec.id)
    parts = evidence.lines(ev)
    if ev.reference["source"]:
        parts += ["", f"--- {ev.reference['title']} ---", ev.reference["source"].rstrip()]
    parts += ["", f"--- code ({rec.language}) ---", rec.code]
    return "\n".join(parts)


def queue(ctx: Context, reviewer: str) -> list[dict]:
    """The sample in review order, each row with this reviewer's vote and whether it is still open
    for them (they have not voted and it needs more reviewers)."""
    mine: dict[str, dict] = {}
    others: dict[str, int] = {}
    for v in ctx.store.review_votes():
        if v["reviewer"] == reviewer:
            mine[v["record_id"]] = v
        else:
            others[v["record_id"]] = others.get(v["record_id"], 0) + 1
    out = []
    for row in ctx.store.review_rows():
        rid = row["record_id"]
        legacy = row["verdict"] is not None and rid not in mine and not others.get(rid)
        open_ = rid not in mine and not legacy and others.get(rid, 0) < row["copies"]
        out.append({**row, "mine": mine.get(rid), "open": open_})
    return out
