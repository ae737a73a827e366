"""output_type: each output has the dtype and the device of the reference's."""
from __future__ import annotations

import torch

from sftbuild.validate.checks import RUNTIME_CHECKS, RuntimeCheck


@RUNTIME_CHECKS.register
class OutputType(RuntimeCheck):
    """Each output has the reference's dtype and device: fp32 returned for an fp16 op is a wrong
    result however close its values, and a result computed on the host is not the kernel's.
    Integer outputs may differ in width (int32 indices for torch's int64 are fine)."""

    name = "output_type"
    order = 50

    def after_call(self, call):
        for j, (out, want) in enumerate(zip(call.outputs, call.expected or [])):
            if want is None or not isinstance(out, torch.Tensor):
                continue
            dtype, device = want
            if out.device.type != device.type:
                return self.found("cheat", f"output {j} is on {out.device.type}, the reference's on {device.type}")
            if not same_kind(out.dtype, dtype):
                return self.found("incorrect", f"output {j} is {_name(out.dtype)}, the reference's is {_name(dtype)}")
        return None


def same_kind(got: torch.dtype, want: torch.dtype) -> bool:
    """Floating and complex dtypes must match exactly; integer and bool ones must not be floating."""
    if want.is_floating_point or want.is_complex:
        return got == want
    return not (got.is_floating_point or got.is_complex)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
