"""Sources: where kernels live, and how to get their files onto disk safely.

A source is a registry entry (see registry.yaml) or a spec string given on the
command line, turned into a `Source` by `parse_spec`. File-tree kinds
(torch-aten, pytorch, dir, git, pip) are materialised to a root folder by
`materialize`; record kinds (kernelbench, dataset, inductor) are read by their
own modules.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any, Iterator

import yaml

REGISTRY = Path(__file__).with_name("registry.yaml")
KINDS = ("torch-aten", "pytorch", "torch-inductor", "git", "dir", "pip", "archive", "kernelbench", "dataset")
ARCHIVE_EXT = (".whl", ".zip", ".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")
GIT_TIMEOUT = 600
MAX_ARCHIVE_BYTES = 512 * 1024 * 1024  # unpacked size of a package archive
MAX_ARCHIVE_MEMBERS = 50_000
PYTORCH_GLOBS = ["aten/src/ATen/native/cuda/*.cu", "aten/src/ATen/native/cuda/*.cuh"]


class SourceError(Exception):
    """A source that cannot be read; the harvest reports it and goes on with the others."""


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

    @classmethod
    def from_dict(cls, d: dict, where: str) -> "Source":
        if not isinstance(d, dict):
            raise SourceError(f"{where}: each source must be a mapping")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - fields
        if unknown:
            raise SourceError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} in source {d.get('name')!r}")
        for key in ("name", "kind"):
            if not isinstance(d.get(key), str):
                raise SourceError(f"{where}: source is missing {key!r}")
        if d["kind"] not in KINDS:
            raise SourceError(f"{where}: source {d['name']!r}: unknown kind {d['kind']!r} (known: {', '.join(KINDS)})")
        for key in ("include", "exclude", "bindings"):
            if not isinstance(d.get(key, []), list):
                raise SourceError(f"{where}: source {d['name']!r}: {key} must be a list")
        d = dict(d)
        d["revision"] = str(d.get("revision") or "")
        return cls(**d)


def load_registry(path: str | os.PathLike = REGISTRY) -> dict[str, Source]:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise SourceError(f"registry {p} does not exist") from e
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise SourceError(f"registry {p} is not valid YAML: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("sources"), list):
        raise SourceError(f"registry {p}: expected a top-level 'sources:' list")
    out = {}
    for i, d in enumerate(data["sources"]):
        s = Source.from_dict(d, f"{p}: sources[{i}]")
        out[s.name] = s
    return out


# ---- spec strings ------------------------------------------------------------
GIT_URL = re.compile(r"^(git\+)?(https?|ssh|file|git)://")


def split_rev(url: str) -> tuple[str, str]:
    """`https://host/x.git@REV` -> (url, REV); the @ of `user@host` is not a revision."""
    head, sep, rev = url.rpartition("@")
    if sep and rev and "/" not in rev and ":" not in rev and "://" in head:
        return head, rev
    return url, ""


def parse_spec(spec: str, registry: dict[str, Source]) -> list[Source]:
    """A command-line source: registry name, registry file, URL, pip:, dataset file or folder."""
    if spec in registry:
        return [registry[spec]]
    if spec.startswith("pip:"):
        req = spec[4:]
        name, _, version = req.partition("==")
        return [Source(name=spec, kind="pip", location=name.strip(), revision=version.strip(), network=True)]
    if spec.startswith("inductor:"):
        return [Source(name=spec, kind="torch-inductor", location=spec[len("inductor:"):])]
    if GIT_URL.match(spec):
        url, rev = split_rev(spec[4:] if spec.startswith("git+") else spec)
        return [Source(name=spec, kind="git", location=url, revision=rev, network=not url.startswith("file://"))]
    p = Path(spec).expanduser()
    if spec.endswith(ARCHIVE_EXT):
        if not p.is_file():
            raise SourceError(f"archive {spec} does not exist")
        return [Source(name=spec, kind="archive", location=str(p.resolve()))]
    if spec.endswith((".yaml", ".yml")):
        if not p.is_file():
            raise SourceError(f"registry file {spec} does not exist")
        return list(load_registry(p).values())
    if spec.endswith((".jsonl", ".json", ".parquet")):
        if not p.is_file():
            raise SourceError(f"dataset file {spec} does not exist")
        return [Source(name=spec, kind="dataset", location=str(p.resolve()))]
    if p.is_symlink() and not p.exists():
        raise SourceError(f"path {spec} is a broken symlink")
    if not p.exists():
        if "/" in spec or spec.startswith("."):
            raise SourceError(f"path {spec} does not exist")
        raise SourceError(f"unknown source {spec!r}: not a registry name ({', '.join(sorted(registry))}), "
                          f"path, URL, pip:NAME==VERSION or dataset file")
    if p.is_file() and p.suffix == ".py":
        return [Source(name=spec, kind="torch-inductor", location=str(p.resolve()))]
    if not p.is_dir():
        raise SourceError(f"path {spec} is neither a folder, a .py module nor a dataset file")
    return [Source(name=spec, kind=detect_dir_kind(p), location=str(p.resolve()))]


def detect_dir_kind(p: Path) -> str:
    if (p / "aten" / "src" / "ATen").is_dir():
        return "pytorch"
    from sftbuild.harvest import kernelbench

    if kernelbench.find_pairs(p, limit=1):
        return "kernelbench"
    return "dir"


# ---- file trees ----------------------------------------------------------------
@dataclasses.dataclass
class Tree:
    root: Path
    provenance: dict[str, Any]
    include: list[str]
    exclude: list[str]


def torch_root() -> Path:
    import torch

    return Path(torch.__file__).parent


def torch_provenance() -> dict[str, Any]:
    import torch

    return {
        "source_kind": "torch-aten",
        "url": "https://github.com/pytorch/pytorch",
        "commit": getattr(torch.version, "git_version", None),
        "package": "torch",
        "version": torch.__version__,
    }


def cache_dir(workspace: Path, cfg) -> Path:
    d = Path(getattr(cfg, "cache_dir", "") or workspace / "cache")
    d.mkdir(parents=True, exist_ok=True)
    return d


def materialize(src: Source, workspace: Path, cfg) -> Tree:
    """Put a file-tree source on disk (cloning or downloading as needed) and describe it."""
    if src.kind == "torch-aten":
        root = torch_root() / "include"
        if not root.is_dir():
            raise SourceError(f"the installed torch has no include folder at {root}")
        return Tree(root, torch_provenance(), src.include or ["ATen/native/cuda/*.cuh"], src.exclude)
    if src.kind in ("dir", "pytorch"):
        root = Path(src.location).expanduser()
        if not root.is_dir():
            raise SourceError(f"path {src.location} does not exist or is not a folder")
        prov = {"source_kind": src.kind, "url": root.resolve().as_uri(), "commit": _git_head(root)}
        if src.kind == "pytorch":
            prov["url"] = "https://github.com/pytorch/pytorch"
        include = src.include or (PYTORCH_GLOBS if src.kind == "pytorch" else [])
        return Tree(root.resolve(), prov, include, src.exclude)
    if src.kind == "git":
        return _git_tree(src, workspace, cfg)
    if src.kind == "pip":
        return _pip_tree(src, workspace, cfg)
    if src.kind == "archive":
        return _archive_tree(src, workspace, cfg)
    raise SourceError(f"source {src.name!r}: kind {src.kind!r} is not a file tree")


def _git_head(root: Path) -> str | None:
    head = root / ".git" / "HEAD"
    if not head.is_file():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=30, env=_git_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _git_env() -> dict:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="/bin/true", GIT_LFS_SKIP_SMUDGE="1",
               GIT_CONFIG_NOSYSTEM="1")
    env.pop("GIT_DIR", None)
    return env


# never run hooks, filters or submodules from a repository we do not trust
GIT_SAFE = ["-c", "core.hooksPath=/dev/null", "-c", "submodule.recurse=false", "-c", "protocol.file.allow=always",
            "-c", "filter.lfs.smudge=", "-c", "filter.lfs.process=", "-c", "filter.lfs.required=false",
            "-c", "core.fsmonitor=false", "-c", "core.symlinks=true"]


def _git(args: list[str], cwd: Path | None = None, timeout: int = GIT_TIMEOUT) -> str:
    try:
        out = subprocess.run(["git", *GIT_SAFE, *args], cwd=cwd, capture_output=True, text=True,
                             timeout=timeout, env=_git_env(), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise SourceError(f"git {args[0]} timed out after {timeout} s") from e
    except OSError as e:
        raise SourceError(f"cannot run git: {e}") from e
    if out.returncode != 0:
        msg = (out.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SourceError(f"git {args[0]} failed: {msg}")
    return out.stdout.strip()


def _git_tree(src: Source, workspace: Path, cfg) -> Tree:
    url, rev = src.location, src.revision
    if not rev and not getattr(cfg, "allow_unpinned", False):
        raise SourceError(f"{url} is not pinned to a revision; write URL@REV or pass --allow-unpinned")
    key = hashlib.sha256(f"{url}@{rev}".encode()).hexdigest()[:16]
    dest = cache_dir(workspace, cfg) / "git" / key
    done = dest / ".sftbuild-done"
    if not done.is_file():
        if dest.exists():
            shutil.rmtree(dest)  # a clone interrupted earlier
        dest.parent.mkdir(parents=True, exist_ok=True)
        _git(["clone", "--no-checkout", "--quiet", "--no-recurse-submodules", url, str(dest)])
        if rev:
            _git(["-C", str(dest), "checkout", "--quiet", "--detach", rev])
        else:
            _git(["-C", str(dest), "checkout", "--quiet"])
        done.write_text(url + "\n")
    commit = _git(["-C", str(dest), "rev-parse", "HEAD"])
    if rev and re.fullmatch(r"[0-9a-f]{7,40}", rev) and not commit.startswith(rev):
        raise SourceError(f"{url}: checked out {commit}, expected {rev}")
    prov = {"source_kind": "git", "url": url, "commit": commit, "revision": rev or None}
    return Tree(dest, prov, src.include, src.exclude + [".git/*", ".sftbuild-done"])


def _pip_tree(src: Source, workspace: Path, cfg) -> Tree:
    name, version = src.location, src.revision
    if not version and not getattr(cfg, "allow_unpinned", False):
        raise SourceError(f"pip:{name} is not pinned; write pip:{name}==VERSION or pass --allow-unpinned")
    req = f"{name}=={version}" if version else name
    base = cache_dir(workspace, cfg) / "pip" / re.sub(r"[^A-Za-z0-9_.=-]", "_", req)
    dl, out = base / "download", base / "tree"
    if not (base / ".sftbuild-done").is_file():
        shutil.rmtree(base, ignore_errors=True)
        dl.mkdir(parents=True)
        try:
            res = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                                  "--disable-pip-version-check", "-d", str(dl), req],
                                 capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise SourceError(f"pip download {req} timed out") from e
        if res.returncode != 0:
            msg = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise SourceError(f"pip download {req} failed: {msg}")
        archives = sorted(dl.iterdir())
        if not archives:
            raise SourceError(f"pip download {req} produced no archive")
        safe_extract(archives[0], out)
        (base / ".sftbuild-done").write_text(archives[0].name + "\n")
    archive = (base / ".sftbuild-done").read_text().strip()
    prov = {"source_kind": "pip", "url": f"https://pypi.org/project/{name}/", "commit": None,
            "package": name, "version": version or archive, "archive": archive}
    return Tree(out, prov, src.include, src.exclude)


def _archive_tree(src: Source, workspace: Path, cfg) -> Tree:
    """A local package archive (sdist, wheel, zip), unpacked safely into the cache."""
    archive = Path(src.location)
    if not archive.is_file():
        raise SourceError(f"archive {src.location} does not exist")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    base = cache_dir(workspace, cfg) / "archive" / digest[:16]
    if not (base / ".sftbuild-done").is_file():
        shutil.rmtree(base, ignore_errors=True)
        safe_extract(archive, base / "tree")
        (base / ".sftbuild-done").write_text(archive.name + "\n")
    prov = {"source_kind": "archive", "url": archive.resolve().as_uri(), "commit": None,
            "archive": archive.name, "sha256": digest}
    return Tree(base / "tree", prov, src.include, src.exclude)


def safe_extract(archive: Path, dest: Path, max_bytes: int = MAX_ARCHIVE_BYTES) -> None:
    """Unpack a wheel, zip or tarball, refusing members that escape `dest`, links and bombs."""
    dest.mkdir(parents=True, exist_ok=True)
    name = archive.name
    if name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as z:
            infos = z.infolist()
            _check_members([(i.filename, i.file_size, (i.external_attr >> 16) & 0o170000 == 0o120000)
                            for i in infos], name, max_bytes)
            for i in infos:
                if not i.is_dir():
                    target = dest / i.filename
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with z.open(i) as f, open(target, "wb") as g:
                        shutil.copyfileobj(f, g)
    elif name.endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")):
        with tarfile.open(archive) as t:
            members = t.getmembers()
            bad = [m.name for m in members if not (m.isfile() or m.isdir())]
            if bad:
                raise SourceError(f"archive {name}: refusing link or special member {bad[0]!r}")
            _check_members([(m.name, m.size, False) for m in members], name, max_bytes)
            for m in members:
                if m.isfile():
                    target = dest / m.name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with t.extractfile(m) as f, open(target, "wb") as g:
                        shutil.copyfileobj(f, g)
    else:
        raise SourceError(f"archive {name}: unknown format")


def _check_members(members, name: str, max_bytes: int) -> None:
    if len(members) > MAX_ARCHIVE_MEMBERS:
        raise SourceError(f"archive {name}: {len(members)} members is too many")
    total = 0
    for path, size, is_link in members:
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
    symlink. Links are never followed, so nothing outside the root is ever read."""
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
            if (d / sub).is_symlink():
                dirnames.remove(sub)
                rel = (d / sub).relative_to(root).as_posix()
                yield rel, None, _link_reason(root, d / sub)
        dirnames.sort()
        for f in sorted(filenames):
            p = d / f
            rel = p.relative_to(root).as_posix()
            if tree.include and not any(fnmatch.fnmatch(rel, g) for g in tree.include):
                continue
            if any(fnmatch.fnmatch(rel, g) for g in tree.exclude):
                continue
            if p.is_symlink():
                yield rel, None, _link_reason(root, p)
            elif p.is_file():
                yield rel, p, None


def _link_reason(root: Path, p: Path) -> str:
    try:
        target = Path(os.path.realpath(p))
    except OSError:
        return "symlink"
    inside = target == root.resolve() or root.resolve() in target.parents
    return "symlink" if inside else "symlink_outside_root"


def package_license(dist: str) -> str | None:
    try:
        meta = importlib.metadata.metadata(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    return meta.get("License-Expression") or meta.get("License") or None
