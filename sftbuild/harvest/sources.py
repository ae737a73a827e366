"""Sources: what a source is, how a spec string names one, and the file-tree helpers kinds share.

A source is a registry entry (registry.yaml, or a user's registry file) or a spec string
from the command line; either becomes a `Source` whose `kind` names a registered source
kind (`sftbuild.harvest.kinds`). `specs.parse_spec` asks the kinds, in their order, which one a
spec names. A kind that reads a file tree describes it as a `Tree`, which `walk` lists
without ever following a link; `safe_extract` unpacks package archives, `git_head` reads
a checkout's commit and `cache_dir` is where clones and downloads go.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import lzma
import os
import shutil
import subprocess
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Any, Iterator


REGISTRY = Path(__file__).with_name("registry.yaml")
REGISTRY_EXT = (".yaml", ".yml")
ARCHIVE_EXT = (".whl", ".zip", ".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")
MAX_ARCHIVE_BYTES = 512 * 1024 * 1024  # unpacked size of a package archive
MAX_ARCHIVE_MEMBERS = 50_000


DEFAULTS = ("", "everywhere", "gpu")  # when a registry source is in the `builtin` selection


class SourceError(Exception):
    """A source that cannot be read; the harvest reports it and goes on with the others."""


class SourceMissing(SourceError):
    """The source's server answered that what was asked for does not exist: not a network failure."""


@dataclasses.dataclass
class Source:
    name: str
    kind: str
    location: str = ""
    revision: str = ""
    license: str = ""
    include: list[str] = dataclasses.field(default_factory=list)
    exclude: list[str] = dataclasses.field(default_factory=list)
    bindings: list[dict] = dataclasses.field(default_factory=list)
    network: bool = False  # needs the network; skipped with a clear message when it is absent
    description: str = ""
    params: dict = dataclasses.field(default_factory=dict)  # the kind's parameters (`NAME?key=value&...`)
    default: str = ""  # in the `builtin` selection: "everywhere", "gpu" (machines with a GPU), "" (never)

    @classmethod
    def from_dict(cls, d: dict, where: str) -> "Source":
        if not isinstance(d, dict):
            raise SourceError(f"{where}: each source must be a mapping")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(str(k) for k in set(d) - fields)
        if unknown:
            raise SourceError(f"{where}: unknown key(s) {', '.join(unknown)} in source {d.get('name')!r}")
        for key in ("name", "kind"):
            if not isinstance(d.get(key), str) or not d[key]:
                raise SourceError(f"{where}: source is missing {key!r}")
        for key in ("location", "license", "description"):
            if not isinstance(d.get(key, ""), str):
                raise SourceError(f"{where}: source {d['name']!r}: {key} must be a string")
        if not isinstance(d.get("revision") or "", (str, int, float)):
            raise SourceError(f"{where}: source {d['name']!r}: revision must be a string")
        if not isinstance(d.get("network", False), bool):
            raise SourceError(f"{where}: source {d['name']!r}: network must be true or false")
        for key, item in (("include", str), ("exclude", str), ("bindings", dict)):
            v = d.get(key, [])
            if not isinstance(v, list) or not all(isinstance(x, item) for x in v):
                what = "strings" if item is str else "mappings"
                raise SourceError(f"{where}: source {d['name']!r}: {key} must be a list of {what}")
        if d.get("default", "") not in DEFAULTS:
            raise SourceError(f"{where}: source {d['name']!r}: default must be one of "
                              f"{', '.join(repr(x) for x in DEFAULTS)}, got {d['default']!r}")
        if not isinstance(d.get("params", {}), dict):
            raise SourceError(f"{where}: source {d['name']!r}: params must be a mapping")
        d = dict(d)
        d["revision"] = str(d.get("revision") or "")
        return cls(**d)


# ---- file trees ----------------------------------------------------------------
@dataclasses.dataclass
class Tree:
    """A source's files on disk, what every record from them carries, and which files are seen."""
    root: Path
    provenance: dict[str, Any]
    include: list[str]
    exclude: list[str]
    license: str | None = None  # the package licence when the kind knows it; None: the tree's own metadata
    # (see sftbuild.harvest.license for the order: header, LICENSE file, metadata, registry)
    torch_headers: bool = False  # its kernels compile against torch's headers (the "torch" include set)


