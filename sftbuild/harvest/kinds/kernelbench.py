"""The `kernelbench` kind: a folder of KernelBench-format Model / ModelNew pairs."""
from __future__ import annotations

from pathlib import Path

from sftbuild.harvest import kernelbench as KB
from sftbuild.harvest import license as L
from sftbuild.harvest.kinds import KINDS, SourceKind
from sftbuild.harvest.sources import Source, SourceError


@KINDS.register
class KernelBench(SourceKind):
    """A folder of Model / ModelNew pairs (see sftbuild.harvest.kernelbench), each bound exactly to its reference."""
    name = "kernelbench"
    version = 1
    order = 80

    def recognise(self, spec: str, path: Path) -> Source | None:
        if path.is_dir() and KB.find_pairs(path, limit=1, max_files=KB.RECOGNISE_FILES):
            return Source(name=spec, kind=self.name, location=str(path.resolve()))
        return None

    def harvest(self, h) -> None:
        root = Path(h.src.location)
        if not root.is_dir():
            raise SourceError(f"path {h.src.location} does not exist or is not a folder")
        root = root.resolve()
        pairs = KB.find_pairs(root)
        if not pairs:
            raise SourceError(f"{root}: no Model/ModelNew pairs found")
        licenses = L.Resolver(root, registry=h.src.license)
        for ref, sol in pairs:
            rel = sol.relative_to(root).as_posix()
            code = sol.read_text(encoding="utf-8", errors="replace")
            reference = KB.reference_source(ref.read_text(encoding="utf-8", errors="replace"))
            lic, lic_source = licenses.resolve(rel, L.from_header(code.encode()))
            n = code.count("\n") + 1
            prov = {"source_kind": self.name, "url": root.as_uri(), "commit": None, "path": rel,
                    "reference_path": ref.relative_to(root).as_posix(), "lines": [1, n],
                    "package": None, "version": None, "license": lic, "license_source": lic_source}
            h.emit([KB.pair_record(h.src.name, code, reference, sol.stem, prov)], [(1, n)])
