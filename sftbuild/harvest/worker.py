"""The per-file task run on the CPU pool: read, filter, extract. Kept free of heavy imports.

The file filters a task carries are the data stage of the harvest's configured filters
(`sftbuild.harvest.filters`); the stage applied the path stage before the file was queued.
"""
from __future__ import annotations

import dataclasses
import re

from sftbuild.harvest import filters as F
from sftbuild.harvest import license as L

CUDA_EXT = (".cu", ".cuh", ".h", ".hpp", ".hh", ".cpp", ".cc", ".cxx", ".inl", ".c")
PY_EXT = (".py",)
CODE_EXT = CUDA_EXT + PY_EXT


@dataclasses.dataclass
class ParseTask:
    """One batch of files for a CPU worker: (rel, absolute path, prelude) each, the data filters, and
    per file the macro names its own headers test (`cuda_extract.macros_tested`; a file-scope
    `#define` of one of them configures those headers and stays in the file's closures)."""
    files: list[tuple[str, str, bytes]]
    filters: list[F.FileFilter]
    tested: dict[str, list[str]] = dataclasses.field(default_factory=dict)


def parse_files(task: ParseTask) -> list[dict]:
    """One result dict per file of the task."""
    return [parse_file(rel, path, prelude, task.filters, task.tested.get(rel, ()))
            for rel, path, prelude in task.files]


def find_callers(task: tuple[list[tuple[str, str]], list[str], list[str]]) -> dict[str, list[dict]]:
    """{raw launcher: the extension functions calling it, each with its file's `path`} over the binding
    files of `task` ((rel, path) pairs, the launchers, every launching function of the tree)."""
    from sftbuild.harvest.cuda_extract import extension_callers

    files, launchers, launching = task
    out: dict[str, list[dict]] = {}
    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(launchers))) + r")\b")
    for rel, path in files:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if not pattern.search(data.decode("utf-8", "replace")):
            continue
        for name, fn in extension_callers(data, set(launchers), set(launching)).items():
            out.setdefault(name, []).append({**fn, "path": rel})
    return out


def attach_launchers(items: list[tuple[str, list[str]]]) -> list[tuple[str, list[dict]]]:
    """(code, entry points) for each (record code, launcher codes from other modules)."""
    from sftbuild.harvest.triton_extract import attach_launchers as attach

    return [attach(code, launchers) for code, launchers in items]


def parse_file(rel: str, path: str, prelude: bytes, filters: list[F.FileFilter], tested=()) -> dict:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return {"rel": rel, "skip": ("unreadable", str(e))}
    hit = F.check_data(filters, rel, data)
    if hit:
        return {"rel": rel, "skip": hit}
    out = {"rel": rel, "license": L.from_header(data), "kernels": [], "others": [], "language": None}
    if rel.endswith(PY_EXT):
        from sftbuild.harvest.triton_extract import extract_kernels, foreign_launchers, may_define_kernels

        if not may_define_kernels(data):
            try:  # no kernel of its own: it may still launch or wrap another module's (read for `foreign` only)
                out["foreign"] = foreign_launchers(data.decode("utf-8"), rel) if b"import" in data else []
            except (SyntaxError, ValueError, RecursionError, UnicodeDecodeError):
                pass
            return out

        try:
            text = data.decode("utf-8")
            kernels, others = extract_kernels(text)
            out["foreign"] = foreign_launchers(text, rel)
        except (SyntaxError, ValueError, RecursionError) as e:
            return {"rel": rel, "skip": ("syntax_error", str(e)[:200])}
        out["language"] = "triton"
    else:
        if b"__global__" not in data:
            return out
        from sftbuild.harvest.cuda_extract import extract_kernels

        kernels, others = extract_kernels(data, prelude, frozenset(tested))
        out["language"] = "cuda"
    out["kernels"] = [dataclasses.asdict(k) for k in kernels]
    out["others"] = others
    return out
