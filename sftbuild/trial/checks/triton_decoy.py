"""triton_decoy: a Triton candidate must launch one of its own Triton kernels on every call."""
from __future__ import annotations

from sftbuild.trial.checks import RUNTIME_CHECKS, RuntimeCheck


@RUNTIME_CHECKS.register
class TritonDecoy(RuntimeCheck):
    """A call of a Triton candidate that launched none of its own Triton kernels computed the result elsewhere."""

    name = "triton_decoy"
    version = 1
    order = 20

    def after_call(self, call):
        if call.launches == 0:
            return self.found("cheat", "a Triton candidate that launched no Triton kernel (decoy)")
        return None
