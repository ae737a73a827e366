"""degenerate_reference: flag trials whose reference is near zero, constant or input-independent."""
from __future__ import annotations

from sftbuild.trial.checks import RUNTIME_CHECKS, RuntimeCheck


@RUNTIME_CHECKS.register
class DegenerateReference(RuntimeCheck):
    """Note (not a drop) when the reference's result is near zero or constant, or did not move with the
    inputs: a pass there says little, so the payload's flags tell reviewers."""

    name = "degenerate_reference"
    version = 1
    order = 90

    def after_trial(self, outcome):
        kind = outcome.matched and degenerate(outcome.references, outcome.same_reference)
        return self.found("degenerate", kind, note=True) if kind else None


def degenerate(refs64, independent: bool) -> str:
    """near_zero | constant | input_independent | '' for the first floating reference output that is one."""
    import torch  # here, not at the top: `sftbuild list` loads this module without torch
    for r in refs64:
        if not isinstance(r, torch.Tensor) or not r.is_floating_point() or r.numel() == 0:
            continue
        fin = r[torch.isfinite(r)]
        if fin.numel() == 0 or float(fin.abs().max()) < 1e-6:
            return "near_zero"
        if fin.numel() > 1 and float(fin.max() - fin.min()) == 0.0:
            return "constant"
    return "input_independent" if independent else ""
