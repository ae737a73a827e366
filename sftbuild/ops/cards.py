"""What a command shows of an op without running it (its family, semantics, I/O, params, tolerance and
reference source), kept as plain JSON so that the review commands start without torch.

The registry's modules import torch (seconds a start, for references the reviewer only reads). The
first lookup of a name loads the registry and writes the op's card to sftbuild's host cache, in a
file keyed by the op package's sources and torch's version; later processes read it from there. An
op registered at run time (a package's reference, `pkg.*`) lives in the process that registered it:
its card comes from that op, or is None in any other process, as `ops.get` would say; it is never kept.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import inspect
import json
import os
import tempfile
from pathlib import Path

HERE = Path(__file__).parent


def cards(names) -> dict[str, dict | None]:
    """{name: card or None (no such op)} for each name; loads the registry only for names no earlier
    process described under the same sources."""
    from sftbuild import ops

    names = list(dict.fromkeys(names))
    out = {n: card(ops.OPS[n]) if n in ops.OPS else None for n in names if n.startswith("pkg.")}
    if any(n not in out and n not in _KNOWN for n in names):  # the file once, not at every lookup
        path = _path()
        _KNOWN.update(_read(path))
        made = {}
        for n in names:
            if n not in out and n not in _KNOWN:
                try:
                    made[n] = card(ops.get(n))
                except KeyError:
                    made[n] = None
        if made:
            _KNOWN.update(made)
            _write(path, {**_read(path), **made})
    return out | {n: _KNOWN[n] for n in names if n not in out}


_KNOWN: dict[str, dict | None] = {}  # the cards this process has read or made (they hold for its sources)


def card(op) -> dict:
    """An op's card: plain data only."""
    try:
        src = inspect.getsource(op.reference)
    except (OSError, TypeError):  # a torch builtin: its name is its source
        ref = op.reference
        src = f"reference = {getattr(ref, '__module__', None) or 'torch'}.{getattr(ref, '__name__', repr(ref))}\n"
    return {"name": op.name, "family": op.family, "semantics": dict(op.semantics), "io": dict(op.io),
            "params": json.loads(json.dumps(op.params, default=repr)), "launch": op.launch,
            "tolerance": dataclasses.asdict(op.tolerance), "source": src}


def tolerance(c: dict):
    """A card's tolerance as the registry's Tolerance (its floors per dtype)."""
    from sftbuild.ops.tolerance import Tolerance

    return Tolerance(**c["tolerance"])


@functools.cache
def _key() -> str:
    h = hashlib.sha256()
    for p in sorted(HERE.rglob("*")):
        if p.is_file() and p.suffix in (".py", ".yaml", ".json") and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(HERE)).encode() + b"\0" + p.read_bytes())
    try:
        h.update(importlib.metadata.version("torch").encode())
    except importlib.metadata.PackageNotFoundError:
        h.update(b"no torch")
    return h.hexdigest()[:24]


def _path() -> Path:
    from sftbuild.sandbox import host_cache

    return Path(host_cache()) / "op_cards" / f"{_key()}.json"


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict) -> None:
    """Whole files only (a reader never sees half of one); a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cards")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass
