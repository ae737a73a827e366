"""Quality filters: one small plug-in per file in this folder, each with its own drop reason.

A filter subclasses `Filter`, registers itself with ``@FILTERS.register`` and has
a ``name`` (the drop reason it gives), an ``order`` (filters run by order, and
the first that drops a document names the reason), optionally a ``Params``
dataclass (its settings, set in config under ``dedupe.filters.<name>``) and one
method, ``filter(doc) -> bool | (False, detail)``: True keeps the document,
False or ``(False, detail)`` drops it. The base class does the plumbing:
``check(doc)`` returns None to keep, or ``(reason, payload)`` to drop, and
``manifest()`` gives the effective parameters that go into the stage's config hash.

    dedupe:
      filters:
        too_simple: {min_tokens: 40}
        generated: false          # turned off

Every registered filter runs with its defaults unless the config says otherwise.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from sftbuild.dedupe.near import Doc
from sftbuild.plugins import Plugin, Registry


class Filter(Plugin):
    """A quality filter: keep or drop one document, with a reason and a detail."""

    def filter(self, doc: Doc) -> bool | tuple[bool, str]:
        raise NotImplementedError

    def check(self, doc: Doc) -> tuple[str, dict] | None:
        res = self.filter(doc)
        if res is True or (isinstance(res, tuple) and res[0]):
            return None
        detail = res[1] if isinstance(res, tuple) and len(res) > 1 else ""
        return self.name, ({"filter": self.name, "detail": detail} if detail else {"filter": self.name})

    def manifest(self) -> dict[str, Any]:
        """The parameters the filter's verdicts depend on, for the run manifest and config hash."""
        return dataclasses.asdict(self.params)


FILTERS: Registry[Filter] = Registry("filter", Filter, __name__, doc="quality filters of the dedupe stage")


def configured(selection: dict | None = None) -> list[Filter]:
    """The filters a ``dedupe.filters`` mapping selects, in the order they run (None: all, defaults)."""
    return FILTERS.configured(selection, where="dedupe.filters")


def apply(filters: list[Filter], doc: Doc) -> tuple[str, dict] | None:
    """The first filter that drops the document, as (reason, payload); None keeps it."""
    for f in filters:
        res = f.check(doc)
        if res is not None:
            return res
    return None
