"""Drop samples with nothing to launch."""
from __future__ import annotations

import re

from sftbuild.dedupe.filters import FILTERS, Filter


@FILTERS.register
class NoKernel(Filter):
    """Nothing to launch: CUDA without __global__, Triton without @triton.jit, KernelBench without ModelNew."""

    name = "no_kernel"
    version = 1
    order = 20
    _triton = re.compile(r"@ (?:triton \. )?jit\b")

    def filter(self, doc):
        toks = doc.tokens  # comments are already gone from tokens
        if doc.language == "cuda":
            ok = "__global__" in toks
        elif doc.language == "triton":
            ok = self._triton.search(" ".join(toks)) is not None
        elif doc.language == "kernelbench":
            ok = "ModelNew" in toks and " class ModelNew " in f" {' '.join(toks)} "
        else:
            ok = False
        return True if ok else (False, f"no {doc.language} kernel found")
