"""The dataset card (README.md) and its plots, written last: they describe what the others wrote.

The YAML header carries the licence (the one licence every record shares, else `other` with
a table in the text), task categories, size category, tags and one `configs:` entry per table
with its splits, which is what lets `datasets.load_dataset(DIR, config)` read the folder. The
text states the funnel as it stood at export time (the same numbers `sftbuild status` prints),
what was left out, where validation ran and what it covered, the review result and its bound,
and the licence, source and provenance breakdowns. Plots: plots/funnel.png, plots/speedup.png,
plots/errors.png (matplotlib, Agg backend).
"""
from __future__ import annotations

import io
import math
from collections import Counter

import yaml

from sftbuild.funnel import format_funnel
from sftbuild.output import summary
from sftbuild.output.exporters import EXPORTERS, Batch, Exporter
from sftbuild.output.rows import validation

DEFAULT_CONFIG = "sft_messages"
SIZES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
         (10_000_000, "1M<n<10M")]
TAGS = ["code", "gpu-kernels", "cuda", "triton", "sft", "rlvr"]


@EXPORTERS.register
class Card(Exporter):
    """README.md and plots/*.png: the dataset card with funnel, licences, sources, validation and review."""

    name = "card"
    version = 1
    order = 90  # last: it describes what the others wrote

    def files(self, batch: Batch):
        return {"README.md": card(batch), **plots(batch)}


def header(batch: Batch) -> dict:
    licences = Counter(_licence(r.provenance.get("license")) for r in batch.records)
    rows = max((sum(s["rows"] for s in splits.values()) for splits in batch.configs.values()), default=0)
    head = {
        "license": next(iter(licences)) if len(licences) == 1 and "other" not in licences else "other",
        "language": ["en", "zh"],
        "task_categories": ["text-generation"],
        "size_categories": [next((label for top, label in SIZES if rows < top), "n>1T")],
        "tags": TAGS,
        "pretty_name": "Validated GPU kernels (CUDA and Triton)",
        "configs": [{"config_name": name, **({"default": True} if name == _default(batch) else {}),
                     "data_files": [{"split": split, "path": info["path"]} for split, info in sorted(splits.items())]}
                    for name, splits in sorted(batch.configs.items())],
    }
    if head["license"] == "other":
        head["license_name"] = "mixed"
        head["license_details"] = "Each row carries its own licence in the `license` column; see the licence table."
    return head


def card(batch: Batch) -> str:
    records, splits = batch.records, batch.by_split()
    review = batch.review or {}
    licences = Counter(r.provenance.get("license") or "unknown" for r in records)
    sources = Counter(r.source for r in records)
    cov = {split: summary.coverage(samples) for split, samples in sorted(splits.items())}
    lines = ["---", yaml.safe_dump(header(batch), sort_keys=False, allow_unicode=True).rstrip(), "---", "",
             "# Validated GPU kernels (CUDA and Triton)", "",
             f"{len(records)} kernels. Each record outside the `unbound` split is bound to a torch reference (an op, "
             "a KernelBench program or an Inductor program), compiled, and checked for correctness over generated "
             "shapes, dtypes and layouts. The code of every row is byte for byte what was validated.", ""]
    lines += [f"- `{split}`: {len(samples)} records, " + _where_sentence(split) for split, samples in
              sorted(splits.items())]
    lines += ["", "## Load", "", "```python", "from datasets import load_dataset",
              f'ds = load_dataset("path/to/this/folder", "{_default(batch)}")  # or a config below', "```", "",
              "| config | split | rows | file |", "| --- | --- | --- | --- |",
              *[f"| {name} | {split} | {info['rows']} | {info['path']} |"
                for name, s in sorted(batch.configs.items()) for split, info in sorted(s.items())], "",
              "Every row carries `id`, `language`, `kernel`, `op` or `program`, `binding`, `source`, `license`, "
              "`url`, `path`, `validation` (where it ran, GPU, driver and tool versions, trials, shapes, dtypes, "
              "worst errors, speedup over torch eager) and `review` (whether it was sampled, the verdict). "
              "SFT configs have one row per record and instruction (`text_lang` en/zh, `level` brief/detailed). "
              "`rlvr_verl.reward_model.ground_truth` and `rlvr_trl.task` are the task JSON that "
              "`sftbuild.validate.reward.reward(task, code)` scores.", ""]
    lines += ["## Funnel", "", "Counts per stage and drop reason at export time (as `sftbuild status` prints them).",
              "", "```", format_funnel(batch.funnel), "```", "", "![funnel](plots/funnel.png)", ""]
    if batch.excluded:
        lines += ["Passed every stage but left out of this export:", "",
                  *[f"- {reason}: {n} ({_excluded_why(reason)})" for reason, n in sorted(batch.excluded.items())], ""]
    lines += ["## Validation", "", "| where | GPU | driver | CUDA | torch | triton | nvcc | records |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |",
              *[f"| {e['where']} | {e['gpu'] or '-'} | {e['driver'] or '-'} | {e['cuda'] or '-'} | {e['torch'] or '-'} "
                f"| {e['triton'] or '-'} | {e['nvcc'] or '-'} | {e['records']} |"
                for e in summary.environments(batch.samples)], "",
              *[f"- `{split}` coverage: {c['trials']} trials over {c['shapes']} shapes; dtypes "
                + (", ".join(f"{d} ({n} records)" for d, n in c["dtypes"].items()) or "none recorded")
                for split, c in cov.items()], "",
              "![speedups](plots/speedup.png) ![errors](plots/errors.png)", ""]
    lines += ["## Review", "",
              f"{review.get('sampled', 0)} records were sampled for human review: {review.get('accepted', 0)} accepted, "
              f"{review.get('rejected', 0)} rejected, {review.get('pending', 0)} pending"
              + (f" (reviewers: {', '.join(review['reviewers'])})" if review.get("reviewers") else "") + ".",
              f"What the sample shows: {review.get('statement', 'no review data')}.", "",
              *([f"When the sample was drawn: {_drawn(review['stage'])}.", ""] if _drawn(review.get("stage")) else [])]
    lines += ["## Licences", "", "| licence | records |", "| --- | --- |",
              *[f"| {lic} | {n} |" for lic, n in sorted(licences.items())], "",
              "## Sources", "", "| source | records |", "| --- | --- |",
              *[f"| {src} | {n} |" for src, n in sorted(sources.items())], "",
              "## Provenance", "", "| id | source | path | lines | licence | version |",
              "| --- | --- | --- | --- | --- | --- |",
              *[f"| {r.id[:12]} | {r.source} | {r.provenance.get('path', '')} | {_lines(r.provenance.get('lines'))} | "
                f"{r.provenance.get('license', '')} | {r.provenance.get('version', '') or ''} |" for r in records], ""]
    return "\n".join(lines)


