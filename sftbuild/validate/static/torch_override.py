"""torch_override: registering a kernel of one's own for one of torch's operators (aten, prims)."""
from __future__ import annotations

import ast
import re

from sftbuild.validate.static import STATIC_CHECKS, StaticCheck
from sftbuild.validate.static._read import full_name

TORCH_NAMESPACES = ("aten", "prims")
CPP_OVERRIDE = re.compile(r"\bTORCH_LIBRARY_(?:IMPL|FRAGMENT)\s*\(\s*(?:aten|prims)\b")


@STATIC_CHECKS.register
class TorchOverride(StaticCheck):
    """A kernel registered for torch's own operators (TORCH_LIBRARY_IMPL(aten, ...),
    torch.library.Library("aten", "IMPL"), torch.library.impl("aten::...")) changes what torch
    computes, the reference and the checks included; an operator in a namespace of one's own is fine.
    At run time sftbuild.trial.pristine sees the Python registrations as well."""

    name = "torch_override"
    version = 2  # reads the shared kernel view: string literals kept whole when comments go
    order = 75

    def check(self, src):
        m = CPP_OVERRIDE.search(src.cuda)
        if m:
            yield self.found("cheat", f"{m.group(0)}: registers its own kernel for torch's operators")
            return
        for n in ast.walk(src.tree) if src.tree is not None else ():
            if isinstance(n, ast.Call) and full_name(n.func, src.aliases).startswith("torch.library.") \
                    and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str) \
                    and n.args[0].value.split("::")[0] in TORCH_NAMESPACES:
                yield self.found("cheat", f"{full_name(n.func, src.aliases)}({n.args[0].value!r}) (line {n.lineno}): "
                                          "registers its own kernel for torch's operators")
                return
