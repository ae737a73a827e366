"""Exporters: one plug-in per output format, one file each in this folder.

An exporter subclasses `Exporter`, registers itself with ``@EXPORTERS.register``
and has a ``name`` (what ``export.formats`` lists), an ``order`` (exporters run
by order) and one method, ``files(batch) -> {file name: rows or text}``. The
base class does the writing: a ``.jsonl`` file gets one JSON object per row, a
``.parquet`` file its rows through `datasets`, anything else the text as is.
Every file is written to a temporary name and renamed, so a killed export never
leaves a half-written file.

A `Batch` is what every exporter reads: the records that passed every stage,
each with its instructions and validation payload, and the store (for the
funnel and run manifests).
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Callable

from sftbuild.plugins import Plugin, Registry
from sftbuild.record import Record
from sftbuild.store import Store


@dataclasses.dataclass
class Sample:
    """One exported record: its code byte for byte as validated, and what earlier stages said of it."""

    record: Record
    instructions: dict[str, str]  # "en:detailed" -> text, as the describe stage stored them
    validation: dict[str, Any]  # the validate stage's payload

    def meta(self, variant: str) -> dict[str, Any]:
        """The columns every instruction row carries."""
        rec = self.record
        return {"id": rec.id, "lang": variant.split(":")[0], "variant": variant, "language": rec.language,
                "source": rec.source, "license": rec.provenance.get("license")}


@dataclasses.dataclass
class Batch:
    samples: list[Sample]
    store: Store

    @property
    def records(self) -> list[Record]:
        return [s.record for s in self.samples]


class Exporter(Plugin):
    """An output format: the files it writes and their contents."""

    def files(self, batch: Batch) -> dict[str, list[dict] | str]:
        raise NotImplementedError

    def write(self, batch: Batch, out_dir: Path) -> dict[str, int]:
        """Write every file atomically under `out_dir`; rows (or characters) per file name."""
        written = {}
        for name, content in self.files(batch).items():
            path = out_dir / name
            WRITERS.get(path.suffix, _atomic)(path, content)
            written[name] = len(content)
        return written


EXPORTERS: Registry[Exporter] = Registry("exporter", Exporter, __name__, doc="output formats of the export stage")


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


# how a file is written, by its suffix; any other suffix is text
WRITERS: dict[str, Callable[[Path, Any], None]] = {".jsonl": _jsonl, ".parquet": _parquet}
