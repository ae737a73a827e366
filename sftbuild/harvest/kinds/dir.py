"""The `dir` kind: a local folder, the kind of any folder no other kind claims."""
from __future__ import annotations

from pathlib import Path

from sftbuild.harvest import license as L
from sftbuild.harvest.kinds import KINDS, SourceKind
from sftbuild.harvest.sources import Source, SourceError, Tree, git_head


@KINDS.register
class Dir(SourceKind):
    """A local folder; the commit is recorded when it is a git checkout. An installed package folder
    (site-packages/NAME) takes its licence from the dist-info beside it; any other folder from its own
    metadata and licence files."""
    name = "dir"
    version = 1
    order = 1000  # the last resort for any folder
    url: str | None = None  # provenance URL; None: the folder's file:// URI
    default_include: list[str] = []
    torch_headers = False

    def recognise(self, spec: str, path: Path) -> Source | None:
        return Source(name=spec, kind=self.name, location=str(path.resolve())) if path.is_dir() else None

    def materialize(self, src: Source, workspace: Path, cfg) -> Tree:
        if not src.location.strip():  # Path("") is the current folder
            raise SourceError(f"source {src.name!r}: its location is empty; name the folder to harvest")
        root = Path(src.location).expanduser()
        if not root.is_dir():
            raise SourceError(f"path {src.location} does not exist or is not a folder")
        root = root.resolve()
        prov = {"source_kind": self.name, "url": self.url or root.as_uri(), "commit": git_head(root)}
        return Tree(root, prov, src.include or list(self.default_include), src.exclude,
                    license=L.installed_license(root), torch_headers=self.torch_headers)
