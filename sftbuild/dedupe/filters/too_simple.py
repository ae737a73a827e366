"""Drop samples too small to teach anything."""
from __future__ import annotations

import dataclasses
import re

from sftbuild.config import opt
from sftbuild.dedupe.filters import FILTERS, Filter
from sftbuild.parsing import kernel_view, strip_comments


@FILTERS.register
class TooSimple(Filter):
    """Too few tokens to teach anything, or kernels whose bodies are all empty."""

    name = "too_simple"
    version = 2  # CUDA bodies read from the shared kernel view
    order = 30
    _triton_def = re.compile(r"@\s*(?:triton\.)?jit[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+\w+\s*\([^)]*\)[^:\n]*:")
    _trivial = re.compile(r"(?:return\s*;?|pass|\.\.\.)?")

    @dataclasses.dataclass
    class Params:
        min_tokens: int = opt(20, "samples with fewer tokens are dropped as 'too_simple'", lo=0)

    def filter(self, doc):
        n = len(doc.tokens)
        if n < self.params.min_tokens:
            return False, f"{n} tokens (min {self.params.min_tokens})"
        if doc.language == "cuda":
            bodies = [k.body for k in kernel_view(doc.text).kernels]
        elif doc.language == "triton":
            bodies = [strip_comments(b, "triton") for b in self._triton_bodies(doc.text)]
        else:
            bodies = []
        if bodies and all(self._trivial.fullmatch(b.strip()) for b in bodies):
            return False, "every kernel body is empty"
        return True

    def _triton_bodies(self, code: str) -> list[str]:
        out = []
        for m in self._triton_def.finditer(code):
            first, _, after = code[m.end():].partition("\n")
            lines = [first]
            for line in after.splitlines():
                if line.strip() and not line[:1].isspace():
                    break  # the first unindented line ends the body
                lines.append(line)
            out.append("\n".join(lines))
        return out

