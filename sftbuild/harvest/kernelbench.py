"""KernelBench-format pairs: a reference module (`Model`, `get_inputs`, `get_init_inputs`)
and a solution module (`ModelNew`).

Records use language "kernelbench": the code is the whole solution module (it may
hold CUDA source for load_inline or Triton kernels, and the Python that launches
them), `entry["backend"]` says which, and the binding carries the reference:
{"kind": "kernelbench", "how": "exact", "reference": <Model source>}.

Pairs in a folder: a file holding both `Model` and `ModelNew`; or a reference
`X.py` with a solution `X_new.py`, `X_solution.py`, `X_sol.py`, or
`solutions/X.py` / `solution/X.py` next to it.
"""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Iterator

from sftbuild.record import Record

SOLUTION_SUFFIXES = ("_new", "_solution", "_sol", "_modelnew")
SOLUTION_DIRS = ("solutions", "solution", "new")


def classes(src: str) -> set[str]:
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return set()
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    return names


def is_reference(src: str) -> bool:
    return "Model" in src and {"Model", "get_inputs"} <= classes(src)


def is_solution(src: str) -> bool:
    return "ModelNew" in src and "ModelNew" in classes(src)


def backend(code: str) -> str:
    if re.search(r"@triton\.(jit|autotune|heuristics)|\bimport triton\b", code):
        return "triton"
    if "__global__" in code or "load_inline" in code or "cpp_extension" in code:
        return "cuda"
    return "unknown"


RECOGNISE_FILES = 5_000  # a folder of pairs shows one within this many Python files


def find_pairs(root: Path, limit: int | None = None, max_files: int | None = None) -> list[tuple[Path, Path]]:
    """(reference, solution) paths under root, in path order; a self-contained file is its own reference.
    `limit` stops at that many pairs and `max_files` after that many Python files, so that telling
    whether a folder holds pairs (`find_pairs(p, limit=1, max_files=RECOGNISE_FILES)`) never walks
    a whole disk."""
    out: list[tuple[Path, Path]] = []
    for n, p in enumerate(python_files(root)):
        if max_files is not None and n >= max_files:
            break
        if p.stat().st_size > 2_000_000:
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        if not is_solution(text):
            continue
        if is_reference(text):
            out.append((p, p))
        else:
            ref = _reference_for(p)
            if ref is not None:
                out.append((ref, p))
        if limit and len(out) >= limit:
            break
    return out


def python_files(root: Path) -> Iterator[Path]:
    """The regular `.py` files under root, lazily, in sorted order, folders after the files beside
    them; symlinks neither followed nor listed, unreadable folders passed over."""
    for top, dirs, files in os.walk(root, onerror=lambda e: None):
        dirs.sort()
        for f in sorted(files):
            p = Path(top) / f
            if f.endswith(".py") and not p.is_symlink() and p.is_file():
                yield p


def _reference_for(sol: Path) -> Path | None:
    stem = sol.stem
    cands = [sol.with_name(stem[: -len(s)] + ".py") for s in SOLUTION_SUFFIXES if stem.endswith(s)]
    if sol.parent.name in SOLUTION_DIRS:
        cands.append(sol.parent.parent / sol.name)
    for c in cands:
        if c.is_file() and not c.is_symlink() and is_reference(c.read_text(encoding="utf-8", errors="replace")):
            return c
    return None


def reference_source(src: str) -> str:
    """The reference program: the whole module minus any ModelNew (self-contained files hold both)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return src
    lines = src.splitlines()
    drop = [(n.lineno - len(n.decorator_list), n.end_lineno) for n in tree.body
            if isinstance(n, ast.ClassDef) and n.name == "ModelNew"]
    keep = [ln for i, ln in enumerate(lines, 1) if not any(a <= i <= b for a, b in drop)]
    return "\n".join(keep).rstrip() + "\n"


def pair_record(source: str, solution: str, reference: str, name: str, prov: dict) -> Record:
    """The record of one pair: the solution module, bound exactly to its reference program."""
    entry = {"kernels": [name], "params": [], "template": False, "launch_bounds": None, "launch_sites": [],
             "includes": [], "needs": [], "include_sets": [], "backend": backend(solution)}
    binding = {"kind": "kernelbench", "how": "exact", "reference": reference}
    return Record(language="kernelbench", code=solution, source=source, entry=entry, binding=binding,
                  provenance=prov)


# ---- dataset files -------------------------------------------------------------
KERNELBOOK = ("python_code", "triton_code")
AI_CUDA_ENGINEER = ("PyTorch_Code_Module", "CUDA_Code")


def dataset_rows(path: str) -> Iterator[dict]:
    import datasets

    kind = "parquet" if path.endswith(".parquet") else "json"
    ds = datasets.load_dataset(kind, data_files=path, split="train")
    for i, row in enumerate(ds):
        yield {"_row": i, **row}


def dataset_pair(row: dict) -> dict | None:
    """Normalise a KernelBook or AI CUDA Engineer row; None for other layouts."""
    if all(k in row for k in KERNELBOOK):
        licenses = row.get("licenses") or []
        if isinstance(licenses, str):
            licenses = [licenses]
        repo = row.get("repo_name") or ""
        return {"format": "kernelbook", "reference": row["python_code"], "solution": row["triton_code"],
                "name": row.get("entry_point") or repo or f"row{row['_row']}", "correct": True,
                "url": f"https://github.com/{repo}" if repo else None, "commit": row.get("sha"),
                "license": licenses[0] if len(licenses) == 1 else None}
    if all(k in row for k in AI_CUDA_ENGINEER):
        return {"format": "ai_cuda_engineer", "reference": row["PyTorch_Code_Module"],
                "solution": row["CUDA_Code"], "name": row.get("Op_Name") or f"row{row['_row']}",
                "correct": bool(row.get("Correct", True)), "url": None, "commit": None, "license": None}
    return None
