"""pointer_cache: a result that stayed the same when new values came into the same buffers was cached."""
from __future__ import annotations

from sftbuild.trial.checks import RUNTIME_CHECKS, RuntimeCheck


@RUNTIME_CHECKS.register
class PointerCache(RuntimeCheck):
    """A cheat when the second order (new values written into the same buffers) returned bit for bit
    the first order's result and that result no longer matches the reference: the candidate keyed
    its answer on where the inputs live, not on what they hold."""

    name = "pointer_cache"
    version = 1
    order = 75

    def after_trial(self, outcome):
        if not outcome.matched and outcome.same_output:
            return self.found("cheat", "the same result for new values in the same buffers (cached by pointer)")
        return None