def plots(batch: Batch) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    out = {}
    stages = batch.funnel.get("stages", {})
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = list(stages)
    ok = [stages[s]["ok"] for s in names]
    dropped = [sum(stages[s]["dropped"].values()) for s in names]
    waiting = [sum(stages[s]["waiting"].values()) for s in names]
    ax.barh(names, ok, label="ok", color="tab:green")
    ax.barh(names, dropped, left=ok, label="dropped", color="tab:red")
    ax.barh(names, waiting, left=[a + b for a, b in zip(ok, dropped)], label="waiting", color="tab:gray")
    ax.invert_yaxis()
    ax.set_xlabel("records")
    ax.set_title(f"Funnel: {batch.funnel.get('records', 0)} records harvested")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    out["plots/funnel.png"] = _png(fig, plt)

    vals = [validation(s) for s in batch.samples]
    speedups = [v["speedup"] for v in vals if v["speedup"]]
    out["plots/speedup.png"] = _hist(plt, [math.log2(x) for x in speedups], "log2(speedup over torch eager)",
                                     f"Speedups ({len(speedups)} records timed on a GPU)", "no GPU timings")
    errors = [v["worst_max_rel"] or v["worst_norm_rel"] for v in vals]
    errors = [math.log10(e) if e > 0 else -16.0 for e in errors if e is not None]
    out["plots/errors.png"] = _hist(plt, errors, "log10(worst relative error)",
                                    f"Worst errors ({len(errors)} records)", "no errors recorded")
    return out


def _hist(plt, values, xlabel, title, empty) -> bytes:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    if values:
        ax.hist(values, bins=min(30, max(5, len(values))), color="tab:blue")
    else:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("records")
    ax.set_title(title)
    return _png(fig, plt)


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _drawn(stats: dict | None) -> str:
    """What the review stage recorded when it drew the sample (sizes, and any bound it states),
    without its per-record status counts, which the verdicts have since changed."""
    keep = {k: v for k, v in (stats or {}).items()
            if k != "ok" and ":" not in k and not isinstance(v, (dict, list))}
    return ", ".join(f"{k}={v}" for k, v in sorted(keep.items()))


def _default(batch: Batch) -> str:
    return DEFAULT_CONFIG if DEFAULT_CONFIG in batch.configs else next(iter(sorted(batch.configs)), "")


def _licence(spdx: str | None) -> str:
    """The Hub's licence id for an SPDX id (they are the SPDX id in lower case); `other` when unknown."""
    return spdx.lower() if spdx and spdx.lower() not in ("unknown", "other", "noassertion") else "other"


def _where_sentence(split: str) -> str:
    if split == "unbound":
        return "no reference is bound to these kernels: what they compute was not checked (export.include_unbound)."
    if split == "cpu_interpreter":
        return "checked only in the CPU Triton interpreter (TRITON_INTERPRET=1), never on a GPU; no timings."
    return "checked for correctness on a GPU (timed against torch eager where a speedup is given)."


def _excluded_why(reason: str) -> str:
    return {"interpreter_only": "validated only in the CPU interpreter; `export.interpreter_only: split` exports them",
            "unbound": "no reference to state or check what they compute; `export.include_unbound: true` exports them",
            }.get(reason, reason)


def _lines(lines) -> str:
    return f"{lines[0]}-{lines[1]}" if isinstance(lines, (list, tuple)) and len(lines) == 2 else ""
