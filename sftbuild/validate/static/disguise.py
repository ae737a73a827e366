"""disguise: name-based lookups that hide which function is really called."""
from __future__ import annotations

from sftbuild.validate.static import PYTHON, STATIC_CHECKS, StaticCheck

DISGUISE = {"getattr": "looks a function up by name", "eval": "evaluates code", "exec": "executes code",
            "__import__": "imports by name", "importlib.import_module": "imports by name",
            "compile": "compiles code at run time", "globals": "reaches module state by name",
            "vars": "reaches module state by name", "setattr": "sets an attribute by name"}


@STATIC_CHECKS.register
class Disguise(StaticCheck):
    """Name-based lookups that hide which function is really called."""

    name = "disguise"
    order = 70
    languages = PYTHON

    def check(self, src):
        for name, n in src.calls():
            if name in DISGUISE:
                yield self.found("cheat", f"{name}() {DISGUISE[name]} (line {n.lineno}): torch called in disguise?")
                return
