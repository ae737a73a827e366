"""The export stage: a view of the store, swapped in whole, never emptier than the one it replaces.

Every registered exporter plug-in runs (``sftbuild list exporter``), or those ``export.formats``
names. The built-in ones write a folder ``datasets.load_dataset(DIR, CONFIG)`` reads as is:

  data/<config>/<split>-00000-of-00001.parquet   one table per config, and as JSONL under jsonl/
    sft_messages           {"messages": [user, assistant]}           (TRL SFTTrainer, chat)
    sft_prompt_completion  {"prompt", "completion"}                  (TRL prompt-completion)
    sft_alpaca             {"instruction", "input", "output"}
    rlvr_verl              data_source, prompt, ability, reward_model, extra_info  (verl)
    rlvr_trl               {"prompt", "task", "task_id"}             (TRL GRPOTrainer)
  README.md, plots/*.png   the dataset card: YAML configs, funnel, validation, review, licences
  export.json              what this export holds (records and rows per config and split)

Rules:
- Only records that passed every stage, with their code byte for byte as validated, by this
  validator: a verdict stored under other checks, templates, tables or project version than this
  code's refuses the whole export, naming how many and `sftbuild validate`; the review gate must be open.
- Splits: `train` (correctness checked on a GPU); records checked only in the CPU
  interpreter are left out, or exported as split `cpu_interpreter` with
  ``export.interpreter_only: split``; unbound records only with ``export.include_unbound``,
  as split `unbound`.
  Left-out records are results of this stage (dropped: interpreter_only / unbound), so the
  funnel says so.
- Nothing to export is never a silent success: the stage raises `Waiting` with one sentence
  saying why and what to do (`sftbuild export` exits non-zero with it, `sftbuild run` prints
  it above the funnel); the folder is not touched.
- The export is written to a new folder next to the old one and swapped in by rename; an
  export with fewer records than the one it replaces needs ``force``.
- The card's funnel is the store's once this stage's results are in: `sftbuild status` prints
  the same numbers.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import tempfile
from pathlib import Path

from sftbuild.context import Context, StageRun, UserError, Waiting
from sftbuild.producers import stale
from sftbuild.output import summary
from sftbuild.output.exporters import EXPORTERS, Batch, Exporter
from sftbuild.output.rows import LocalPaths, Sample, bound, where
from sftbuild.review_gate import gate

MANIFEST = "export.json"


def selected(formats: list[str]) -> list[Exporter]:
    """The exporters `export.formats` names (none: every registered one), in their run order; an unknown
    name is a user error."""
    formats = formats or EXPORTERS.names()
    unknown = [f for f in formats if f not in EXPORTERS]
    if unknown:
        raise UserError(f"export.formats: unknown exporter {unknown[0]!r} (known: {', '.join(EXPORTERS.names())})")
    return sorted((EXPORTERS.create(f) for f in dict.fromkeys(formats)), key=lambda e: (e.order, e.name))


def run(ctx: Context, force: bool = False, push_to_hub: str | None = None) -> dict:
    cfg = ctx.config.export
    exporters = selected(cfg.formats)
    if push_to_hub:
        from sftbuild.output import hub

        hub.check(push_to_hub)
    out_dir = _out_dir(ctx)  # a folder that cannot be written is said before anything else
    records, samples, left_out = _ready(ctx)
    before = previous_records(out_dir)
    if len(samples) < before and not force:
        raise UserError(f"this export has {len(samples)} records, fewer than the {before} in {out_dir}; "
                        "rerun with --force to replace it")
    conf = {"formats": [e.name for e in exporters], "out_dir": str(out_dir), "interpreter_only": cfg.interpreter_only,
            "include_unbound": cfg.include_unbound}
    with StageRun(ctx, "export", conf, extra_key=sorted(r.id for r in records)) as run:
        for s in samples:
            run.put(s.record.id, "ok", payload={"split": s.split, "rows": len(s.instructions)})
        for rid, reason in left_out.items():
            run.put(rid, "dropped", reason)
        run.flush()  # the card's funnel must include this stage's own results
        excluded: dict[str, int] = {}
        for reason in left_out.values():
            excluded[reason] = excluded.get(reason, 0) + 1
        batch = Batch(samples, ctx.store, funnel=LocalPaths.of(records, ctx.workspace)(ctx.store.funnel()),
                      excluded=excluded,
                      review=summary.review(ctx.store, ctx.config.review.confidence))
        tmp = _fresh(out_dir.with_name(f".{out_dir.name}.new"))
        try:
            for exporter in exporters:
                exporter.write(batch, tmp)
            manifest = {"records": len(samples), "configs": batch.configs, "excluded": excluded,
                        "splits": {k: len(v) for k, v in batch.by_split().items()}}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            swap(tmp, out_dir)
        except OSError as e:
            raise UserError(f"could not write the export to {out_dir}: {e.strerror or e}") from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        run.stats.update(records=len(samples), out_dir=str(out_dir),
                         rows=sum(i["rows"] for c in batch.configs.values() for i in c.values()),
                         **{f"split_{k}": len(v) for k, v in batch.by_split().items()})
    if push_to_hub:
        run.stats["pushed"] = hub.push(out_dir, push_to_hub)
    return run.stats


def waits(ctx: Context) -> str | None:
    """Why `sftbuild export` would refuse now (the review gate, nothing to export), or None: what
    `review status` calls the export gate."""
    try:
        _ready(ctx)
    except Waiting as e:
        return str(e)
    return None


def _ready(ctx: Context) -> tuple[list, list[Sample], dict[str, str]]:
    """The records, samples and left-out records of an export that may run; else Waiting says why
    (`sftbuild export` exits non-zero with the sentence; `sftbuild run` prints it and stops)."""
    blocked = gate(ctx)
    if blocked:
        raise Waiting(f"waiting for review: {blocked}")
    records = ctx.store.alive("export")
    older, what = stale(ctx.store, "validate")
    older &= {r.id for r in records}
    if older:  # nothing partial: the verdicts of this validator, or no export
        raise Waiting(f"{len(older)} verdicts were given by an older validator ({'; '.join(what)}): run "
                      f"`sftbuild validate` to check those records again, then export; nothing was exported")
    samples, left_out = _samples(ctx, records)
    if not samples:
        raise Waiting(_why_empty(ctx, left_out))
    return records, samples, left_out


def _samples(ctx: Context, records) -> tuple[list[Sample], dict[str, str]]:
    """The samples to write, each with its split, and the records left out with the reason."""
    cfg = ctx.config.export
    describe = ctx.store.results_for("describe")
    validate = ctx.store.results_for("validate")
    reviews = {r["record_id"]: r for r in ctx.store.review_rows()}
    local = LocalPaths.of(records, ctx.workspace)
    samples, left_out = [], {}
    for rec in map(local.record, records):
        payload = validate.get(rec.id, {}).get("payload") or {}
        if not bound(rec) and not cfg.include_unbound:
            left_out[rec.id] = "unbound"
            continue
        split = "unbound" if not bound(rec) else "train" if where(payload) == "gpu" else "cpu_interpreter"
        if split == "cpu_interpreter" and cfg.interpreter_only != "split":
            left_out[rec.id] = "interpreter_only"
            continue
        env = next((v["env"] for v in reversed(ctx.store.verdicts(rec.id)) if v["stage"] == "validate"), {})
        instr = (describe.get(rec.id, {}).get("payload") or {}).get("instructions", {})
        samples.append(Sample(rec, instr, payload, env, reviews.get(rec.id), split))
    return samples, left_out


def _why_empty(ctx: Context, left_out: dict[str, str]) -> str:
    """One sentence: why nothing can be exported, and what to do."""
    funnel = ctx.store.funnel()
    stages = funnel["stages"]
    waiting_gpu = stages.get("validate", {}).get("waiting", {}).get("needs_gpu", 0)
    reasons = set(left_out.values())
    if "interpreter_only" in reasons and "unbound" not in reasons:
        return (f"0 records to export: {len(left_out)} were validated only in the CPU Triton interpreter; "
                "run `sftbuild validate` on a GPU machine, or set `export.interpreter_only: split` to export them "
                "in their own split")
    if left_out:
        return (f"0 records to export: {len(left_out)} have no reference binding; bind them (a source manifest) "
                "or set `export.include_unbound: true`")
    if waiting_gpu and not stages.get("validate", {}).get("ok"):
        return (f"0 records validated: {waiting_gpu} wait for a GPU; run `sftbuild validate` on a GPU machine, "
                "then `sftbuild run` again")
    if not funnel["records"]:
        return "0 records to export: nothing was harvested; run `sftbuild harvest SOURCE` first"
    return ("0 records passed every stage before export; `sftbuild status` shows where each record stopped "
            "and why")


def _out_dir(ctx: Context) -> Path:
    out = Path(ctx.config.export.out_dir or ctx.workspace / "export")
    if out.exists() and not out.is_dir():
        raise UserError(f"export.out_dir {out} is a file, not a folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"export.out_dir {out}: cannot create its parent folder ({e.strerror or e})") from e
    if not os.access(out.parent, os.W_OK):
        raise UserError(f"export.out_dir {out}: its folder {out.parent} is not writable")
    try:  # /proc and /sys pass the access check and refuse the folder itself
        os.rmdir(tempfile.mkdtemp(prefix=f".{out.name}.probe", dir=out.parent))
    except OSError as e:
        raise UserError(f"export.out_dir {out}: nothing can be written in {out.parent} ({e.strerror or e})") from e
    aside = out.with_name(out.name + ".old")
    if not out.exists() and aside.is_dir():  # a swap killed between its two renames: put the old one back
        os.rename(aside, out)
    return out


def previous_records(out_dir: Path) -> int:
    """How many records the export in `out_dir` holds (0 when there is none)."""
    try:
        return int(json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))["records"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    legacy = out_dir / "sft.jsonl"  # an export from before export.json
    if legacy.is_file():
        ids = {json.loads(line).get("id") for line in legacy.read_text(encoding="utf-8").splitlines() if line.strip()}
        return len(ids)
    return 0


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)  # left by a killed export
    path.mkdir(parents=True)
    return path


def swap(new: Path, target: Path) -> None:
    """Make `new` the folder at `target` in one step; what was at `target` ends up at `new`.

    Linux renameat2(RENAME_EXCHANGE) swaps two paths atomically; without it (another OS, an
    old kernel, a file system that lacks it) the old folder is renamed aside first, and a kill
    between the two renames leaves it at `<target>.old`, whole."""
    if not target.exists():
        os.rename(new, target)
        return
    if _exchange(new, target):
        return
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    os.rename(target, old)
    os.rename(new, target)
    shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0
