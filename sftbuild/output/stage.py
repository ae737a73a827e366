"""The export stage: views of the store, written atomically.

Each name in ``export.formats`` is an exporter plug-in (``sftbuild list exporter``);
the defaults write:

  sft.jsonl         {"id", "instruction", "output", "lang", ...}: one row per record and language
  chat.jsonl        {"id", "messages": [user, assistant]}
  rlvr_verl.parquet verl rows: data_source, prompt (chat), ability, reward_model, extra_info
  rlvr_trl.jsonl    TRL GRPO rows: prompt plus the task columns the reward function reads
  README.md         the dataset card: funnel, provenance, licences, validation environment

Only records that passed every stage are written, with their code byte for byte
as validated. The review gate must be open.
"""
from __future__ import annotations

from pathlib import Path

from sftbuild.context import Context, StageRun, UserError, Waiting
from sftbuild.output.exporters import EXPORTERS, Batch, Exporter, Sample
from sftbuild.review.stage import gate


def selected(formats: list[str]) -> list[Exporter]:
    """The exporters `export.formats` names, in their run order; an unknown name is a user error."""
    unknown = [f for f in formats if f not in EXPORTERS]
    if unknown:
        raise UserError(f"export.formats: unknown exporter {unknown[0]!r} (known: {', '.join(EXPORTERS.names())})")
    return sorted((EXPORTERS.create(f) for f in dict.fromkeys(formats)), key=lambda e: (e.order, e.name))


def run(ctx: Context) -> dict:
    cfg = ctx.config.export
    exporters = selected(cfg.formats)
    blocked = gate(ctx)
    if blocked:
        raise Waiting(f"waiting for review: {blocked}")
    out_dir = Path(cfg.out_dir or ctx.workspace / "export")
    out_dir.mkdir(parents=True, exist_ok=True)
    records = ctx.store.alive("export")
    describe = ctx.store.results_for("describe")
    validate = ctx.store.results_for("validate")
    with StageRun(ctx, "export", {"formats": cfg.formats, "out_dir": str(out_dir)},
                  extra_key=sorted(r.id for r in records)) as run:
        samples = []
        for rec in records:
            instr = (describe.get(rec.id, {}).get("payload") or {}).get("instructions", {})
            samples.append(Sample(rec, instr, validate.get(rec.id, {}).get("payload") or {}))
            run.put(rec.id, "ok", payload={"rows": len(instr)})
        batch = Batch(samples, ctx.store)
        for exporter in exporters:
            exporter.write(batch, out_dir)
        run.stats.update(records=len(records), sft_rows=sum(len(s.instructions) for s in samples),
                         out_dir=str(out_dir))
    return run.stats
