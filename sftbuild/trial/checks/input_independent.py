"""input_independent: a trial whose reference did not move with its inputs cannot tell a kernel from a constant.

What such a trial shows is about the inputs, not the candidate. Random finite, distinct floats
leave many references constant (isinf all False, eq all False, ne all True); a kernel that
computes them honestly returns the same constant, and so would one that ignores its inputs. So
the trial is no drop here, and no candidate is blamed for it as a cheat or a degenerate kernel:
it is marked `uninformative` (a note `loop.second_order` keeps on the trial), and the trial loop
(sftbuild.trial.loop.run) decides per adapter over all its trials:

  * the reference moved in some trial: that trial judged the candidate, which had to match the
    reference on both input sets there. A candidate that returns a constant where the reference
    varies fails that comparison (`incorrect`), and one that returns its first answer again for
    new values is a `cheat` (checks/pointer_cache); both are still caught;
  * the reference moved in no trial: the record is dropped as `uninformative`, a reason that names
    the inputs (rewards do not count it as a cheat: sftbuild.validate.reward.CHEATS).

Before that, the trial set is extended where it can be: an op whose reference returns a bool tensor
draws its inputs with zeros, +/-inf, NaN and equal positions mixed in (sftbuild.ops.special), so
isinf, eq, the logical ops and the like vary; a reference that stays constant even so (fill, a
constant program) says nothing about any kernel. Special values are not mixed into the inputs of
ops with floating results: there they change what is computed (inf - inf), and a kernel's handling
of them is a contract the reference's samples do not state.

A trial whose reference outputs hold at most one element each is exempt (the softmax of one value
is 1: constant by nature, and the op's larger trials decide).
"""
from __future__ import annotations

from sftbuild.trial.checks import RUNTIME_CHECKS, RuntimeCheck

UNINFORMATIVE = "uninformative"
WHY = "the reference's result did not change when the inputs did"


@RUNTIME_CHECKS.register
class InputIndependent(RuntimeCheck):
    """Mark (a note, not a drop) a matched trial whose reference was the same for both input sets."""

    name = "input_independent"
    version = 1
    order = 80

    def after_trial(self, outcome):
        import torch  # here, not at the top: `sftbuild list` loads this module without torch
        if outcome.matched and outcome.same_reference and \
                any(isinstance(r, torch.Tensor) and r.numel() > 1 for r in outcome.references):
            return self.found(UNINFORMATIVE, WHY, note=True)
        return None
