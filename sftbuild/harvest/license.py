"""Licence detection: which SPDX id applies to a harvested file, and where it was written.

`Resolver(root, package, registry).resolve(rel, header)` decides for a file `rel` of a tree,
first match wins; every kind that harvests a file tree shares it:

1. `header`      the file's own leading comment: an `SPDX-License-Identifier:` line or a licence text
2. `file:<rel>`  the nearest `LICENSE*`, `LICENCE*` or `COPYING*` file, walking up from the file's
                 folder to the tree root, never above it (third-party and NOTICE files are ignored)
3. `metadata`    the package's metadata in the tree (`package_licenses`): a wheel's
                 `*.dist-info/METADATA`, an sdist's `PKG-INFO`, a `pyproject.toml` [project].license;
                 in it `License-Expression`, then a plain `License:` name, then the licence files
                 it ships, then a `Classifier: License ::`, then a `License:` text. A tree holding
                 several packages (site-packages) gives each one its own: a dist-info claims the
                 top-level folders its RECORD lists, an sdist or pyproject its own folder.
                 A kind that knows the package licence otherwise passes it as `package`.
4. `registry`    the source's `license:` (the registry entry, or a dataset's declared licence)

No match is "unknown"; nothing else is guessed. The record's provenance carries the id as
`license` and the step that found it as `license_source`.
"""
from __future__ import annotations

import csv
import email.parser
import io
import re
import tomllib
from pathlib import Path

SPDX_LINE = re.compile(r"SPDX-License-Identifier:\s*([A-Za-z0-9.+\-() ]+?)\s*(?:\*/|-->|\"\"\"|'''|$)", re.M)
LICENSE_PREFIXES = ("LICENSE", "LICENCE", "COPYING")
LICENSE_FILES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENSE.rst", "LICENCE", "LICENCE.txt", "LICENCE.md",
                 "COPYING", "COPYING.txt", "COPYING.md")  # preferred, in this order, before other LICENSE* files
NOT_OURS = re.compile(r"third|3rd|vendor|notice|exception|dependenc|bundled", re.I)
UNKNOWN = {"", "unknown", "none", "noassertion", "other", "other/proprietary license", "proprietary", "n/a",
           "see license", "see license file", "license", "licence", "file: license", "dual license"}


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


# (spdx, phrases that must all occur), most specific first: LGPL/AGPL texts also name the GPL,
# BSD-3 also holds the BSD-2 clauses
FINGERPRINTS = [
    ("Apache-2.0", ["apache license", "version 2 0"]),
    ("MPL-2.0", ["mozilla public license", "version 2 0"]),
    ("AGPL-3.0", ["gnu affero general public license", "version 3"]),
    ("LGPL-3.0", ["gnu lesser general public license", "version 3"]),
    ("LGPL-2.1", ["gnu lesser general public license", "version 2 1"]),
    ("LGPL-2.0", ["gnu library general public license", "version 2"]),
    ("GPL-3.0", ["gnu general public license", "version 3"]),
    ("GPL-2.0", ["gnu general public license", "version 2"]),
    ("BSD-3-Clause", ["redistribution and use in source and binary forms", "neither the name"]),
    ("BSD-3-Clause", ["redistribution and use in source and binary forms", "the name of the author may not"]),
    ("BSD-2-Clause", ["redistribution and use in source and binary forms",
                      "redistributions in binary form must reproduce"]),
    ("MIT", ["permission is hereby granted free of charge",
             "the above copyright notice and this permission notice shall be included"]),
    ("ISC", ["permission to use copy modify and or distribute this software for any purpose",
             "provided that the above copyright notice and this permission notice appear in all copies"]),
    ("BSL-1.0", ["boost software license version 1 0"]),
    ("Unlicense", ["this is free and unencumbered software released into the public domain"]),
    ("Zlib", ["altered source versions must be plainly marked as such",
              "this notice may not be removed or altered from any source distribution"]),
]
_GPL_FAMILY = ("GPL-2.0", "GPL-3.0", "LGPL-2.0", "LGPL-2.1", "LGPL-3.0", "AGPL-3.0")

# SPDX ids as they are spelled, looked up by lower case; an expression of these passes as written
SPDX_IDS = {s.lower(): s for s in (
    "MIT", "MIT-0", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "BSD-3-Clause-Clear", "0BSD", "ISC", "Zlib",
    "MPL-2.0", "BSL-1.0", "Unlicense", "CC0-1.0", "CC-BY-4.0", "PSF-2.0", "Python-2.0", "UPL-1.0", "EPL-2.0",
    "NCSA", "LLVM-exception", "Apache-1.1", "X11", "WTFPL", "Artistic-2.0",
    *(f"{g}-{v}" for g in _GPL_FAMILY for v in ("only", "or-later")), *_GPL_FAMILY, "GPL-2.0+", "GPL-3.0+",
    "LGPL-2.1+", "LGPL-3.0+")}
