"""globals_intact: the candidate leaves torch, triton and the process state as it found them."""
from __future__ import annotations

from sftbuild.trial.checks import RUNTIME_CHECKS, RuntimeCheck


@RUNTIME_CHECKS.register
class GlobalsIntact(RuntimeCheck):
    """Rebinding torch's or triton's public callables (torch.softmax, Tensor.__add__, F.gelu, an aten
    packet, triton.jit), the validator's own functions, precision flags, the default dtype, the RNG
    state, or the current stream or device, at import or in a call, is a cheat: it can change what
    the reference or the checks compute. `Call.tampered` names what changed
    (sftbuild.trial.pristine)."""

    name = "globals_intact"
    version = 1
    order = 5

    def after_call(self, call):
        if call.tampered:
            shown = "; ".join(call.tampered[:6]) + (f"; and {len(call.tampered) - 6} more"
                                                     if len(call.tampered) > 6 else "")
            return self.found("cheat", f"the candidate changed its process: {shown}")
        return None
