"""Drop minified or broken text."""
from __future__ import annotations

import dataclasses
import re

from sftbuild.config import opt
from sftbuild.dedupe.filters import FILTERS, Filter


@FILTERS.register
class Malformed(Filter):
    """Minified or broken text: very long lines, undecodable bytes, control characters."""

    name = "malformed"
    version = 1
    order = 10
    _control = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f\ufffd\ud800-\udfff]")

    @dataclasses.dataclass
    class Params:
        max_line_length: int = opt(1000, "longer lines are dropped as 'malformed'", lo=1)

    def filter(self, doc):
        longest = max(map(len, doc.text.split("\n")))
        if longest > self.params.max_line_length:
            return False, f"line of {longest} characters (max {self.params.max_line_length})"
        m = self._control.search(doc.text)
        if m:
            return False, f"control, replacement or surrogate character U+{ord(m.group()):04X}"
        return True
