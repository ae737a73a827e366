"""precision_flags: TF32 or reduced-precision switches in a Python module."""
from __future__ import annotations

import ast
import re

from sftbuild.validate.static import PYTHON, STATIC_CHECKS, StaticCheck
from sftbuild.validate.static._read import full_name

PRECISION = ("allow_tf32", "set_float32_matmul_precision", "allow_fp16_reduced_precision_reduction",
             "allow_bf16_reduced_precision_reduction", "fp32_precision", "autocast")

READS = re.compile(r"^(is_|get_)")  # a query of the setting, not a switch


@STATIC_CHECKS.register
class PrecisionFlags(StaticCheck):
    """Turning on TF32 or reduced-precision reductions lowers an fp32 op's precision."""

    name = "precision_flags"
    version = 2  # reading a setting (`torch.is_autocast_enabled()`, `get_autocast_dtype`) changes nothing
    order = 80
    languages = PYTHON

    def check(self, src):
        for n in ast.walk(src.tree):
            name = full_name(n, src.aliases) if isinstance(n, ast.Attribute) else ""
            if isinstance(n, ast.Call):
                name = full_name(n.func, src.aliases)
            if any(p in name for p in PRECISION) and not READS.match(name.rsplit(".", 1)[-1]):
                yield self.found("cheat", f"{name} (line {n.lineno}): lowers the precision of the fp32 policy")
                return
