"""Benchmark fingerprints: n-gram shingle sets of every benchmark item, storable once.

    from sftbuild.dedupe import fingerprints
    fingerprints.save("KernelBench/", "kernelbench.fp.npz")   # once, online or not
    # then in sftbuild.yaml:  dedupe: {benchmarks: [kernelbench.fp.npz]}

A benchmark is a directory (every ``.py``/``.cu`` file below it is an item, as in
KernelBench and TritonBench), a single source file, or a dataset file
(jsonl/json/parquet/csv, read with ``datasets``) whose code columns (``code``,
``python_code``, ``PyTorch_Code_Module``, ...) each give an item. The saved
file is a compressed ``.npz`` holding only item names and 64-bit shingle
hashes, never the benchmark text.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from sftbuild.dedupe.params import HASH_VERSION
from sftbuild.dedupe.signature import shingle_set

MAGIC = "sftbuild-dedupe-fingerprints"
DEFAULT_NGRAM = 10
SOURCE_SUFFIXES = {".py": "kernelbench", ".cu": "cuda", ".cuh": "cuda"}
DATASET_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
CODE_COLUMNS = ("code", "python_code", "PyTorch_Code_Module", "PyTorch_Code_Functional", "pytorch_code",
                "reference", "reference_code", "CUDA_Code", "cuda_code", "triton_code", "solution", "output",
                "content", "source")
NAME_COLUMNS = ("name", "problem_name", "task_id", "problem_id", "id", "file", "filename", "level_id")


@dataclasses.dataclass
class Fingerprints:
    names: list[str]
    values: np.ndarray  # uint64, each item's sorted unique shingle hashes, concatenated
    offsets: np.ndarray  # (len(names) + 1,) int64
    ngram: int
    source: str = ""

    def item(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i]:self.offsets[i + 1]]

    def digest(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps([self.names, self.ngram, HASH_VERSION]).encode())
        h.update(self.values.tobytes())
        return h.hexdigest()[:16]


def read_items(path: str | os.PathLike) -> list[tuple[str, str, str]]:
    """(name, text, language) of every item of a benchmark directory or file."""
    p = Path(path)
    if p.is_dir():
        items = []
        for f in sorted(p.rglob("*")):
            if f.is_file() and f.suffix in SOURCE_SUFFIXES:
                text = f.read_text(encoding="utf-8", errors="replace")
                if text.strip():
                    items.append((f.relative_to(p).as_posix(), text, SOURCE_SUFFIXES[f.suffix]))
        return items
    if p.suffix in SOURCE_SUFFIXES:
        return [(p.name, p.read_text(encoding="utf-8", errors="replace"), SOURCE_SUFFIXES[p.suffix])]
    if p.suffix in DATASET_SUFFIXES:
        return _dataset_items(p)
    raise ValueError(f"benchmark {p}: expected a directory, a .py/.cu file, a dataset file "
                     f"({', '.join(DATASET_SUFFIXES)}) or a fingerprint .npz")


def _dataset_items(p: Path) -> list[tuple[str, str, str]]:
    import datasets

    ds = datasets.load_dataset(DATASET_SUFFIXES[p.suffix], data_files=str(p), split="train")
    code_cols = [c for c in CODE_COLUMNS if c in ds.column_names]
    if not code_cols:
        raise ValueError(f"benchmark {p}: no code column (looked for {', '.join(CODE_COLUMNS)}); "
                         f"columns are {', '.join(ds.column_names)}")
    name_col = next((c for c in NAME_COLUMNS if c in ds.column_names), None)
    items = []
    for i, row in enumerate(ds):
        base = f"{p.name}:{row[name_col]}" if name_col else f"{p.name}#{i}"
        for col in code_cols:
            if isinstance(row[col], str) and row[col].strip():
                name = base if len(code_cols) == 1 else f"{base}[{col}]"
                items.append((name, row[col], "kernelbench"))
    return items


def build(path: str | os.PathLike, ngram: int = DEFAULT_NGRAM) -> Fingerprints:
    return from_items(read_items(path), ngram, str(path))


def from_items(items: list[tuple[str, str, str]], ngram: int = DEFAULT_NGRAM, source: str = "") -> Fingerprints:
    """Fingerprints of (name, text, language) items held in memory (e.g. a benchmark's programs in the store)."""
    names, sets = [], []
    for name, text, language in items:
        names.append(name)
        sets.append(shingle_set(text, language, ngram))
    offsets = np.zeros(len(sets) + 1, np.int64)
    np.cumsum([len(s) for s in sets], out=offsets[1:])
    values = np.concatenate(sets) if sets else np.zeros(0, np.uint64)
    return Fingerprints(names, values, offsets, ngram, source)


def save(path_in: str | os.PathLike, path_out: str | os.PathLike, ngram: int = DEFAULT_NGRAM) -> Fingerprints:
    """Fingerprint a benchmark and write them to `path_out` (a compressed .npz)."""
    fp = build(path_in, ngram)
    meta = {"magic": MAGIC, "ngram": ngram, "hash_version": HASH_VERSION, "source": str(path_in),
            "names": fp.names}
    with open(path_out, "wb") as f:  # a file object, so numpy does not append ".npz" to the name
        np.savez_compressed(f, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
                            values=fp.values, offsets=fp.offsets)
    return fp


def is_fingerprint_file(path: str | os.PathLike) -> bool:
    p = Path(path)
    if not p.is_file():
        return False
    with open(p, "rb") as f:
        return f.read(2) == b"PK" and p.suffix not in DATASET_SUFFIXES


def load(path: str | os.PathLike, ngram: int = DEFAULT_NGRAM) -> Fingerprints:
    """A saved fingerprint file, or a benchmark fingerprinted now."""
    if not is_fingerprint_file(path):
        return build(path, ngram)
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(z["meta"].tobytes().decode())
        values, offsets = z["values"], z["offsets"]
    if meta.get("magic") != MAGIC:
        raise ValueError(f"{path} is not an sftbuild fingerprint file")
    if meta["hash_version"] != HASH_VERSION or meta["ngram"] != ngram:
        raise ValueError(f"{path} was made with ngram={meta['ngram']}, hash version {meta['hash_version']}; "
                         f"this run needs ngram={ngram}, hash version {HASH_VERSION}: save it again")
    return Fingerprints(meta["names"], values, offsets, meta["ngram"], meta.get("source", str(path)))
