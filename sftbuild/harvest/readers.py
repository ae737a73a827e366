"""Record-producing readers: KernelBench-format folders and dataset files.

See kernelbench.py for the pair conventions and the record layout.
"""
from __future__ import annotations

from pathlib import Path

from sftbuild.harvest import kernelbench as KB
from sftbuild.harvest import license as L
from sftbuild.harvest.sources import SourceError
from sftbuild.record import Record


def _record(h, solution: str, reference: str, name: str, prov: dict, extra: dict | None = None) -> Record:
    entry = {"kernels": [name], "params": [], "template": False, "launch_bounds": None, "launch_sites": [],
             "includes": [], "needs": [], "include_sets": [], "backend": KB.backend(solution), **(extra or {})}
    binding = {"kind": "kernelbench", "how": "exact", "reference": reference}
    return Record(language="kernelbench", code=solution, source=h.src.name, entry=entry, binding=binding,
                  provenance=prov)


def kernelbench_dir(h) -> None:
    root = Path(h.src.location)
    if not root.is_dir():
        raise SourceError(f"path {h.src.location} does not exist or is not a folder")
    root = root.resolve()
    pairs = KB.find_pairs(root)
    if not pairs:
        raise SourceError(f"{root}: no Model/ModelNew pairs found")
    for ref, sol in pairs:
        rel = sol.relative_to(root).as_posix()
        code = sol.read_text(encoding="utf-8", errors="replace")
        reference = KB.reference_source(ref.read_text(encoding="utf-8", errors="replace"))
        lic = (L.from_header(code.encode()) or L.from_tree(root, rel) or L.normalize(h.src.license) or "unknown")
        prov = {"source_kind": "kernelbench", "url": root.as_uri(), "commit": None, "path": rel,
                "reference_path": ref.relative_to(root).as_posix(), "lines": [1, code.count("\n") + 1],
                "package": None, "version": None, "license": lic}
        rec = _record(h, code, reference, sol.stem, prov)
        h.emit([rec], [(1, code.count("\n") + 1)])


def dataset(h) -> None:
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
        lic = L.normalize(pair["license"]) or L.normalize(h.src.license) or "unknown"
        prov = {"source_kind": "dataset", "url": pair["url"], "commit": pair["commit"], "path": path,
                "row": row["_row"], "format": pair["format"], "lines": [1, code.count("\n") + 1],
                "package": None, "version": None, "license": lic}
        rec = _record(h, code, pair["reference"], str(pair["name"]), prov)
        h.emit([rec], [(1, code.count("\n") + 1)], [None if pair["correct"] else "marked_incorrect"])
    if not fmt_seen and rows:
        raise SourceError(f"{path}: no row has KernelBook ({', '.join(KB.KERNELBOOK)}) or AI CUDA Engineer "
                          f"({', '.join(KB.AI_CUDA_ENGINEER)}) columns")
