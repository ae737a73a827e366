"""triton_launch: a literal num_warps gives a block within the device limit."""
from __future__ import annotations

import ast

from sftbuild.validate.static import PYTHON, STATIC_CHECKS, StaticCheck


@STATIC_CHECKS.register
class TritonLaunch(StaticCheck):
    """Triton num_warps must give a block of at most the device limit."""

    name = "triton_launch"
    version = 1
    order = 90
    languages = PYTHON

    def check(self, src):
        for n in ast.walk(src.tree):
            if isinstance(n, ast.keyword) and n.arg == "num_warps" and isinstance(n.value, ast.Constant) \
                    and isinstance(n.value.value, int):
                w = n.value.value
                if w <= 0 or w * 32 > src.budget["max_block_size"] or w & (w - 1):
                    yield self.found("bad_launch", f"num_warps={w}: {w * 32} threads per block is not a "
                                     f"power-of-two number of warps within {src.budget['max_block_size']}")
                    return
