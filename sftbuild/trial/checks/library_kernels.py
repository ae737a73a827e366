"""library_kernels: no cuBLAS, cuDNN or ATen compute kernel among those the candidate launched.

  * Library kernels are bookkeeping, whatever their share of the GPU time, where every torch compute
    op the call dispatched touched tensors of at most 1/BOOKKEEPING of the inputs' elements (`.sum()`
    of n/4096 partial results a kernel wrote, a `cumsum` of segment lengths): the profiled trial is
    the largest, where that bound separates a handful of partials from the work.
  * Else, where the profile measured GPU time (Triton candidates), a library kernel is bookkeeping
    while the candidate's own kernels take most of the time; it is a cheat once it takes
    LIBRARY_SHARE of the time or more, and for other candidates wherever it appears."""
from __future__ import annotations

from sftbuild.trial.checks import RUNTIME_CHECKS, RuntimeCheck

LIBRARY_SHARE = 0.5
BOOKKEEPING = 16  # torch ops on tensors at most 1/16 of the inputs' elements are bookkeeping


@RUNTIME_CHECKS.register
class LibraryKernels(RuntimeCheck):
    """A library kernel (gemm, cuDNN, ATen's softmax or reductions) in the candidate's launches does its work."""

    name = "library_kernels"
    version = 2  # bookkeeping judged by the elements torch's ops touched
    order = 60

    def after_profile(self, profile):
        from sftbuild.trial import guards  # it imports torch: `sftbuild list` loads this module without it

        lib = guards.library_kernels(profile.kernels, profile.own | profile.triton)
        if lib and profile.torch_ops and profile.torch_elements * BOOKKEEPING <= profile.input_elements:
            return None
        if lib and profile.times and profile.triton:
            total = sum(profile.times.values())
            share = sum(profile.times.get(n, 0.0) for n in lib) / total if total > 0 else 1.0
            if share < LIBRARY_SHARE:
                return None
            return self.found("cheat", f"library kernels take {share:.0%} of the GPU time: {lib[:4]}")
        if lib:
            return self.found("cheat", f"library kernels do the work: {lib[:4]}")
        return None
