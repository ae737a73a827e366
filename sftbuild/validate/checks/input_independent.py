"""input_independent: a trial that cannot tell a constant from the right answer proves nothing."""
from __future__ import annotations

import torch

from sftbuild.validate.checks import RUNTIME_CHECKS, RuntimeCheck


@RUNTIME_CHECKS.register
class InputIndependent(RuntimeCheck):
    """Drop as degenerate when neither the candidate's output nor the reference's changed with new
    input values: a hard-coded answer would pass. A single-element result (the softmax of one
    value is 1) is exempt, since there the reference is constant by nature."""

    name = "input_independent"
    order = 80

    def after_trial(self, outcome):
        if outcome.matched and outcome.same_output and outcome.same_reference and \
                any(isinstance(r, torch.Tensor) and r.numel() > 1 for r in outcome.references):
            return self.found("degenerate", "the output does not depend on the input, and neither does the reference")
        return None
