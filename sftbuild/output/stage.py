"""The export stage: views of the store, written atomically.

  sft.jsonl         {"id", "instruction", "output", "lang", ...}: one row per record and language
  chat.jsonl        {"id", "messages": [user, assistant]}
  rlvr_verl.parquet verl rows: data_source, prompt (chat), ability, reward_model, extra_info
  rlvr_trl.jsonl    TRL GRPO rows: prompt plus the task columns the reward function reads
  README.md         the dataset card: funnel, provenance, licences, validation environment

Only records that passed every stage are written, with their code byte for byte
as validated. The review gate must be open.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from sftbuild.context import Context, StageRun, Waiting, environment
from sftbuild.review.stage import gate


def run(ctx: Context) -> dict:
    blocked = gate(ctx)
    if blocked:
        raise Waiting(f"waiting for review: {blocked}")
    cfg = ctx.config.export
    out_dir = Path(cfg.out_dir or ctx.workspace / "export")
    out_dir.mkdir(parents=True, exist_ok=True)
    records = ctx.store.alive("export")
    describe = ctx.store.results_for("describe")
    validate = ctx.store.results_for("validate")
    with StageRun(ctx, "export", {"formats": cfg.formats, "out_dir": str(out_dir)},
                  extra_key=sorted(r.id for r in records)) as run:
        sft, chat, tasks = [], [], []
        for rec in records:
            instr = (describe.get(rec.id, {}).get("payload") or {}).get("instructions", {})
            val = validate.get(rec.id, {}).get("payload") or {}
            for key in sorted(instr):
                lang = key.split(":")[0]
                meta = {"id": rec.id, "lang": lang, "variant": key, "language": rec.language,
                        "source": rec.source, "license": rec.provenance.get("license")}
                sft.append({**meta, "instruction": instr[key], "output": rec.code})
                chat.append({**meta, "messages": [{"role": "user", "content": instr[key]},
                                                  {"role": "assistant", "content": rec.code}]})
            main = instr.get("en:detailed") or next(iter(instr.values()), "")
            tasks.append(_task(rec, main, val))
            run.put(rec.id, "ok", payload={"rows": len(instr)})
        if "sft" in cfg.formats:
            _jsonl(out_dir / "sft.jsonl", sft)
        if "chat" in cfg.formats:
            _jsonl(out_dir / "chat.jsonl", chat)
        if "rlvr" in cfg.formats:
            _jsonl(out_dir / "rlvr_trl.jsonl", [{"prompt": t["prompt"], **t["columns"]} for t in tasks])
            _parquet(out_dir / "rlvr_verl.parquet", [t["verl"] for t in tasks])
        if "card" in cfg.formats:
            _atomic(out_dir / "README.md", card(ctx, records))
        run.stats.update(records=len(records), sft_rows=len(sft), out_dir=str(out_dir))
    return run.stats


def _task(rec, prompt: str, val: dict) -> dict:
    task = {"task_id": rec.id, "language": rec.language, "binding": rec.binding, "entry": rec.entry,
            "baseline_ms": {k: v.get("eager_ms", {}).get("median") for k, v in (val.get("timing") or {}).items()}}
    columns = {"task": json.dumps(task, sort_keys=True), "task_id": rec.id}
    verl = {"data_source": "sftbuild", "prompt": [{"role": "user", "content": prompt}],
            "ability": f"{rec.language}-kernel",
            "reward_model": {"style": "rule", "ground_truth": columns["task"]},
            "extra_info": {"task_id": rec.id, "source": rec.source}}
    return {"prompt": prompt, "columns": columns, "verl": verl}


def card(ctx: Context, records) -> str:
    funnel = ctx.store.funnel()
    from sftbuild.funnel import format_funnel

    licences = Counter(r.provenance.get("license") or "unknown" for r in records)
    sources = Counter(r.source for r in records)
    manifests = [m for m in ctx.store.manifests() if m["stage"] == "validate"]
    env = manifests[-1]["env"] if manifests else environment()
    lines = [
        "---", "license: other", "tags: [gpu-kernels, cuda, triton, sft, rlvr]", "---", "",
        "# GPU kernel SFT dataset", "",
        f"{len(records)} kernels, each compiled, bound to a torch reference, checked for correctness "
        "and reviewed on a stratified sample. The code of every sample is byte for byte what was validated.",
        "", "## Funnel", "", "```", format_funnel(funnel), "```", "",
        "## Sources", "", *[f"- {s}: {n}" for s, n in sorted(sources.items())], "",
        "## Licences", "", *[f"- {lic}: {n}" for lic, n in sorted(licences.items())], "",
        "## Provenance", "",
        "| id | source | path | lines | licence | version |", "| --- | --- | --- | --- | --- | --- |",
        *[f"| {r.id[:12]} | {r.source} | {r.provenance.get('path', '')} | {r.provenance.get('lines', '')} | "
          f"{r.provenance.get('license', '')} | {r.provenance.get('version', '')} |" for r in records],
        "", "## Validation environment", "", "```", json.dumps(env, indent=2, sort_keys=True), "```", "",
    ]
    return "\n".join(lines)


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _jsonl(path: Path, rows: list[dict]) -> None:
    _atomic(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))


def _parquet(path: Path, rows: list[dict]) -> None:
    import datasets

    tmp = path.with_suffix(".tmp")
    if rows:
        datasets.Dataset.from_list(rows).to_parquet(str(tmp))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"data_source": pa.array([], pa.string())}), tmp)
    os.replace(tmp, path)
