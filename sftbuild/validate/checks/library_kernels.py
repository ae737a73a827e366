"""library_kernels: no cuBLAS, cuDNN or ATen compute kernel among those the candidate launched."""
from __future__ import annotations

from sftbuild.validate import guards
from sftbuild.validate.checks import RUNTIME_CHECKS, RuntimeCheck


@RUNTIME_CHECKS.register
class LibraryKernels(RuntimeCheck):
    """A library kernel (gemm, cuDNN, ATen's softmax or reductions) in the candidate's launches does its work."""

    name = "library_kernels"
    order = 60

    def after_profile(self, profile):
        lib = guards.library_kernels(profile.kernels, profile.own | profile.triton)
        if lib:
            return self.found("cheat", f"library kernels do the work: {lib[:4]}")
        return None