# loose spellings in `License:` fields, keyed by `_squash`
ALIASES = {
    "mit": "MIT", "expat": "MIT", "mitx11": "MIT",
    "bsd2clause": "BSD-2-Clause", "2clausebsd": "BSD-2-Clause", "simplifiedbsd": "BSD-2-Clause",
    "freebsd": "BSD-2-Clause", "bsd2": "BSD-2-Clause",
    "bsd3clause": "BSD-3-Clause", "3clausebsd": "BSD-3-Clause", "newbsd": "BSD-3-Clause",
    "modifiedbsd": "BSD-3-Clause", "revisedbsd": "BSD-3-Clause", "bsd3": "BSD-3-Clause",
    "apache": "Apache-2.0", "apache2": "Apache-2.0", "apache20": "Apache-2.0", "apachev2": "Apache-2.0",
    "apachev20": "Apache-2.0", "asl2": "Apache-2.0", "asl20": "Apache-2.0",
    "mpl2": "MPL-2.0", "mpl20": "MPL-2.0", "mozillapublic20": "MPL-2.0",
    "gplv2": "GPL-2.0-only", "gpl2": "GPL-2.0-only", "gplv3": "GPL-3.0-only", "gpl3": "GPL-3.0-only",
    "lgplv21": "LGPL-2.1-only", "lgpl21": "LGPL-2.1-only", "lgplv3": "LGPL-3.0-only", "lgpl3": "LGPL-3.0-only",
    "isc": "ISC", "unlicense": "Unlicense", "boost": "BSL-1.0", "zlib": "Zlib", "zliblibpng": "Zlib",
    "psf": "PSF-2.0", "cc0": "CC0-1.0", "cc010": "CC0-1.0",
}
# trove classifiers (the part after the last `::`); "BSD License" names no variant, so it names nothing
CLASSIFIERS = {
    "MIT License": "MIT", "MIT No Attribution License (MIT-0)": "MIT-0", "Apache Software License": "Apache-2.0",
    "GNU General Public License v2 (GPLv2)": "GPL-2.0-only",
    "GNU General Public License v2 or later (GPLv2+)": "GPL-2.0-or-later",
    "GNU General Public License v3 (GPLv3)": "GPL-3.0-only",
    "GNU General Public License v3 or later (GPLv3+)": "GPL-3.0-or-later",
    "GNU Lesser General Public License v2 (LGPLv2)": "LGPL-2.0-only",
    "GNU Lesser General Public License v2 or later (LGPLv2+)": "LGPL-2.0-or-later",
    "GNU Lesser General Public License v3 (LGPLv3)": "LGPL-3.0-only",
    "GNU Lesser General Public License v3 or later (LGPLv3+)": "LGPL-3.0-or-later",
    "GNU Affero General Public License v3": "AGPL-3.0-only",
    "GNU Affero General Public License v3 or later (AGPLv3+)": "AGPL-3.0-or-later",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0", "ISC License (ISCL)": "ISC",
    "The Unlicense (Unlicense)": "Unlicense", "Boost Software License 1.0 (BSL-1.0)": "BSL-1.0",
    "zlib/libpng License": "Zlib", "Python Software Foundation License": "PSF-2.0",
    "Universal Permissive License (UPL)": "UPL-1.0", "Eclipse Public License 2.0 (EPL-2.0)": "EPL-2.0",
    "CC0 1.0 Universal (CC0 1.0) Public Domain Dedication": "CC0-1.0",
    "University of Illinois/NCSA Open Source License": "NCSA",
}


def from_text(text: str) -> str | None:
    """The SPDX id a text declares (an SPDX line) or reproduces (a known licence text), or None."""
    m = SPDX_LINE.search(text)
    if m:
        return m.group(1).strip()
    # the main licence comes first; later text often quotes third-party licences
    for part in (text[:2500], text):
        norm = _norm(part)
        for spdx, phrases in FINGERPRINTS:
            if all(p in norm for p in phrases):
                if spdx in _GPL_FAMILY:
                    # a notice grants "any later version"; the full text (with its preamble) says it only in
                    # the how-to-apply appendix, so it names the version alone
                    head = _norm(text[:3000])
                    later = "any later version" in head and "preamble" not in head
                    return f"{spdx}-{'or-later' if later else 'only'}"
                return spdx
    return None


def from_header(data: bytes, lines: int = 80) -> str | None:
    """The licence a source file's leading comment declares."""
    head = b"\n".join(data.split(b"\n", lines)[:lines]).decode("utf-8", "replace")
    return from_text(head)


