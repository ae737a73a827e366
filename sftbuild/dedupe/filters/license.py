"""Drop samples whose licence is unknown or not allowed."""
from __future__ import annotations

import dataclasses
import re

from sftbuild.config import opt
from sftbuild.dedupe.filters import FILTERS, Filter
from sftbuild.dedupe.near import UNKNOWN_LICENSES


@FILTERS.register
class License(Filter):
    """Licence policy: with an allow-list the licence must be on it, else any known licence passes.

    An SPDX ``OR`` needs one allowed alternative, ``AND`` needs all parts, ``WITH``
    exceptions are ignored. A missing, unknown or NOASSERTION licence is always dropped.
    """

    name = "license"
    version = 1
    order = 50

    @dataclasses.dataclass
    class Params:
        allowed: list[str] = opt([], "allowed SPDX ids, any case; empty: any known licence")

        def __post_init__(self):
            self.allowed = sorted({a.strip().lower() for a in self.allowed})

    def filter(self, doc):
        lic = (doc.license or "").strip()
        if lic.lower() in UNKNOWN_LICENSES:
            return False, f"licence {lic or 'missing'!r}"
        if not self.params.allowed or _spdx_allowed(lic, set(self.params.allowed)):
            return True
        return False, f"licence {lic!r} not in {self.params.allowed}"


def _spdx_allowed(expr: str, allowed: set[str]) -> bool:
    expr = expr.replace("(", " ").replace(")", " ")
    for alternative in re.split(r"\s+OR\s+", expr, flags=re.I):
        parts = [re.split(r"\s+WITH\s+", p.strip(), flags=re.I)[0].strip().lower()
                 for p in re.split(r"\s+AND\s+", alternative, flags=re.I)]
        if parts and all(p in allowed for p in parts if p):
            return True
    return False
