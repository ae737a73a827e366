"""Exporters: one plug-in per output format, one file each in this folder.

An exporter subclasses `Exporter`, registers itself with ``@EXPORTERS.register`` and has a
``name`` (what ``export.formats`` lists), an ``order`` (exporters run by order) and one or
both of:

  tables(batch) -> {config name: Table}   a dataset config: its schema (sftbuild.output.rows) and rows per split
  files(batch)  -> {relative path: text or bytes}

The base class does the writing. A table's split becomes
``data/<config>/<split>-00000-of-00001.parquet`` (the layout ``datasets.load_dataset(DIR)``
reads through the card's ``configs:``) and the same rows as ``jsonl/<config>/<split>.jsonl``;
every table written is recorded in ``batch.configs`` for the card. The stage writes into a
fresh folder and swaps it in whole, so exporters never see a half-written export.

A `Batch` is what every exporter reads: the samples (records that passed every stage, each
with its split), the store, the funnel as it stands once the export's own results are in,
what was left out and why, and the review summary.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from sftbuild.output.rows import Sample, features, meta, to_features
from sftbuild.plugins import Plugin, Registry
from sftbuild.record import Record
from sftbuild.store import Store


@dataclasses.dataclass
class Table:
    """One dataset config: its schema (type names, see sftbuild.output.rows) and its rows per split."""

    features: dict
    splits: dict[str, list[dict]]


@dataclasses.dataclass
class Batch:
    samples: list[Sample]
    store: Store
    funnel: dict = dataclasses.field(default_factory=dict)
    excluded: dict[str, int] = dataclasses.field(default_factory=dict)  # reason -> records left out
    review: dict[str, Any] = dataclasses.field(default_factory=dict)  # sftbuild.output.review.summary
    configs: dict[str, dict[str, dict]] = dataclasses.field(default_factory=dict)  # config -> split -> {path, rows}

    @property
    def records(self) -> list[Record]:
        return [s.record for s in self.samples]

    def by_split(self) -> dict[str, list[Sample]]:
        out: dict[str, list[Sample]] = {}
        for s in self.samples:
            out.setdefault(s.split, []).append(s)
        return out


class Exporter(Plugin):
    """An output format: the tables and files it writes."""

    def tables(self, batch: Batch) -> dict[str, Table]:
        return {}

    def files(self, batch: Batch) -> dict[str, str | bytes]:
        return {}

    def write(self, batch: Batch, out_dir: Path) -> dict[str, int]:
        """Write every table and file under `out_dir`; rows (or bytes) per relative path."""
        written = {}
        for config, table in self.tables(batch).items():
            for split, rows in table.splits.items():
                if not rows:
                    continue
                path = f"data/{config}/{split}-00000-of-00001.parquet"
                _parquet(out_dir / path, rows, table.features)
                _jsonl(out_dir / "jsonl" / config / f"{split}.jsonl", rows)
                batch.configs.setdefault(config, {})[split] = {"path": path, "rows": len(rows)}
                written[path] = len(rows)
        for name, content in self.files(batch).items():
            path = out_dir / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
            written[name] = len(content)
        return written


def per_instruction(batch: Batch, columns: dict, make) -> Table:
    """A table with one row per record and instruction (language x level): `make(sample, text)`
    gives the row's own `columns`; `text_lang`, `level` and the metadata follow."""
    splits: dict[str, list[dict]] = {}
    for s in batch.samples:
        m = meta(s)
        for key in s.variants():
            lang, level = key.split(":")
            splits.setdefault(s.split, []).append({**make(s, s.instructions[key]), "text_lang": lang,
                                                   "level": level, **m})
    return Table(features(**columns, text_lang="string", level="string"), splits)


EXPORTERS: Registry[Exporter] = Registry("exporter", Exporter, __name__, doc="output formats of the export stage")


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows),
                    encoding="utf-8")


def _parquet(path: Path, rows: list[dict], schema: dict) -> None:
    import datasets

    path.parent.mkdir(parents=True, exist_ok=True)
    features = to_features(schema)
    datasets.disable_progress_bars()  # a progress bar per file is noise in the stage's report
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
