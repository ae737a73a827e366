"""The `kernelbench` kind: a folder of KernelBench-format Model / ModelNew pairs, and whatever else it holds."""
from __future__ import annotations

import glob
from pathlib import Path

from sftbuild.harvest import kernelbench as KB
from sftbuild.harvest import license as L
from sftbuild.harvest.kinds import KINDS, SourceKind
from sftbuild.harvest.kinds._tree import keep
from sftbuild.harvest.sources import NOT_UTF8, Source, SourceError, Tree, git_head, is_utf8, shown_name


@KINDS.register
class KernelBench(SourceKind):
    """A folder of Model / ModelNew pairs (see sftbuild.harvest.kernelbench), each bound exactly to its
    reference; its other files (plain CUDA, Triton modules) are harvested as any folder's are."""
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
            if not is_utf8(rel) or not is_utf8(ref.relative_to(root).as_posix()):
                h.skip(shown_name(rel), NOT_UTF8, "the name of the pair's solution or reference is not UTF-8 text")
                continue
            code = sol.read_text(encoding="utf-8", errors="replace")
            reference = KB.reference_source(ref.read_text(encoding="utf-8", errors="replace"))
            lic, lic_source = licenses.resolve(rel, L.from_header(code.encode()))
            n = code.count("\n") + 1
            prov = {"source_kind": self.name, "url": root.as_uri(), "commit": None, "path": rel,
                    "reference_path": ref.relative_to(root).as_posix(), "lines": [1, n],
                    "package": None, "version": None, "license": lic, "license_source": lic_source}
            h.emit([KB.pair_record(h.src.name, code, reference, sol.stem, prov)], [(1, n)])
        # the rest of the folder: each pair's files are records already (or skipped) above
        paired = sorted({glob.escape(shown_name(p.relative_to(root).as_posix())) for pair in pairs for p in pair})
        prov = {"source_kind": self.name, "url": root.as_uri(), "commit": git_head(root)}
        h.tree(keep(Tree(root, prov, h.src.include, [*h.src.exclude, *paired]), h.ctx.workspace))
