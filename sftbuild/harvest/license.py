"""Licence detection: SPDX header lines first, then well-known licence text fingerprints.

A file's own header wins over the nearest LICENSE/COPYING file, which wins over
what the registry declares, which wins over an unpacked package's metadata
(`from_package`). Nothing else is guessed: no match means "unknown".
"""
from __future__ import annotations

import re
from pathlib import Path

SPDX_LINE = re.compile(r"SPDX-License-Identifier:\s*([A-Za-z0-9.+\-() ]+?)\s*(?:\*/|-->|$)", re.M)
LICENSE_FILES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENSE.rst", "LICENCE", "COPYING", "COPYING.txt",
                 "LICENSE-MIT", "LICENSE-APACHE")


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


# (spdx, phrases that must all occur), most specific first
FINGERPRINTS = [
    ("Apache-2.0", ["apache license", "version 2 0"]),
    ("BSD-3-Clause", ["redistribution and use in source and binary forms",
                      "neither the name"]),
    ("BSD-2-Clause", ["redistribution and use in source and binary forms",
                      "redistributions in binary form must reproduce"]),
    ("MIT", ["permission is hereby granted free of charge",
             "the above copyright notice and this permission notice shall be included"]),
    ("GPL-3.0", ["gnu general public license", "version 3"]),
    ("GPL-2.0", ["gnu general public license", "version 2"]),
]


def from_text(text: str) -> str | None:
    """The SPDX id a text declares or reproduces, or None."""
    m = SPDX_LINE.search(text)
    if m:
        return m.group(1).strip()
    # the main licence comes first; later text often quotes third-party licences
    for part in (text[:2500], text):
        norm = _norm(part)
        for spdx, phrases in FINGERPRINTS:
            if all(p in norm for p in phrases):
                return spdx
    return None


def from_header(data: bytes, lines: int = 80) -> str | None:
    """The licence a source file's leading comment declares."""
    head = b"\n".join(data.split(b"\n", lines)[:lines]).decode("utf-8", "replace")
    return from_text(head)


def from_tree(root: Path, rel: str) -> str | None:
    """The licence file nearest to `rel`, walking up to the root (never above it)."""
    d = (root / rel).parent
    root = root.resolve()
    while True:
        for name in LICENSE_FILES:
            p = d / name
            if p.is_file() and not p.is_symlink():
                spdx = from_text(p.read_text(encoding="utf-8", errors="replace")[:20000])
                if spdx:
                    return spdx
        if d.resolve() == root or root not in d.resolve().parents:
            return None
        d = d.parent


def normalize(value: str | None) -> str | None:
    """Package metadata often spells licences loosely; map the common spellings."""
    if not value:
        return None
    v = value.strip()
    simple = {"mit": "MIT", "mit license": "MIT", "bsd-3-clause": "BSD-3-Clause", "bsd 3-clause": "BSD-3-Clause",
              "bsd-2-clause": "BSD-2-Clause", "bsd 2-clause": "BSD-2-Clause", "apache-2.0": "Apache-2.0",
              "apache 2.0": "Apache-2.0", "apache license 2.0": "Apache-2.0", "apache software license": "Apache-2.0"}
    if v.lower() in simple:
        return simple[v.lower()]
    token = r"[A-Za-z0-9.+\-]+"
    if len(v) < 60 and re.fullmatch(rf"{token}(\s+(AND|OR|WITH)\s+{token})*", v):
        return v  # already an SPDX id or expression
    return from_text(v)


def from_package(root: Path) -> str | None:
    """Licence of an unpacked package: License-Expression, then its LICENSE/COPYING files, then
    the free-text License field or classifier when it names a licence plainly. NOTICE files are
    ignored: they quote third-party licences."""
    for meta in sorted(root.glob("*.dist-info/METADATA")) + sorted(root.glob("*/PKG-INFO")):
        head = meta.read_text(encoding="utf-8", errors="replace").split("\n\n", 1)[0]
        fields: dict[str, str] = {}
        for line in head.splitlines():
            key, _, value = line.partition(":")
            if key in ("License-Expression", "License") and value.strip():
                fields.setdefault(key, value.strip())
            elif line.startswith("Classifier: License :: OSI Approved ::"):
                fields.setdefault("Classifier", line.rsplit("::", 1)[1].strip())
        if "License-Expression" in fields:
            return normalize(fields["License-Expression"])
        for lf in sorted(meta.parent.rglob("*")):
            if lf.is_file() and lf.name.upper().startswith(("LICEN", "COPYING")):
                spdx = from_text(lf.read_text(encoding="utf-8", errors="replace"))
                if spdx:
                    return spdx
        for key in ("License", "Classifier"):
            spdx = normalize(fields.get(key))
            if spdx:
                return spdx
    return None
