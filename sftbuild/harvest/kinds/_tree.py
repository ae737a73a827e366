"""The package tree a Triton record imports at run time, kept under the workspace by content.

Triton wrappers import their package's helpers (`from liger_kernel.ops.utils import
calculate_settings`). `keep(tree, workspace)` copies the tree's Python files (and the small
config files packages read next to them) to `<workspace>/trees/<hash>/`, where the hash is
over every copied path and its bytes, and records the folder in the tree's provenance as
`tree`. Only a worker process ever puts it on `sys.path` (see sftbuild.trial.pyrun
`record_module`); the record's own code still runs for its kernels.

Trees with more files or bytes than the limits are not kept (a monorepo is not a package).
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from sftbuild.harvest.sources import Tree, is_utf8

KEEP_EXT = (".py", ".yaml", ".yml", ".json", ".toml", ".cfg", ".txt")
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_FILES = 10_000
MAX_BYTES = 64 * 1024 * 1024


def _files(root: Path) -> list[tuple[str, Path]] | None:
    out, total = [], 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        d = Path(dirpath)
        dirnames[:] = sorted(n for n in dirnames if not n.startswith(".") and not (d / n).is_symlink()
                             and n != "__pycache__")
        for f in sorted(filenames):
            p = d / f
            if not f.endswith(KEEP_EXT) or p.is_symlink() or not p.is_file() or not is_utf8(str(p.relative_to(root))):
                continue
            size = p.stat().st_size
            if size > MAX_FILE_BYTES:
                continue
            total += size
            out.append((p.relative_to(root).as_posix(), p))
            if len(out) > MAX_FILES or total > MAX_BYTES:
                return None
    return out


def keep(tree: Tree, workspace: Path) -> Tree:
    """`tree` with provenance["tree"] set to its content-addressed copy (unchanged when too large)."""
    files = _files(tree.root)
    if not files or not any(rel.endswith(".py") for rel, _ in files):
        return tree
    h = hashlib.sha256()
    for rel, p in files:
        h.update(rel.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    dest = Path(workspace).resolve() / "trees" / h.hexdigest()[:20]
    if not (dest / ".sftbuild-done").is_file():
        shutil.rmtree(dest, ignore_errors=True)
        for rel, p in files:
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, target)
        (dest / ".sftbuild-done").write_text(f"{len(files)} files\n")
    tree.provenance = {**tree.provenance, "tree": str(dest)}
    return tree