def torch_root() -> Path:
    import torch

    return Path(torch.__file__).parent


def cache_dir(workspace: Path, cfg) -> Path:
    """Where clones and downloads go: `harvest.cache_dir`, or <workspace>/cache."""
    d = Path(cfg.cache_dir or workspace / "cache").expanduser().absolute()  # tools run from other folders
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        key = "harvest.cache_dir" if cfg.cache_dir else "the workspace cache"
        raise SourceError(f"{key} {d} cannot be created: {e.strerror or e}") from None
    return d


def git_head(root: Path) -> str | None:
    """The commit a local checkout is at, or None when it is not a git checkout."""
    head = root / ".git" / "HEAD"
    if not head.is_file():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=30, env=git_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def git_env() -> dict:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="/bin/true", GIT_LFS_SKIP_SMUDGE="1",
               GIT_CONFIG_NOSYSTEM="1")
    env.pop("GIT_DIR", None)
    return env


def safe_extract(archive: Path, dest: Path, max_bytes: int = MAX_ARCHIVE_BYTES) -> None:
    """Unpack a wheel, zip or tarball, refusing members that escape `dest`, links and bombs."""
    dest.mkdir(parents=True, exist_ok=True)
    name = archive.name
    try:
        if name.endswith((".whl", ".zip")):
            _extract_zip(archive, dest, max_bytes)
        elif name.endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")):
            _extract_tar(archive, dest, max_bytes)
        else:
            raise SourceError(f"archive {name}: unknown format")
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError, ValueError,
            NotImplementedError, RuntimeError) as e:  # corrupt, truncated, encrypted, unknown compression
        raise SourceError(f"archive {name}: cannot unpack: {getattr(e, 'strerror', None) or e}") from e


def _extract_zip(archive: Path, dest: Path, max_bytes: int) -> None:
    with zipfile.ZipFile(archive) as z:
        infos = z.infolist()
        _check_members([(i.filename, i.file_size, (i.external_attr >> 16) & 0o170000 == 0o120000)
                        for i in infos], archive.name, max_bytes)
        for i in infos:
            if not i.is_dir():
                target = dest / i.filename
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(i) as f, open(target, "wb") as g:
                    shutil.copyfileobj(f, g)


def _extract_tar(archive: Path, dest: Path, max_bytes: int) -> None:
    with tarfile.open(archive) as t:
        members = t.getmembers()
        bad = [m.name for m in members if not (m.isfile() or m.isdir())]
        if bad:
            raise SourceError(f"archive {archive.name}: refusing link or special member {bad[0]!r}")
        _check_members([(m.name, m.size, False) for m in members], archive.name, max_bytes)
        for m in members:
            if m.isfile():
                target = dest / m.name
                target.parent.mkdir(parents=True, exist_ok=True)
                with t.extractfile(m) as f, open(target, "wb") as g:
                    shutil.copyfileobj(f, g)


def unpack_cached(archive: Path, workspace: Path, cfg) -> tuple[Path, str]:
    """(unpacked root, sha256) of a local archive, unpacked once into the cache by its digest."""
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    base = cache_dir(workspace, cfg) / "archive" / digest[:16]
    if not (base / ".sftbuild-done").is_file():
        shutil.rmtree(base, ignore_errors=True)  # an unpack interrupted earlier
        try:
            safe_extract(archive, base / "tree")
        except SourceError:
            shutil.rmtree(base, ignore_errors=True)
            raise
        (base / ".sftbuild-done").write_text(archive.name + "\n")
    return base / "tree", digest


def _check_members(members, name: str, max_bytes: int) -> None:
    if len(members) > MAX_ARCHIVE_MEMBERS:
        raise SourceError(f"archive {name}: {len(members)} members is too many")
    total = 0
    for path, size, is_link in members:
        if not path:  # a damaged directory entry: it names no file, and nothing could be written for it
            raise SourceError(f"archive {name}: refusing a member with no name")
        parts = Path(path).parts
        if path.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
            raise SourceError(f"archive {name}: refusing path-traversal member {path!r}")
        if is_link:
            raise SourceError(f"archive {name}: refusing symlink member {path!r}")
        total += size
        if total > max_bytes:
            raise SourceError(f"archive {name}: unpacks to more than {max_bytes} bytes")


