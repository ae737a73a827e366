"""Skip files too large to be hand-written kernel sources."""
from __future__ import annotations

import dataclasses

from sftbuild.config import opt
from sftbuild.harvest.filters import FILE_FILTERS, FileFilter


@FILE_FILTERS.register
class Oversize(FileFilter):
    """Files larger than `max_bytes` are skipped before they are read."""
    name = "oversize"
    version = 1
    order = 20

    @dataclasses.dataclass
    class Params:
        max_bytes: int = opt(2_000_000, "larger files are skipped as 'oversize'", lo=1)

    def check_path(self, rel, size):
        return f"{size} bytes > {self.params.max_bytes}" if size > self.params.max_bytes else None
