"""The describe stage: bind what can be bound, read static features, render instructions, check them.

Per record: unbound CUDA kernels get a binding from the configured binders
(`sftbuild.ops.binders`, stored before describing, since validate runs after this stage);
features come from the parse tree through the configured describers; the instruction text
comes from the seeded template bank in both languages and both detail levels; a record whose
text claims what its features do not show is dropped as `description_mismatch`.
"""
from __future__ import annotations

import hashlib
import re

from sftbuild import ops
from sftbuild.context import Context, StageRun
from sftbuild.describe import features as F
from sftbuild.describe import text as T
from sftbuild.describe.describers import DESCRIBERS
from sftbuild.ops import binders as B


def run(ctx: Context) -> dict:
    cfg = ctx.config.describe
    vcfg = ctx.config.validate
    binders = B.BINDERS.configured(cfg.binders, "describe.binders")
    describers = DESCRIBERS.configured(cfg.describers, "describe.describers")
    conf = {"seed": cfg.seed, "languages": list(cfg.languages), "levels": list(cfg.levels), "arch": vcfg.arch,
            "smem_budget": vcfg.shared_memory_budget}
    if cfg.binders or cfg.describers:  # only a non-default selection enters the key
        conf.update(binders=cfg.binders, describers=cfg.describers)
    with StageRun(ctx, "describe", conf, extra_key=_bank_hash(binders)) as run:
        done = run.done()
        for rec in ctx.store.alive("describe"):
            if rec.id in done:
                continue
            if rec.language == "cuda" and not rec.binding:
                binding = B.infer(rec, binders)
                if binding:
                    ctx.store.update_binding(rec.id, binding)
                    rec.binding = binding
            status, reason, payload = describe(rec, conf, describers)
            run.put(rec.id, status, reason, payload)
    return run.stats


def describe(rec, conf: dict, describers=None) -> tuple[str, str | None, dict]:
    """(status, drop reason, payload) for one record; `describers` default to every registered one."""
    feats = F.extract(rec, describers)
    facts = _facts(rec, feats, conf)
    instructions = {f"{lang}:{level}": T.render(facts, lang, level)
                    for lang in conf["languages"] for level in conf["levels"]}
    problems = T.check(instructions, feats)
    payload = {"features": feats, "instructions": instructions}
    if problems:
        return "dropped", "description_mismatch", {**payload, "problems": problems}
    return "ok", None, payload


def _facts(rec, feats: dict, conf: dict) -> dict:
    binding = rec.binding or {}
    op = _op(binding.get("op"))
    params = rec.entry.get("params") or []
    if op:
        semantics, noun = op.semantics, T.NOUNS.get(op.family, T.GENERIC_NOUN)
        inputs, outputs = op.io["inputs"], op.io["outputs"]
    else:
        semantics = {"en": f"what `{rec.name}` computes, inferred from its name and signature",
                     "zh": f"`{rec.name}`所表示的计算，由名称与签名推断"}
        noun = T.GENERIC_NOUN
        inputs = [p for p in params if "*" not in p or p.strip().startswith("const")] or ["(none)"]
        outputs = [p for p in params if "*" in p and not p.strip().startswith("const")] or ["(in place)"]
    return {
        "variant": T.variant(rec.id, conf["seed"]),
        "lang_name": "Triton" if rec.language == "triton" else "CUDA",
        "noun": {"en": noun[0], "zh": noun[1]},
        "semantics": semantics,
        "inputs": [f"`{s}`" for s in inputs], "outputs": [f"`{s}`" for s in outputs],
        "dtypes": feats["dtypes"],
        "techniques": feats["techniques"],
        "reduction": feats["reduction"],
        "accumulate": feats["accumulate_type"],
        "templated": feats["templated"],
        "block_size": feats["block_size"],
        "arch": conf["arch"], "smem_budget": conf["smem_budget"],
        "signature": f"{rec.name}({', '.join(_param_name(p) for p in params)})",
    }


def _op(name):
    if not name:
        return None
    try:
        return ops.get(name)
    except KeyError:
        return None


def _param_name(param: str) -> str:
    names = re.findall(r"[A-Za-z_]\w*", param.split("=")[0])
    return names[-1] if names else param


def _bank_hash(binders) -> str:
    """Changes to the templates or the binders' tables re-run describe."""
    h = hashlib.sha256()
    for path in sorted(T.TEMPLATES.glob("*.j2")) + B.files(binders):
        if path.exists():
            h.update(path.read_bytes())
    return h.hexdigest()[:16]
