"""The describe stage: read static features, render instructions, check them.

Per record: features come from the parse tree through the configured describers; the
instruction text comes from the seeded template bank in both languages and both detail
levels, naming the op of the record's binding (set by harvest or the bind stage); a record
whose text claims what its features do not show is dropped as `description_mismatch`.
Results are keyed on the binding: a record whose binding changes is described again.
"""
from __future__ import annotations

import hashlib
import re

from sftbuild import ops
from sftbuild.binding import key_of
from sftbuild.context import Context, StageRun
from sftbuild.describe import features as F
from sftbuild.describe import text as T
from sftbuild.describe.describers import DESCRIBERS


def run(ctx: Context) -> dict:
    cfg = ctx.config.describe
    vcfg = ctx.config.validate
    describers = DESCRIBERS.configured(cfg.describers, "describe.describers")
    conf = {"seed": cfg.seed, "languages": list(cfg.languages), "levels": list(cfg.levels), "arch": vcfg.arch,
            "smem_budget": vcfg.shared_memory_budget}
    if cfg.describers:  # only a non-default selection enters the key
        conf.update(describers=cfg.describers)
    with StageRun(ctx, "describe", conf, extra_key=_bank_hash()) as run:
        done = run.done()
        for rec in ctx.store.alive("describe"):
            if rec.id in done:
                continue
            status, reason, payload = describe(rec, conf, describers)
            run.put(rec.id, status, reason, payload, binding_key=key_of(rec.binding))
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


def _bank_hash() -> str:
    """Changes to the templates re-run describe (binding changes do through the binding key)."""
    h = hashlib.sha256()
    for path in sorted(T.TEMPLATES.glob("*.j2")):
        if path.exists():
            h.update(path.read_bytes())
    return h.hexdigest()[:16]
