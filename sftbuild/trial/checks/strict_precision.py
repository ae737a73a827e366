"""strict_precision: the candidate must not switch on TF32 or reduced-precision math."""
from __future__ import annotations

from sftbuild.trial.checks import RUNTIME_CHECKS, RuntimeCheck


@RUNTIME_CHECKS.register
class StrictPrecision(RuntimeCheck):
    """A call that flips a precision flag (TF32, reduced-precision reductions, autocast) is a cheat."""

    name = "strict_precision"
    version = 1
    order = 10

    def after_call(self, call):
        if call.flags_changed:
            return self.found("cheat", f"precision flags changed by the candidate: {call.flags_changed}")
        return None
