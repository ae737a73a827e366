"""The `pip` kind: one package archive from `pip download --no-deps`."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from sftbuild.harvest import license as L
from sftbuild.harvest.kinds import KINDS, SourceKind
from sftbuild.harvest.sources import Source, SourceError, Tree, cache_dir, safe_extract

PIP_TIMEOUT = 600


@KINDS.register
class Pip(SourceKind):
    """A package from the index, `pip:NAME==VERSION` (needs the network); unpacked safely into the cache.

    Unpinned packages are refused unless `harvest.allow_unpinned`. The licence defaults to the
    package's own metadata.
    """
    name = "pip"
    order = 10

    def recognise(self, spec: str, path: Path) -> Source | None:
        if not spec.startswith("pip:"):
            return None
        name, _, version = spec[4:].partition("==")
        return Source(name=spec, kind=self.name, location=name.strip(), revision=version.strip(), network=True)

    def materialize(self, src: Source, workspace: Path, cfg) -> Tree:
        name, version = src.location, src.revision
        if not version and not cfg.allow_unpinned:
            raise SourceError(f"pip:{name} is not pinned; write pip:{name}==VERSION or pass --allow-unpinned")
        req = f"{name}=={version}" if version else name
        base = cache_dir(workspace, cfg) / "pip" / re.sub(r"[^A-Za-z0-9_.=-]", "_", req)
        dl, out = base / "download", base / "tree"
        if not (base / ".sftbuild-done").is_file():
            shutil.rmtree(base, ignore_errors=True)
            dl.mkdir(parents=True)
            _download(req, dl)
            archives = sorted(dl.iterdir())
            if not archives:
                raise SourceError(f"pip download {req} produced no archive")
            safe_extract(archives[0], out)
            (base / ".sftbuild-done").write_text(archives[0].name + "\n")
        archive = (base / ".sftbuild-done").read_text().strip()
        prov = {"source_kind": self.name, "url": f"https://pypi.org/project/{name}/", "commit": None,
                "package": name, "version": version or archive, "archive": archive}
        return Tree(out, prov, src.include, src.exclude, license=L.from_package(out))


def _download(req: str, dest: Path) -> None:
    try:
        res = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                              "--disable-pip-version-check", "-d", str(dest), req],
                             capture_output=True, text=True, timeout=PIP_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise SourceError(f"pip download {req} timed out") from e
    if res.returncode != 0:
        msg = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SourceError(f"pip download {req} failed: {msg}")
