"""Shape pools, layouts and input generators that the op families share.

The ops themselves live in one module per family (elementwise, reduction, norm, linalg,
data, ...); each registers its ops on import, and the registry imports every module of
this package, so a new family is one new file.
"""
from __future__ import annotations

import torch

from sftbuild.ops import Op, Tolerance, add
from sftbuild.ops.fusion_sizes import (  # noqa: F401  (re-exported)
    FUSION_BATCH, FUSION_CHANNELS, FUSION_DTYPES, FUSION_FEATURES, FUSION_HEAD_DIM, FUSION_SEQ, FUSION_SPATIAL)

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "int8": torch.int8}
ALL_LAYOUTS = ("contiguous", "transposed", "sliced")

# Rows x cols pools: 1, primes, non-multiples of 32 and of common block sizes, wide and tall.
ROW_POOL = [(1, 1), (1, 7), (3, 33), (17, 100), (64, 257), (129, 1000), (7, 1024), (31, 512), (2, 4099),
            (1000, 31), (4097, 5), (5, 16411)]
FLAT_POOL = [(1,), (7,), (31,), (1000,), (1023,), (4097,), (65537,), (1 << 20,)]
# (outer, reduced, inner) style 3-D pools for ops that take a `dim`
CUBE_POOL = [(1, 1, 1), (3, 7, 5), (2, 33, 129), (5, 100, 3), (1, 16411, 2), (4097, 3, 2), (2, 3, 16411),
             (8, 64, 64)]


def rand(shape, dtype, layout, gen, scale=1.0, offset=0.0):
    """A random tensor of `shape` in the requested memory layout, values in a dtype-safe range."""
    dt = TORCH_DTYPES[dtype]
    shape = tuple(shape)
    if layout == "transposed" and len(shape) >= 2:
        base = torch.randn(*shape[:-2], shape[-1], shape[-2], generator=gen) * scale + offset
        return base.to(dt).transpose(-1, -2)
    if layout == "sliced" and len(shape) >= 1:
        base = torch.randn(*shape[:-1], shape[-1] * 2 + 1, generator=gen) * scale + offset
        return base.to(dt)[..., 1::2]  # stride 2 in the last dim, storage offset 1
    return (torch.randn(*shape, generator=gen) * scale + offset).to(dt)


def uniform(shape, dtype, gen, lo, hi):
    return (torch.rand(*shape, generator=gen) * (hi - lo) + lo).to(TORCH_DTYPES[dtype])


def define(name, family, en, zh, ref, inputs, pool, io, launch, **kw) -> Op:
    """Register one op; `inputs(shape, dtype, layout, gen, params)` returns its input tensors."""
    return add(Op(name=name, family=family, semantics={"en": en, "zh": zh}, reference=ref,
                  make_inputs=inputs, shape_pool=list(pool), io=io, launch=launch, **kw))


def rowwise(name, family, en, zh, ref, layouts=ALL_LAYOUTS, **kw):
    return define(name, family, en, zh, ref,
                  lambda shape, dtype, layout, gen, params: [rand(shape, dtype, layout, gen, scale=3.0)],
                  ROW_POOL, {"inputs": ["x: [rows, cols]"], "outputs": ["y: [rows, cols]"]}, "rowwise",
                  layouts=layouts, **kw)


def unary(name, en, zh, ref, scale=3.0, offset=0.0, tol=None, lo=None, hi=None, values=None):
    def inputs(shape, dtype, layout, gen, params):
        if lo is not None:
            x = uniform(shape, dtype, gen, lo, hi)
            return [x if layout == "contiguous" else torch.cat([x, x])[::2]]
        return [rand(shape, dtype, layout, gen, scale, offset)]
    return define(name, "elementwise", en, zh, ref, inputs, FLAT_POOL,
                  {"inputs": ["x: [n]"], "outputs": ["y: [n]"]}, "unary",
                  layouts=("contiguous", "sliced"), tolerance=tol or Tolerance(), values=values)
