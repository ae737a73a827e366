"""output_type: each output is what the reference's is, besides its values: dtype, shape, device, strides."""
from __future__ import annotations

from sftbuild.trial.checks import RUNTIME_CHECKS, RuntimeCheck, same_strides


@RUNTIME_CHECKS.register
class OutputType(RuntimeCheck):
    """Each output has the reference's dtype, shape, device and strides (its memory format).

    fp32 returned for an fp16 op is a wrong result however close its values, and a result on
    the host is not the kernel's (a cheat). Strides may differ only where the reference's own
    follow the input layout (an elementwise op keeps a transposed input's strides), or where it
    returns a view that is no memory format (expanded): there a contiguous result is right too. Integer outputs may differ in width (int32 indices for
    torch's int64 are fine). Dimensions of size 1 have no stride that matters."""

    name = "output_type"
    version = 1
    order = 50

    def after_call(self, call):
        import torch  # here, not at the top: `sftbuild list` loads this module without torch
        for j, (out, want) in enumerate(zip(call.outputs, call.expected or [])):
            if want is None or not isinstance(out, torch.Tensor):
                continue
            dtype, device, shape, stride, free = _spec(want)
            if out.device.type != device.type:
                return self.found("cheat", f"output {j} is on {out.device.type}, the reference's on {device.type}")
            if not same_kind(out.dtype, dtype):
                return self.found("incorrect", f"output {j} is {_name(out.dtype)}, the reference's is {_name(dtype)}")
            if shape is not None and tuple(out.shape) != tuple(shape):
                return self.found("incorrect", f"output {j} has shape {tuple(out.shape)}, the reference's "
                                               f"{tuple(shape)}")
            if stride is None or same_strides(out.shape, out.stride(), stride):
                continue
            if free and same_strides(out.shape, out.stride(), contiguous_strides(out.shape)):
                continue
            return self.found("incorrect", f"output {j} has strides {tuple(out.stride())} ({memory_format(out)}), "
                                           f"the reference's {tuple(stride)} "
                                           f"({memory_format_of(shape, stride)}): wrong memory format")
        return None


def _spec(want) -> tuple:
    """(dtype, device, shape, stride, free) from a Spec, or from a bare (dtype, device) pair."""
    if len(want) == 2:
        return (*want, None, None, False)
    return tuple(want)


def same_kind(got: torch.dtype, want: torch.dtype) -> bool:
    """Floating and complex dtypes must match exactly; integer and bool ones must not be floating."""
    if want.is_floating_point or want.is_complex:
        return got == want
    return not (got.is_floating_point or got.is_complex)


def contiguous_strides(shape) -> tuple:
    out, step = [], 1
    for n in reversed(tuple(shape)):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def memory_format(t: torch.Tensor) -> str:
    return memory_format_of(t.shape, t.stride())


def memory_format_of(shape, stride) -> str:
    """A name for a layout: contiguous, channels_last(_3d), dense in another dimension order, or strided."""
    shape, stride = tuple(shape), tuple(stride)
    if same_strides(shape, stride, contiguous_strides(shape)):
        return "contiguous"
    order = dim_order(shape, stride)
    if order is None:
        return "strided"
    named = {(0, 2, 3, 1): "channels_last", (0, 2, 3, 4, 1): "channels_last_3d"}
    return named.get(order, f"dense in dimension order {order}")


def dim_order(shape, stride) -> tuple | None:
    """The dimensions from outermost to innermost where the elements fill their memory densely in that
    order (a permutation of a contiguous buffer); None for any other layout (gaps, overlap)."""
    shape, stride = tuple(shape), tuple(stride)
    order = tuple(sorted(range(len(shape)), key=lambda i: -stride[i]))
    return order if same_strides(shape, stride, strides_in_order(shape, order)) else None


def strides_in_order(shape, order) -> tuple:
    """The strides of a dense tensor of `shape` whose dimensions lie in memory in `order` (outermost first)."""
    out, step = [0] * len(shape), 1
    for i in reversed(tuple(order)):
        out[i] = step
        step *= max(shape[i], 1)
    return tuple(out)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