def walk(tree: Tree) -> Iterator[tuple[str, Path | None, str | None]]:
    """(relative path, absolute path, None) for each candidate file, or (rel, None, reason) for a
    symlink or a name that is not UTF-8 (`NOT_UTF8`, a folder's rel ending in "/"). Links are never
    followed, so nothing outside the root is ever read."""
    root = tree.root
    for top in _walk_roots(root, tree.include):
        yield from _walk_from(tree, root, top)


def _walk_roots(root: Path, include: list[str]) -> list[Path]:
    """Start walking at the literal folder prefix of the include globs, not at the root."""
    if not include:
        return [root]
    tops = set()
    for g in include:
        parts = []
        for part in Path(g).parts[:-1]:
            if any(ch in part for ch in "*?["):
                break
            parts.append(part)
        tops.add(root.joinpath(*parts))
    tops = sorted(tops)
    # a top under another top would be walked twice
    return [t for t in tops if not any(o != t and o in t.parents for o in tops)
            and t.is_dir() and _inside(root, t)]


def _inside(root: Path, p: Path) -> bool:
    real, r = Path(os.path.realpath(p)), Path(os.path.realpath(root))
    return real == r or r in real.parents


def _walk_from(tree: Tree, root: Path, top: Path):
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        d = Path(dirpath)
        for sub in list(dirnames):
            rel = (d / sub).relative_to(root).as_posix()
            if (d / sub).is_symlink():
                dirnames.remove(sub)
                yield shown_name(rel), None, _link_reason(root, d / sub)
            elif not is_utf8(rel):  # nothing under it could be stored by name
                dirnames.remove(sub)
                yield shown_name(rel) + "/", None, NOT_UTF8
        dirnames.sort()
        for f in sorted(filenames):
            p = d / f
            rel = shown_name(p.relative_to(root).as_posix())
            if tree.include and not any(fnmatch.fnmatch(rel, g) for g in tree.include):
                continue
            if any(fnmatch.fnmatch(rel, g) for g in tree.exclude):
                continue
            if p.is_symlink():
                yield rel, None, _link_reason(root, p)
            elif not is_utf8(f):
                yield rel, None, NOT_UTF8
            elif p.is_file():
                yield rel, p, None


NOT_UTF8 = "not_utf8_name"  # the skip reason of a file or folder whose name is not UTF-8 text


def is_utf8(name: str) -> bool:
    """Whether a name from the file system is UTF-8 text (Python keeps other bytes as surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_name(name: str) -> str:
    """`name` as text that can be stored and printed: bytes that are not UTF-8 written as \\xNN."""
    return name if is_utf8(name) else name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _link_reason(root: Path, p: Path) -> str:
    try:
        target = Path(os.path.realpath(p))
    except OSError:
        return "symlink"
    inside = target == root.resolve() or root.resolve() in target.parents
    return "symlink" if inside else "symlink_outside_root"



REACH_TIMEOUT = 3.0  # seconds to open a connection before a server counts as unreachable


def reachable(url: str, timeout: float = REACH_TIMEOUT) -> bool:
    """Whether a TCP connection to `url`'s host and port opens within `timeout` seconds, name lookup
    included (it runs in a thread: a resolver with no server to ask can block far longer)."""
    import socket
    import threading
    import urllib.parse

    if "://" not in url and ":" not in url:
        return True  # a local path: nothing to reach
    try:  # scp-like git@host:path is ssh
        parts = urllib.parse.urlsplit(url if "://" in url else f"ssh://{url.replace(':', '/', 1)}")
        host, port = parts.hostname, parts.port or {"http": 80, "git": 9418, "ssh": 22}.get(parts.scheme, 443)
    except ValueError:
        return False
    if not host:
        return parts.scheme == "file"
    ended, opened = threading.Event(), []

    def attempt():
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            opened.append(True)
        except (OSError, UnicodeError):
            pass
        ended.set()

    threading.Thread(target=attempt, daemon=True).start()
    ended.wait(timeout)
    return bool(opened)
