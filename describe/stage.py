"""The describe stage (first cut): one instruction per language from the binding and kernel name."""
from __future__ import annotations

from sftbuild import ops
from sftbuild.context import Context, StageRun


def run(ctx: Context) -> dict:
    cfg = ctx.config.describe
    with StageRun(ctx, "describe", {"seed": cfg.seed, "languages": cfg.languages}) as run:
        done = run.done()
        for rec in ctx.store.alive("describe"):
            if rec.id in done:
                continue
            op = (rec.binding or {}).get("op")
            what = ops.get(op).semantics if op else {"en": f"the computation of `{rec.name}`",
                                                     "zh": f"`{rec.name}` 的计算"}
            instr = {"en:brief": f"Write a {rec.language.upper()} kernel that computes {what['en']}.",
                     "zh:brief": f"实现一个{rec.language.upper()} Kernel，完成{what['zh']}。"}
            run.put(rec.id, "ok", payload={"instructions": instr})
    return run.stats
