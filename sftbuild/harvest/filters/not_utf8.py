"""Skip files that are not UTF-8 text."""
from __future__ import annotations

from sftbuild.harvest.filters import FILE_FILTERS, FileFilter


@FILE_FILTERS.register
class NotUtf8(FileFilter):
    """Files that do not decode as UTF-8; the detail is the first bad byte's offset."""
    name = "not_utf8"
    version = 1
    order = 40

    def check_data(self, rel, data):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            return f"byte {e.start}"
        return None
