"""Skip third-party trees copied into a repository."""
from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath

from sftbuild.config import opt
from sftbuild.harvest.filters import FILE_FILTERS, FileFilter

DIRS = {"third_party", "third-party", "thirdparty", "3rdparty", "vendor", "vendored", "external", "externals",
        "extern", "deps", "cutlass", "cub", "thrust", "libcudacxx", "cccl", "submodules", "node_modules",
        "site-packages"}


@FILE_FILTERS.register
class Vendored(FileFilter):
    """Files under third_party/, cutlass/, vendor/, ... are a copy of someone else's kernels, not this source's."""
    name = "vendored"
    version = 1
    order = 10

    @dataclasses.dataclass
    class Params:
        dirs: list[str] = opt([], "folder names skipped as vendored, besides third_party/, cutlass/, ...")

    def __init__(self, params=None, **kw):
        super().__init__(params, **kw)
        self.dirs = DIRS | set(self.params.dirs)

    def check_path(self, rel, size):
        hit = next((p for p in PurePosixPath(rel).parts[:-1] if p.lower() in self.dirs), None)
        return f"under {hit}/" if hit else None