def license_files(folder: Path) -> list[Path]:
    """The licence files directly in `folder`: the usual names first, then other LICENSE*/COPYING*;
    never a link, and never one that names third-party or vendored code."""
    try:
        names = {p.name: p for p in folder.iterdir()
                 if p.name.upper().startswith(LICENSE_PREFIXES) and p.is_file() and not p.is_symlink()}
    except OSError:
        return []
    first = [names.pop(n) for n in LICENSE_FILES if n in names]
    return first + [names[n] for n in sorted(names) if not NOT_OURS.search(n)]


def _read(p: Path, limit: int = 40000) -> str:
    try:
        with open(p, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def nearest_file(root: Path, rel: str) -> tuple[str, str] | None:
    """(spdx, path relative to root) of the licence file nearest to `rel`, walking up to the root
    (never above it); a licence file whose text names no known licence is passed over."""
    root = root.resolve()
    d = (root / rel).parent.resolve()
    if d != root and root not in d.parents:
        return None
    while True:
        for p in license_files(d):
            spdx = from_text(_read(p))
            if spdx:
                return spdx, p.relative_to(root).as_posix()
        if d == root:
            return None
        d = d.parent


def from_tree(root: Path, rel: str) -> str | None:
    """The licence of the file nearest to `rel` (see `nearest_file`)."""
    hit = nearest_file(root, rel)
    return hit[0] if hit else None


def _squash(value: str) -> str:
    v = re.sub(r"\b(the|licen[sc]e|software|version)\b", " ", value.lower())
    return re.sub(r"[^a-z0-9]+", "", v)


def normalize(value: str | None) -> str | None:
    """An SPDX id or expression for a licence as package metadata spells it, or None when it
    names none ("UNKNOWN", "BSD", "Other/Proprietary")."""
    if not value:
        return None
    v = " ".join(value.split())
    if v.lower() in UNKNOWN:
        return None
    token = r"[A-Za-z0-9.+\-]+"
    if len(v) < 120 and re.fullmatch(rf"\(?{token}\)?(\s+(AND|OR|WITH|and|or|with)\s+\(?{token}\)?)*", v):
        words = re.findall(token, v)
        ids = [w for w in words if w.upper() not in ("AND", "OR", "WITH")]
        if ids and all(w.lower() in SPDX_IDS for w in ids):
            return re.sub(token, lambda m: SPDX_IDS.get(m.group(0).lower(), m.group(0).upper()), v)
    if len(v) < 60:
        alias = ALIASES.get(_squash(v))
        if alias:
            return alias
    return from_text(v)


def classifier(value: str) -> str | None:
    """The SPDX id a `License :: ...` trove classifier names, or None (e.g. plain "BSD License")."""
    return CLASSIFIERS.get(value.rsplit("::", 1)[-1].strip())


# ---- package metadata ---------------------------------------------------------------
def _inside(root: Path, p: Path) -> bool:
    try:
        real = p.resolve()
    except OSError:
        return False
    return real == root or root in real.parents


def _from_fields(msg, folder: Path, root: Path) -> str | None:
    """A METADATA or PKG-INFO header's licence (see the module docstring for the order)."""
    expr = normalize(msg.get("License-Expression"))
    if expr:
        return expr
    lic = (msg.get("License") or "").strip()
    if lic and len(lic) < 60:
        named = normalize(lic)
        if named:
            return named
    names = msg.get_all("License-File") or []
    files = [d / n for n in names for d in (folder / "licenses", folder, folder.parent)]
    if folder.name.endswith(".dist-info"):  # a wheel's own licence files, wherever in its dist-info
        files += [p for p in sorted(folder.rglob("*")) if p.name.upper().startswith(LICENSE_PREFIXES)]
    else:  # an sdist's PKG-INFO sits beside its licence files (or one folder up, in an egg-info)
        files += license_files(folder.parent if folder.name.endswith(".egg-info") else folder)
    for p in files:
        if p.is_file() and not p.is_symlink() and _inside(root, p) and not NOT_OURS.search(p.name):
            spdx = from_text(_read(p))
            if spdx:
                return spdx
    named = {classifier(c) for c in msg.get_all("Classifier") or [] if c.startswith("License ::")} - {None}
    if len(named) == 1:
        return named.pop()
    return from_text(lic) if lic else None


def _metadata_file(meta: Path, root: Path) -> str | None:
    text = _read(meta, 400000)
    header = email.parser.HeaderParser().parsestr(text.split("\n\n", 1)[0] + "\n")
    return _from_fields(header, meta.parent, root)


def _pyproject(path: Path, root: Path) -> str | None:
    try:
        project = tomllib.loads(_read(path, 400000)).get("project") or {}
    except (tomllib.TOMLDecodeError, AttributeError):
        return None
    lic = project.get("license")
    if isinstance(lic, str):
        return normalize(lic)
    if isinstance(lic, dict):
        if isinstance(lic.get("text"), str) and normalize(lic["text"]):
            return normalize(lic["text"])
        if isinstance(lic.get("file"), str):
            p = path.parent / lic["file"]
            if p.is_file() and _inside(root, p):
                return from_text(_read(p))
    named = {classifier(c) for c in project.get("classifiers") or []
             if isinstance(c, str) and c.startswith("License ::")} - {None}
    return named.pop() if len(named) == 1 else None


def _record_tops(dist_info: Path) -> set[str]:
    """The top-level names a wheel installs, from its RECORD (else top_level.txt)."""
    tops = set()
    record = dist_info / "RECORD"
    if record.is_file():
        for row in csv.reader(io.StringIO(_read(record, 4_000_000))):
            if row and row[0] and not row[0].startswith(("/", "..")):
                tops.add(row[0].split("/", 1)[0])
    elif (dist_info / "top_level.txt").is_file():
        tops = {t.strip() for t in _read(dist_info / "top_level.txt").splitlines() if t.strip()}
    tops.discard(dist_info.name)
    return tops


def package_licenses(root: Path) -> list[tuple[str, str]]:
    """(scope, spdx) for each package whose metadata lies in the tree, the most specific scope first.
    A scope is a path prefix relative to the root ("" is the whole tree)."""
    root = root.resolve()
    found: dict[str, str] = {}
    dist_infos = sorted(root.glob("*.dist-info/METADATA"))
    for meta in dist_infos:
        spdx = _metadata_file(meta, root)
        if spdx:
            tops = _record_tops(meta.parent) if len(dist_infos) > 1 else set()
            for scope in ([f"{t}/" for t in sorted(tops)] or [""]):
                found.setdefault(scope, spdx)
    pkg_infos = [root / "PKG-INFO", *sorted(root.glob("*.egg-info/PKG-INFO")), *sorted(root.glob("*/PKG-INFO")),
                 *sorted(root.glob("*/*.egg-info/PKG-INFO"))]
    for meta in pkg_infos:
        if meta.is_file() and not meta.is_symlink():
            top = meta.relative_to(root).parts[0]
            scope = "" if top in ("PKG-INFO",) or top.endswith(".egg-info") else f"{top}/"
            spdx = _metadata_file(meta, root)
            if spdx:
                found.setdefault(scope, spdx)
    for pyproject in [root / "pyproject.toml", *sorted(root.glob("*/pyproject.toml"))]:
        if pyproject.is_file() and not pyproject.is_symlink():
            scope = "" if pyproject.parent == root else f"{pyproject.parent.name}/"
            spdx = _pyproject(pyproject, root)
            if spdx:
                found.setdefault(scope, spdx)
    return sorted(found.items(), key=lambda kv: -len(kv[0]))


def from_package(root: Path) -> str | None:
    """The licence of the package unpacked at `root` (the whole-tree one, or the only one)."""
    found = package_licenses(root)
    whole = [spdx for scope, spdx in found if scope == ""]
    if whole:
        return whole[0]
    return found[0][1] if len({spdx for _, spdx in found}) == 1 else None


def installed_license(folder: Path) -> str | None:
    """The licence of an installed package folder (site-packages/NAME) from the dist-info beside it
    whose RECORD lists it; None when there is none."""
    folder = Path(folder).resolve()
    for meta in sorted(folder.parent.glob("*.dist-info/METADATA")):
        if folder.name in _record_tops(meta.parent):
            return _metadata_file(meta, folder.parent)
    return None


class Resolver:
    """The licence of each file of one tree, in the order of the module docstring; cached per folder.

    `package`: the package licence when the kind knows it (None: read the tree's own metadata).
    `registry`: the source's declared `license:`.
    """

    def __init__(self, root: Path, package: str | None = None, registry: str | None = None):
        self.root = Path(root)
        self.packages = [("", normalize(package))] if normalize(package) else package_licenses(self.root)
        self.registry = normalize(registry)
        self._folders: dict[str, tuple[str, str] | None] = {}

    def resolve(self, rel: str, header: str | None = None) -> tuple[str, str]:
        """(spdx or "unknown", source) for the file `rel`; `header` is what `from_header` read from it."""
        if header:
            return header, "header"
        folder = rel.rpartition("/")[0]
        if folder not in self._folders:
            self._folders[folder] = nearest_file(self.root, rel)
        hit = self._folders[folder]
        if hit:
            return hit[0], f"file:{hit[1]}"
        for scope, spdx in self.packages:
            if rel.startswith(scope):
                return spdx, "metadata"
        if self.registry:
            return self.registry, "registry"
        return "unknown", "unknown"
