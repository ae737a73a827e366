"""disguise: name-based lookups that hide which function is really called.

`getattr(obj, "literal")` names its attribute in plain sight (`getattr(props, "multi_processor_count",
1)`, a generated module's `getattr(mod, "_wrapper")`): it is read like `obj.literal`, and is a
disguise only where that reaches torch (`getattr(torch, "softmax")`, `getattr(F, "gelu")`) or names
a computing method (`getattr(x, "softmax")`). Nor is a lookup whose result is only ever a value: compared
(`dtype == getattr(torch, "complex32")`) or stored in a name that nothing calls (`dtype = getattr(torch,
dtype)`). What a candidate then computes with is for the run-time checks, which see whose kernels ran.
"""
from __future__ import annotations

import ast

from sftbuild.validate.static import PYTHON, STATIC_CHECKS, StaticCheck
from sftbuild.validate.static._read import called_names, full_name

DISGUISE = {"getattr": "looks a function up by name", "eval": "evaluates code", "exec": "executes code",
            "__import__": "imports by name", "importlib.import_module": "imports by name",
            "compile": "compiles code at run time", "globals": "reaches module state by name",
            "vars": "reaches module state by name", "setattr": "sets an attribute by name"}


@STATIC_CHECKS.register
class Disguise(StaticCheck):
    """Name-based lookups that hide which function is really called."""

    name = "disguise"
    version = 1
    order = 70
    languages = PYTHON

    def check(self, src):
        parents = {id(c): p for p in ast.walk(src.tree) for c in ast.iter_child_nodes(p)}
        called = called_names(src.tree)
        for name, n in src.calls():
            if name == "getattr" and (_plain(n, src.aliases) or _value(parents.get(id(n)), called)):
                continue
            if name in DISGUISE:
                yield self.found("cheat", f"{name}() {DISGUISE[name]} (line {n.lineno}): torch called in disguise?")
                return


def _plain(call: ast.Call, aliases: dict) -> bool:
    """`getattr(obj, "name"[, default])` on anything but torch: an attribute read in plain sight."""
    if len(call.args) < 2 or not (isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str)):
        return False
    from sftbuild.validate.static.torch_does_the_work import TENSOR_COMPUTE, TORCH_COMPUTE

    obj, attr = full_name(call.args[0], aliases), call.args[1].value
    if obj == "torch" or obj.startswith("torch.") or attr in TENSOR_COMPUTE or TORCH_COMPUTE.match(f"torch.{attr}"):
        return False  # torch, or a method that computes on whatever tensor `obj` is
    return True


def _value(parent, called: set[str]) -> bool:
    """The lookup's result is compared, or stored only in names the module never calls."""
    if isinstance(parent, ast.Compare):
        return True
    return isinstance(parent, ast.Assign) and all(isinstance(t, ast.Name) and t.id not in called
                                                   for t in parent.targets)
