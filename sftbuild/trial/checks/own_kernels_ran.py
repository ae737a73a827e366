"""own_kernels_ran: one of the kernels the candidate defines is among those it launched."""
from __future__ import annotations

from sftbuild.trial.checks import RUNTIME_CHECKS, RuntimeCheck


@RUNTIME_CHECKS.register
class OwnKernelsRan(RuntimeCheck):
    """A candidate that defines CUDA kernels but ran only others (a decoy kernel beside torch) is a cheat."""

    name = "own_kernels_ran"
    version = 1
    order = 70

    def after_profile(self, profile):
        own, names = profile.own, profile.kernels
        if own and not any(o in n for n in names for o in own) and not profile.triton_launches:
            return self.found("cheat", f"none of the candidate's kernels {sorted(own)[:4]} launched; "
                              f"it ran {names[:4]}")
        return None
