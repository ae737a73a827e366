"""shared_budget: static __shared__ arrays fit the per-block shared memory budget."""
from __future__ import annotations

import re

from sftbuild.validate.static import STATIC_CHECKS, StaticCheck
from sftbuild.validate.static._read import const_int, defines

DTYPE_BYTES = {"float": 4, "int": 4, "unsigned": 4, "uint32_t": 4, "int32_t": 4, "double": 8, "int64_t": 8,
               "long": 8, "half": 2, "__half": 2, "__nv_bfloat16": 2, "char": 1, "int8_t": 1, "uint8_t": 1,
               "float2": 8, "float4": 16, "half2": 4, "__half2": 4, "short": 2, "bool": 1, "size_t": 8}


@STATIC_CHECKS.register
class SharedBudget(StaticCheck):
    """Static __shared__ arrays must fit the per-block shared memory budget."""

    name = "shared_budget"
    version = 2  # reads the shared kernel view: string literals kept whole when comments go
    order = 40

    def check(self, src):
        code = src.cuda
        if not code:
            return
        known = defines(code)
        total = 0
        for m in re.finditer(r"__shared__\s+(?:__align__\(\d+\)\s+)?(?:volatile\s+)?(\w+)\s+\w+((?:\s*\[[^\]]+\])+)",
                             code):
            size = DTYPE_BYTES.get(m.group(1), 4)
            for dim in re.findall(r"\[([^\]]+)\]", m.group(2)):
                d = const_int(dim, known)
                if d is None:
                    size = 0
                    break
                size *= d
            total += size
        if total > src.budget["shared_memory_budget"]:
            yield self.found("bad_launch", f"static shared memory {total} bytes over the budget of "
                             f"{src.budget['shared_memory_budget']}")
