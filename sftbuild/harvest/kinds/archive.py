"""The `archive` kind: a local sdist, wheel, zip or tarball."""
from __future__ import annotations

from pathlib import Path

from sftbuild.harvest.kinds import KINDS, SourceKind
from sftbuild.harvest.kinds.wheelhouse import name_version
from sftbuild.harvest.sources import ARCHIVE_EXT, Source, SourceError, Tree, unpack_cached


@KINDS.register
class Archive(SourceKind):
    """A local sdist, wheel or zip (any path ending .whl, .zip, .tar.gz, ...), unpacked safely:
    no traversal, no links, size limits. Its licence comes from its own metadata and licence files."""
    name = "archive"
    version = 1
    order = 40

    def recognise(self, spec: str, path: Path) -> Source | None:
        if not spec.endswith(ARCHIVE_EXT):
            return None
        if not path.is_file():
            raise SourceError(f"archive {spec} does not exist")
        return Source(name=spec, kind=self.name, location=str(path.resolve()))

    def materialize(self, src: Source, workspace: Path, cfg) -> Tree:
        archive = Path(src.location)
        if not archive.is_file():
            raise SourceError(f"archive {src.location} does not exist")
        root, digest = unpack_cached(archive, workspace, cfg)
        package, version = name_version(archive.name)
        prov = {"source_kind": self.name, "url": archive.resolve().as_uri(), "commit": None,
                "package": package, "version": version, "archive": archive.name, "sha256": digest}
        return Tree(root, prov, src.include, src.exclude)
