"""Launch contracts: how an op's tensors become the (ptrs, ints) a CUDA harness's C entry reads.

A contract is one function `(inputs, outputs, params) -> (ptrs, ints)`, registered under its
own name with `@contract`; its docstring states the argument order. An op names its contract
in `Op.launch`, and registering an op whose launch names no contract fails, so no op falls
back to one silently. Most ops use the generic `tensors`: the ATen harnesses read it through
their `Shapes` helper. The flat contracts serve kernels whose C signatures take raw sizes
(`generic_launch` maps a kernel's parameters onto their roles). A harness template may fix
the contract it reads whatever the op says (its `contract:` header, see trial/harness.py).
"""
from __future__ import annotations

from typing import Callable

Contract = Callable[..., tuple[list[int], list[int]]]
CONTRACTS: dict[str, Contract] = {}


def contract(fn: Contract) -> Contract:
    """Register `fn` as the contract named after it."""
    if fn.__name__ in CONTRACTS:
        raise ValueError(f"launch contract {fn.__name__!r} registered twice")
    CONTRACTS[fn.__name__] = fn
    return fn


def get(name: str) -> Contract:
    try:
        return CONTRACTS[name]
    except KeyError:
        raise KeyError(f"unknown launch contract {name!r} (known: {', '.join(CONTRACTS)})") from None


@contract
def tensors(inputs, outputs, params=None):
    """The generic contract: ptrs = outputs then inputs; ints = (ndim, *shape) of each, in the same order.
    Every tensor is contiguous; an op that updates inputs in place lists them as outputs too."""
    ts = list(outputs) + list(inputs)
    ints = []
    for t in ts:
        ints += [t.dim(), *t.shape]
    return [t.data_ptr() for t in ts], ints


@contract
def unary(inputs, outputs, params=None):
    """y[n] = f(x[n]) over contiguous memory: ptrs = [y, x], ints = [n]."""
    x, y = inputs[0], outputs[0]
    return [y.data_ptr(), x.data_ptr()], [x.numel()]


@contract
def binary(inputs, outputs, params=None):
    """z[n] = f(a[n], b[n]) over contiguous memory: ptrs = [z, a, b], ints = [n]."""
    return [outputs[0].data_ptr(), inputs[0].data_ptr(), inputs[1].data_ptr()], [inputs[0].numel()]


@contract
def rowwise(inputs, outputs, params=None):
    """y[rows, cols] = f(x[rows, cols]): ptrs = [y, x], ints = [rows, cols, stride]; rows are `stride` apart."""
    x, y = inputs[0], outputs[0]
    return [y.data_ptr(), x.data_ptr()], [x.shape[0], x.shape[1], x.stride(0)]


@contract
def rowwise_backward(inputs, outputs, params=None):
    """dx[rows, cols] = f(dy, y): ptrs = [dx, dy, y], ints = [rows, cols, stride]; rows are `stride` apart."""
    dy, y = inputs[0], inputs[1]
    return [outputs[0].data_ptr(), dy.data_ptr(), y.data_ptr()], [dy.shape[0], dy.shape[1], dy.stride(0)]
