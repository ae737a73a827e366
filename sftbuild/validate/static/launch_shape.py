"""launch_shape: declared block sizes are whole warps within the device limit."""
from __future__ import annotations

import re

from sftbuild.validate.static import STATIC_CHECKS, StaticCheck
from sftbuild.validate.static._read import const_int, defines


@STATIC_CHECKS.register
class LaunchShape(StaticCheck):
    """Declared block sizes: a multiple of 32 (whole warps) and at most the device limit."""

    name = "launch_shape"
    version = 2  # reads the shared kernel view: string literals kept whole when comments go
    order = 30

    def check(self, src):
        code = src.cuda
        if not code:
            return
        known = defines(code)
        limit = src.budget["max_block_size"]
        sizes = []
        for m in re.finditer(r"<<<\s*([^,>]+?)\s*,\s*([^,>]+?)\s*(?:,[^>]*)?>>>", code):
            sizes.append(("launch", m.group(2)))
        for m in re.finditer(r"__launch_bounds__\s*\(\s*([^,)]+)", code):
            sizes.append(("__launch_bounds__", m.group(1)))
        for m in re.finditer(r"dim3\s+\w*[Bb]lock\w*\s*[({]\s*([^,)}]+)(?:,\s*([^,)}]+))?(?:,\s*([^,)}]+))?", code):
            dims = [const_int(g, known) for g in m.groups() if g]
            if dims and all(d is not None for d in dims):
                n = 1
                for d in dims:
                    n *= d
                sizes.append(("dim3 block", str(n)))
        for where, expr in sizes:
            n = const_int(expr, known)
            if n is None:
                continue
            if n > limit or n <= 0:
                yield self.found("bad_launch", f"{where} block size {n} is over the limit of {limit} threads")
            elif n % 32:
                yield self.found("bad_launch", f"{where} block size {n} is not a multiple of 32 (a partial warp)")
