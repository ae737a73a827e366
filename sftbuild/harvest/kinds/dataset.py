"""The `dataset` kind: a .jsonl / .json / .parquet file of KernelBook or AI CUDA Engineer rows."""
from __future__ import annotations

from pathlib import Path

from sftbuild.harvest import kernelbench as KB
from sftbuild.harvest import license as L
from sftbuild.harvest.kinds import KINDS, SourceKind
from sftbuild.harvest.sources import Source, SourceError

DATASET_EXT = (".jsonl", ".json", ".parquet")


@KINDS.register
class Dataset(SourceKind):
    """A .jsonl / .json / .parquet file of KernelBook or AI CUDA Engineer rows, each bound exactly to its reference.

    Rows of another layout are skipped as `unknown_row_layout`; rows marked incorrect are
    kept and dropped as `marked_incorrect`.
    """
    name = "dataset"
    version = 1
    order = 50

    def recognise(self, spec: str, path: Path) -> Source | None:
        if not spec.endswith(DATASET_EXT):
            return None
        if not path.is_file():
            raise SourceError(f"dataset file {spec} does not exist")
        return Source(name=spec, kind=self.name, location=str(path.resolve()))

    def harvest(self, h) -> None:
        path = h.src.location
        if not Path(path).is_file():
            raise SourceError(f"dataset file {path} does not exist")
        try:
            rows = list(KB.dataset_rows(path))
        except Exception as e:  # datasets raises many kinds for a malformed file
            raise SourceError(f"cannot read dataset {path}: {type(e).__name__}: {str(e)[:200]}") from e
        fmt_seen = False
        for row in rows:
            pair = KB.dataset_pair(row)
            if pair is None:
                h.skip(path, "unknown_row_layout", ", ".join(sorted(row))[:200], item=f"row {row['_row']}")
                continue
            fmt_seen = True
            if not pair["solution"] or not pair["reference"]:
                h.skip(path, "empty_row", "", item=f"row {row['_row']}")
                continue
            code = pair["solution"]
            n = code.count("\n") + 1
            lic = L.normalize(pair["license"])  # the row's own licence field, then the source's
            lic_source = "metadata" if lic else "registry" if L.normalize(h.src.license) else "unknown"
            lic = lic or L.normalize(h.src.license) or "unknown"
            prov = {"source_kind": self.name, "url": pair["url"], "commit": pair["commit"], "path": path,
                    "row": row["_row"], "format": pair["format"], "lines": [1, n],
                    "package": None, "version": None, "license": lic,
                    "license_source": lic_source}
            rec = KB.pair_record(h.src.name, code, pair["reference"], str(pair["name"]), prov)
            h.emit([rec], [(1, n)], [None if pair["correct"] else "marked_incorrect"])
        if not fmt_seen and rows:
            raise SourceError(f"{path}: no row has KernelBook ({', '.join(KB.KERNELBOOK)}) or AI CUDA Engineer "
                              f"({', '.join(KB.AI_CUDA_ENGINEER)}) columns")
