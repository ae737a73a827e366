"""Skip binary files."""
from __future__ import annotations

from sftbuild.harvest.filters import FILE_FILTERS, FileFilter


@FILE_FILTERS.register
class Binary(FileFilter):
    """Files with NUL bytes in their first 64 KiB are binary, whatever their name says."""
    name = "binary"
    version = 1
    order = 30

    def check_data(self, rel, data):
        return "contains NUL bytes" if b"\0" in data[:65536] else None
