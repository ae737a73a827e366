"""Harvest file filters: which files the harvest reads. One `FileFilter` per module in this folder.

A filter's `name` is the skip reason recorded for each file it rejects. `check_path` sees
a path and its size before the file is read (in the stage); `check_data` sees the bytes
after (on a CPU worker). Each returns a detail string to reject the file, None to keep it.
Every registered filter runs, in `order`, unless `harvest.file_filters` turns it off or
sets its parameters, e.g. `{oversize: {max_bytes: 10000000}, generated: false}`:

    @FILE_FILTERS.register
    class Minified(FileFilter):
        '''Files whose first line runs past 10,000 characters are minified or generated.'''
        name = "minified"
        order = 60

        def check_data(self, rel, data):
            return "first line too long" if len(data.split(b"\\n", 1)[0]) > 10_000 else None
"""
from __future__ import annotations

from sftbuild.config import ConfigError
from sftbuild.plugins import Plugin, PluginError, Registry


class FileFilter(Plugin):
    """Base of every harvest file filter."""

    def check_path(self, rel: str, size: int) -> str | None:
        return None

    def check_data(self, rel: str, data: bytes) -> str | None:
        return None


FILE_FILTERS: Registry[FileFilter] = Registry("file_filter", FileFilter, __name__,
                                              doc="which files the harvest reads (the skip reason is the name)")


def configured(selection: dict) -> list[FileFilter]:
    """The filters `harvest.file_filters` selects, in order; a bad selection is a ConfigError."""
    try:
        return FILE_FILTERS.configured(selection, "harvest.file_filters")
    except PluginError as e:
        raise ConfigError(str(e)) from None


def implementing(filters: list[FileFilter], method: str) -> list[FileFilter]:
    """The filters that implement `method` ("check_path" or "check_data"): the ones worth calling."""
    return [f for f in filters if getattr(type(f), method) is not getattr(FileFilter, method)]


def check_path(filters, rel: str, size: int) -> tuple[str, str] | None:
    """(reason, detail) of the first filter that rejects the path, or None."""
    for f in filters:
        detail = f.check_path(rel, size)
        if detail is not None:
            return f.name, detail
    return None


def check_data(filters, rel: str, data: bytes) -> tuple[str, str] | None:
    """(reason, detail) of the first filter that rejects the bytes, or None."""
    for f in filters:
        detail = f.check_data(rel, data)
        if detail is not None:
            return f.name, detail
    return None
