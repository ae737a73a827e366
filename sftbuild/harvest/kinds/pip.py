"""The `pip` kind: one package archive from `pip download --no-deps`."""
from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from sftbuild import sandbox

from sftbuild.harvest.kinds import KINDS, SourceKind
from sftbuild.harvest.kinds.wheelhouse import name_version
from sftbuild.harvest.sources import (ARCHIVE_EXT, Source, SourceError, SourceMissing, Tree, cache_dir, safe_extract,
                                      unpack_cached)

PIP_TIMEOUT = 600


@KINDS.register
class Pip(SourceKind):
    """A package from the index, `pip:NAME==VERSION` (needs the network); unpacked safely into the cache.
    `pip:PATH` names a local wheel, sdist or unpacked package instead: it is read as it is, without
    running pip (a source folder's build backend would run its code).

    Unpinned packages are refused unless `harvest.allow_unpinned`. The licence defaults to the
    package's own metadata and licence files (`sftbuild.harvest.license`).
    """
    name = "pip"
    version = 1
    order = 10

    def recognise(self, spec: str, path: Path) -> Source | None:
        if not spec.startswith("pip:"):
            return None
        if _is_path(spec[4:]):
            path = Path(spec[4:]).expanduser()
            if not path.exists():
                raise SourceError(f"{spec}: {path} does not exist")
            return Source(name=spec, kind=self.name, location=str(path.resolve()))
        name, _, version = spec[4:].partition("==")
        return Source(name=spec, kind=self.name, location=name.strip(), revision=version.strip(), network=True)

    def endpoint(self, src: Source, workspace: Path, cfg) -> str | None:
        if _is_path(src.location) or (_cached(src, workspace, cfg) / ".sftbuild-done").is_file():
            return None
        return os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"

    def materialize(self, src: Source, workspace: Path, cfg) -> Tree:
        if _is_path(src.location):
            return _local(src, workspace, cfg)
        name, version = src.location, src.revision
        if not version and not cfg.allow_unpinned:
            raise SourceError(f"pip:{name} is not pinned; write pip:{name}==VERSION or pass --allow-unpinned")
        req = f"{name}=={version}" if version else name
        base = _cached(src, workspace, cfg)
        dl, out = base / "download", base / "tree"
        if not (base / ".sftbuild-done").is_file():
            shutil.rmtree(base, ignore_errors=True)
            dl.mkdir(parents=True)
            _download(req, dl)
            archives = sorted(p for p in dl.iterdir() if p.is_file() and p.name.endswith(ARCHIVE_EXT))
            if not archives:
                raise SourceError(f"pip download {req} produced no package archive")
            safe_extract(archives[0], out)
            (base / ".sftbuild-done").write_text(archives[0].name + "\n")
        archive = (base / ".sftbuild-done").read_text().strip()
        prov = {"source_kind": self.name, "url": f"https://pypi.org/project/{name}/", "commit": None,
                "package": name, "version": version or archive, "archive": archive}
        return Tree(out, prov, src.include, src.exclude)


def _cached(src: Source, workspace: Path, cfg) -> Path:
    """Where the package's download and unpacked tree are kept."""
    req = f"{src.location}=={src.revision}" if src.revision else src.location
    return cache_dir(workspace, cfg) / "pip" / re.sub(r"[^A-Za-z0-9_.=-]", "_", req)


def _is_path(location: str) -> bool:
    """A package name never holds a slash nor ends like an archive; a path does."""
    return "/" in location or location.startswith(("~", ".")) or location.endswith(ARCHIVE_EXT)


def _local(src: Source, workspace: Path, cfg) -> Tree:
    path = Path(src.location).expanduser()
    if path.is_file() and path.name.endswith(ARCHIVE_EXT):
        root, digest = unpack_cached(path, workspace, cfg)
        package, version = name_version(path.name)
        extra = {"archive": path.name, "sha256": digest}
    elif path.is_dir():
        root, (package, version), extra = path.resolve(), (path.resolve().name, None), {}
    else:
        raise SourceError(f"pip:{src.location} is neither a package archive ({', '.join(ARCHIVE_EXT)}) nor a folder")
    prov = {"source_kind": "pip", "url": path.resolve().as_uri(), "commit": None, "package": package,
            "version": version, **extra}
    return Tree(root, prov, src.include, src.exclude)


def _download(req: str, dest: Path) -> None:
    """`pip download` in the sandbox, with the network: for an sdist, pip runs the package's build
    backend to read its metadata, which is the package's own (untrusted) code. `dest` is absolute:
    pip runs from inside it."""
    dest = dest.absolute()
    dest.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    user_conf = [p for p in (Path.home() / ".config" / "pip" / "pip.conf", Path.home() / ".pip" / "pip.conf")
                 if p.is_file()]
    if user_conf and "PIP_CONFIG_FILE" not in env:  # the sandbox's HOME is its scratch folder
        env["PIP_CONFIG_FILE"] = str(user_conf[0])
    conf = [env["PIP_CONFIG_FILE"]] if os.path.isfile(env.get("PIP_CONFIG_FILE", "")) else []
    try:
        res = sandbox.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                           "--disable-pip-version-check", "-d", str(dest), req], PIP_TIMEOUT, cwd=str(dest),
                          rw=[str(dest)], ro=[*conf, *_local_links(env.get("PIP_FIND_LINKS", ""))], env=env,
                          network=True)
    except sandbox.SandboxUnavailable as e:
        raise SourceError(f"pip download {req}: {e}") from e
    if res.timed_out:
        raise SourceError(f"pip download {req} timed out")
    if res.code != 0:
        raise _failure(req, res.output)


def _local_links(links: str) -> list[str]:
    """The local folders among PIP_FIND_LINKS, which the sandbox must show pip (read-only)."""
    out = []
    for link in links.split():
        path = link[len("file://"):] if link.startswith("file://") else link
        if "://" not in path and os.path.isdir(path):
            out.append(os.path.abspath(path))
    return out


def _failure(req: str, output: str) -> SourceError:
    """pip's own reason, in one sentence; a version the index does not have is no network failure."""
    lines = [ln.strip().removeprefix("ERROR: ") for ln in output.splitlines() if ln.strip()]
    missing = [ln for ln in lines if ln.startswith(("Could not find a version", "No matching distribution"))]
    if missing:
        return SourceMissing(f"pip download {req}: the index has no such package or version "
                             f"(pip: {_short(missing[0])})")
    return SourceError(f"pip download {req} failed: {_short((lines or ['(no message)'])[-1])}")


def _short(line: str, n: int = 300) -> str:
    return line if len(line) <= n else line[:n - 5] + " ...)"
