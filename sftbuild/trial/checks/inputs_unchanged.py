"""inputs_unchanged: the candidate leaves its inputs as it found them, except those the op updates."""
from __future__ import annotations

from sftbuild.trial.checks import RUNTIME_CHECKS, RuntimeCheck


@RUNTIME_CHECKS.register
class InputsUnchanged(RuntimeCheck):
    """Writing into an input (scratch space, or a result left where the checks read it) is a cheat,
    unless the op updates that input in place (`mutates`). NaN stays NaN is no change. A None
    in `Call.before` marks a buffer that is no input (a launcher's output array)."""

    name = "inputs_unchanged"
    version = 1
    order = 40

    def after_call(self, call):
        if call.before is None:
            return None
        for i, (now, was) in enumerate(zip(call.inputs, call.before)):
            if was is not None and i not in call.mutates and not same(now, was):
                return self.found("cheat", f"the candidate modified input {i}")
        return None


def same(now, was) -> bool:
    """Tensors: the same shape, dtype and values (NaN where NaN was); anything else counts as unchanged."""
    import torch  # here, not at the top: `sftbuild list` loads this module without torch
    if not isinstance(now, torch.Tensor):
        return True
    now = now.detach()
    if now.shape != was.shape or now.dtype != was.dtype:
        return False
    eq = now == was
    if now.is_floating_point():
        eq |= now.isnan() & was.isnan()
    return bool(eq.all())
