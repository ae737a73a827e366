"""The `wheelhouse` kind: a folder of package archives, e.g. from `pip download -d DIR pkg ...`."""
from __future__ import annotations

import re
from pathlib import Path

from sftbuild.harvest.kinds import KINDS, SourceKind
from sftbuild.harvest.kinds._tree import keep
from sftbuild.harvest.sources import ARCHIVE_EXT, Source, SourceError, Tree, unpack_cached


def archives(folder: Path) -> list[Path]:
    """The package archives directly in `folder`; empty unless every visible entry is one."""
    entries = [p for p in sorted(folder.iterdir()) if not p.name.startswith(".")]
    ok = entries and all(p.is_file() and not p.is_symlink() and p.name.endswith(ARCHIVE_EXT) for p in entries)
    return entries if ok else []


def name_version(archive: str) -> tuple[str, str | None]:
    """`pkg-1.0-py3-none-any.whl` and `pkg-1.0.tar.gz` -> ("pkg", "1.0"); no version when none is written."""
    stem = re.sub(r"(\.tar\.gz|\.tgz|\.tar\.bz2|\.tar\.xz|\.tar|\.zip|\.whl)$", "", archive)
    if archive.endswith(".whl"):
        name, _, rest = stem.partition("-")
        return name, rest.split("-")[0] or None
    name, sep, version = stem.rpartition("-")
    return (name, version) if sep and name else (stem, None)


@KINDS.register
class Wheelhouse(SourceKind):
    """A folder holding only package archives (wheels, sdists, zips): each is unpacked safely and
    harvested with its own package, version and licence (read from each
    archive's own metadata and licence files, `sftbuild.harvest.license`).

    A folder is a wheelhouse when every visible entry in it is an archive file. An archive
    that cannot be unpacked is skipped as `bad_archive`; the others continue.
    """
    name = "wheelhouse"
    version = 1
    order = 60

    def recognise(self, spec: str, path: Path) -> Source | None:
        if path.is_dir() and archives(path):
            return Source(name=spec, kind=self.name, location=str(path.resolve()))
        return None

    def harvest(self, h) -> None:
        folder = Path(h.src.location)
        if not folder.is_dir():
            raise SourceError(f"path {h.src.location} does not exist or is not a folder")
        found = archives(folder)
        if not found:
            raise SourceError(f"{folder}: not a folder of package archives ({', '.join(ARCHIVE_EXT)})")
        for archive in found:
            try:
                root, digest = unpack_cached(archive, h.ctx.workspace, h.cfg)
            except (SourceError, OSError) as e:
                h.skip(archive.name, "bad_archive", str(e)[:300])
                continue
            package, version = name_version(archive.name)
            prov = {"source_kind": self.name, "url": archive.resolve().as_uri(), "commit": None,
                    "package": package, "version": version, "archive": archive.name, "sha256": digest}
            h.tree(keep(Tree(root, prov, h.src.include, h.src.exclude), h.ctx.workspace))
