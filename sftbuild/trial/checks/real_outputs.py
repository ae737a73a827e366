"""real_outputs: outputs are plain tensors with their own storage, not views of the inputs."""
from __future__ import annotations

from sftbuild.trial.checks import RUNTIME_CHECKS, RuntimeCheck


@RUNTIME_CHECKS.register
class RealOutputs(RuntimeCheck):
    """Outputs must be plain tensors on a real device with their own storage (a tensor subclass,
    a meta tensor or a view of an input that the op does not update in place is a cheat)."""

    name = "real_outputs"
    version = 1
    order = 30

    def after_call(self, call):
        inputs = [t for i, t in enumerate(call.inputs) if i not in call.mutates]
        why = real_outputs(call.outputs, inputs)
        return self.found("cheat", why) if why else None


def real_outputs(outs, inputs) -> str:
    """'' when every output is a plain tensor on a real device with its own storage; else why not."""
    import torch  # here, not at the top: `sftbuild list` loads this module without torch
    for i, o in enumerate(outs):
        if type(o) is not torch.Tensor and type(o) is not torch.nn.Parameter:
            return f"output {i} is a {type(o).__module__}.{type(o).__name__}, not a plain tensor"
        if o.is_meta or o.device.type not in ("cuda", "cpu") or o.layout != torch.strided:
            return f"output {i} has no real storage ({o.device}, {o.layout})"
        if o.numel() and o.untyped_storage().data_ptr() == 0:
            return f"output {i} has no storage"
        if any(view_of(o, t) for t in inputs):
            return f"output {i} is a view of an input"
    return ""


def view_of(o, t) -> bool:
    """Whether tensor `o`'s elements lie in the storage of tensor `t` (a view of it, or `t` itself)."""
    import torch  # here, not at the top: `sftbuild list` loads this module without torch
    if not (isinstance(o, torch.Tensor) and isinstance(t, torch.Tensor) and o.numel()) or t.device.type == "meta" \
            or o.device != t.device:
        return False
    s = t.untyped_storage()
    return s.data_ptr() <= o.data_ptr() < s.data_ptr() + s.nbytes()
