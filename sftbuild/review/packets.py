"""Review packets for the tools review teams already run, and their verdicts read back.

label-studio  OUT is a task import JSON: a list of {"data": {...}} tasks (record_id, headline,
              evidence, instruction, reference, code), plus OUT's stem + ".label_config.xml",
              the labeling config with a `verdict` choice (accept/reject) and a `reason` choice.
              `review import` reads a Label Studio JSON export: each task's `annotations`, each
              with `result` items {"from_name": "verdict"|"reason", "value": {"choices": [...]}}
              and `completed_by` (a user id or {"email": ...}).
argilla       OUT is a folder in the layout of Argilla 2's `Dataset.to_disk`:
              .argilla/settings.json (text fields; `verdict` and `reason` label questions),
              .argilla/dataset.json and records.json (records with `id`, `fields`, `metadata`).
              `rg.Dataset.from_disk(OUT)` loads it into an Argilla server; no argilla package is needed here.
              `review import` reads records.json (or a folder holding it, or a list of record
              dicts) whose `responses` map a question name to [{"value", "user_id"}].

Verdicts read back go through the same checks as any other (a reject needs a reason; the
record must be in the current sample); each is logged with `via` naming the tool.
"""
from __future__ import annotations

import json
from pathlib import Path

from sftbuild.context import Context, UserError
from sftbuild.review import evidence, stage

REASON_CODES = list(evidence.REASONS.values())


def _items(ctx: Context) -> list[dict]:
    if ctx.store.stage_config("review") is None:
        raise UserError("no review sample yet: run `sftbuild review sample` first")
    out = []
    for row in ctx.store.review_rows():
        ev = evidence.gather(ctx.store, row["record_id"])
        instr = ev.instructions
        out.append({"record_id": ev.record.id, "name": ev.record.name, "headline": ev.headline,
                    "evidence": "\n".join(evidence.lines(ev)[1:]),
                    "instruction": instr.get("en:detailed") or next(iter(instr.values()), ""),
                    "reference": ev.reference["source"], "code": ev.record.code, "language": ev.language,
                    "source": ev.record.source, "stratum": row["stratum"], "copies": row["copies"]})
    return out


def write(ctx: Context, fmt: str, out: Path) -> int:
    items = _items(ctx)
    try:
        if fmt == "label-studio":
            _write_json(out, [{"data": it, "meta": {"stratum": it["stratum"]}} for it in items])
            out.with_name(out.stem + ".label_config.xml").write_text(LABEL_CONFIG, encoding="utf-8")
        elif fmt == "argilla":
            _write_argilla(out, items)
        else:
            raise UserError(f"unknown packet format {fmt!r} (known: label-studio, argilla)")
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from e
    return len(items)


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)


LABEL_CONFIG = """<View>
  <Header value="$headline"/>
  <Text name="evidence" value="$evidence"/>
  <Text name="instruction" value="$instruction"/>
  <Text name="reference" value="$reference"/>
  <Text name="code" value="$code"/>
  <Choices name="verdict" toName="code" choice="single" required="true">
    <Choice value="accept"/>
    <Choice value="reject"/>
  </Choices>
  <Choices name="reason" toName="code" choice="single">
""" + "".join(f'    <Choice value="{c}"/>\n' for c in REASON_CODES) + """  </Choices>
</View>
"""

FIELDS = ("headline", "evidence", "instruction", "reference", "code")
GUIDELINES = ("Accept when the code does what the instruction says and the evidence supports it; "
              "reject with a reason otherwise.")


def argilla_settings() -> dict:
    """Settings in the JSON form of Argilla 2's `Settings.to_json`."""
    def label(name, labels, required):
        return {"name": name, "title": name, "description": None, "required": required,
                "type": "label_selection",
                "settings": {"type": "label_selection", "options": [{"value": v, "text": v, "description": None}
                                                                    for v in labels], "visible_options": None}}
    return {"guidelines": GUIDELINES, "allow_extra_metadata": True,
            "fields": [{"name": f, "title": f, "required": f in ("headline", "code"), "description": None,
                        "type": "text", "settings": {"type": "text", "use_markdown": f in ("reference", "code")}}
                       for f in FIELDS],
            "questions": [label("verdict", ["accept", "reject"], True), label("reason", REASON_CODES, False)],
            "metadata": [], "vectors": [], "mapping": None,
            "distribution": {"strategy": "overlap", "min_submitted": 1}}


def _write_argilla(out: Path, items: list[dict]) -> None:
    records = [{"id": it["record_id"],
                "fields": {f: (f"```{it['language']}\n{it[f]}\n```" if f in ("reference", "code") and it[f]
                               else it[f]) for f in FIELDS},
                "metadata": {k: it[k] for k in ("name", "source", "stratum", "copies", "language")},
                "suggestions": {}, "responses": {}, "vectors": {}, "status": "pending"} for it in items]
    settings = argilla_settings()
    (out / ".argilla").mkdir(parents=True, exist_ok=True)
    _write_json(out / ".argilla" / "settings.json", settings)
    _write_json(out / ".argilla" / "dataset.json", {"name": "sftbuild-review", "status": "ready"})
    _write_json(out / "records.json", records)


# ---- reading verdicts back ----------------------------------------------------

def read(ctx: Context, path: Path) -> dict:
    data = _load(path)
    if isinstance(data, dict):
        data = data.get("records") or data.get("tasks") or [data]
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a list of Label Studio tasks or Argilla records")
    found = []
    for item in data:
        if not isinstance(item, dict):
            continue
        found += _from_label_studio(item) if "annotations" in item else _from_argilla(item)
    stats = {"verdicts": 0, "skipped": 0}
    problems = []
    for rid, verdict, reason, reviewer, via in found:
        try:
            stage.verdict(ctx, rid, verdict, reason, reviewer, via=via)
            stats["verdicts"] += 1
        except UserError as e:
            stats["skipped"] += 1
            problems.append(f"{str(rid)[:12]}: {e}")
    for p in problems[:10]:
        ctx.echo(f"  skipped {p}")
    return stats


def _load(path: Path):
    if path.is_dir():
        path = path / "records.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not a readable JSON export: {e}") from e


def _from_label_studio(task: dict) -> list[tuple]:
    rid = (task.get("data") or {}).get("record_id")
    out = []
    for ann in task.get("annotations") or []:
        if not isinstance(ann, dict) or ann.get("was_cancelled"):
            continue
        choice = {}
        for res in ann.get("result") or []:
            values = ((res or {}).get("value") or {}).get("choices") or []
            if values:
                choice[res.get("from_name")] = values[0]
        by = ann.get("completed_by")
        who = by.get("email") or by.get("id") if isinstance(by, dict) else by
        if rid and choice.get("verdict"):
            out.append((rid, choice["verdict"], choice.get("reason", ""), f"label-studio:{who}", "label-studio"))
    return out


def _from_argilla(rec: dict) -> list[tuple]:
    rid = rec.get("id") or (rec.get("metadata") or {}).get("record_id")
    responses = rec.get("responses") or {}
    by_user: dict[str, dict] = {}
    for question, answers in responses.items():
        for a in answers or []:
            if isinstance(a, dict) and a.get("value") is not None:
                by_user.setdefault(str(a.get("user_id")), {})[question] = a["value"]
    return [(rid, v["verdict"], v.get("reason") or "", f"argilla:{user}", "argilla")
            for user, v in by_user.items() if rid and v.get("verdict")]
