"""Trial inputs: an op's own inputs, with special values mixed in where its result is boolean.

Random finite, nonzero, distinct floats make most boolean-valued ops constant: isinf, isnan and
isneginf are all False, eq and isclose all False, ne and the logical ops all True. A trial on such
inputs cannot tell a kernel from a constant, so a record would be judged on what its inputs failed
to exercise. Wherever an op's reference returns a bool tensor (looked up once per op on the meta
device, else by running it), `trial_inputs` mixes into every floating input, deterministically
from the trial's seed:

  * zeros, +inf, -inf and NaN, each at about one position in `SPECIAL_EVERY` (one of them at
    one position at least);
  * for an op of two or more floating inputs that broadcast together, the first one's values
    copied into each other one at about one position in `EQUAL_EVERY`, one at least (specials
    included, so inf == inf and NaN != NaN both occur); where one broadcasts over the other, the
    values it meets in the broadcast result.

Shapes, integer and boolean inputs, and the other values stay as the op made them. Every caller
that draws an op's trial inputs (validation's Python and CUDA trials, the bind stage's probes)
goes through `trial_inputs`, so probe and validation see the same values for a seed.
"""
from __future__ import annotations

import torch

from sftbuild.ops import values

SPECIAL_EVERY = 16  # one position in this many gets each of 0, +inf, -inf, NaN
EQUAL_EVERY = 4  # one position in this many of a later input takes the first input's value
SPECIALS = (0.0, float("inf"), float("-inf"), float("nan"))
SALT = 0x5EED  # the special values' generator: seeded from the trial's seed, apart from the op's own draws

_BOOLEAN: dict = {}  # (op name, reference) -> whether the reference returns a bool tensor


def trial_inputs(op, shape, dtype: str, seed: int, params: dict, layout: str = "contiguous",
                 value_class: str = "normal") -> list:
    """The op's inputs for trial seed `seed` (its `make_inputs` with a generator seeded so), redrawn in
    `value_class` (sftbuild.ops.values), special values mixed in when its reference returns a bool
    tensor (see the module doc). CPU tensors."""
    gen = torch.Generator().manual_seed(seed)
    xs = values.apply(value_class, op.make_inputs(shape, dtype, layout, gen, params), dtype, seed)
    if boolean_valued(op, xs, params):
        xs = with_specials(xs, seed)
    return xs


def boolean_valued(op, inputs: list, params: dict) -> bool:
    """Whether `op`'s reference returns a bool tensor on inputs like these; remembered per op."""
    key = (op.name, id(op.reference))
    if key not in _BOOLEAN:
        _BOOLEAN[key] = _returns_bool(op, inputs, params)
    return _BOOLEAN[key]


def _returns_bool(op, inputs: list, params: dict) -> bool:
    outs = None
    try:  # the meta device gives the output dtypes without computing anything
        outs = op.run_reference([t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs], params)
    except Exception:
        try:
            outs = op.run_reference([t.clone() if isinstance(t, torch.Tensor) else t for t in inputs], params)
        except Exception:  # the reference does not run here: its failure is reported where trials run it
            return False
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    return any(isinstance(o, torch.Tensor) and o.dtype == torch.bool for o in outs)


def with_specials(inputs: list, seed: int) -> list:
    """Copies of `inputs` with zeros, +/-inf and NaN in the floating ones, and positions where later
    floating inputs equal the first (see the module doc); deterministic in `seed`."""
    gen = torch.Generator().manual_seed(seed * 7919 + SALT)
    out = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
    floats = [i for i, t in enumerate(out) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()]
    for i in floats:
        t = out[i]
        pick = torch.randint(0, SPECIAL_EVERY, tuple(t.shape), generator=gen)
        if not bool((pick < len(SPECIALS)).any()):  # a small tensor: still one special somewhere
            pick.view(-1)[int(torch.randint(0, t.numel(), (1,), generator=gen))] = \
                int(torch.randint(0, len(SPECIALS), (1,), generator=gen))
        for k, v in enumerate(SPECIALS):
            t[pick == k] = v
    for i in floats[1:]:
        src = _aligned(out[floats[0]], out[i], gen)
        if src is None:
            continue
        mask = torch.randint(0, EQUAL_EVERY, tuple(out[i].shape), generator=gen) == 0
        if not bool(mask.any()):  # a small tensor: still one equal position
            mask.view(-1)[int(torch.randint(0, mask.numel(), (1,), generator=gen))] = True
        out[i][mask] = src[mask].to(out[i].dtype)
    return out


def _aligned(first: torch.Tensor, other: torch.Tensor, gen: torch.Generator) -> torch.Tensor | None:
    """Values of `first` laid out as `other`, where the two broadcast together: at each position of
    `other`, the value of `first` it meets at one place of their broadcast result (where `other`
    broadcasts over a dimension, a place along it drawn from `gen`). None when they do not broadcast."""
    try:
        shape = torch.broadcast_shapes(first.shape, other.shape)
    except RuntimeError:
        return None
    lead = len(shape) - other.dim()

    def at(d: int) -> slice:
        k = int(torch.randint(0, shape[d], (1,), generator=gen))
        return slice(k, k + 1)
    index = [at(d) for d in range(lead)] + \
        [at(lead + d) if n == 1 else slice(None) for d, n in enumerate(other.shape)]
    return first.expand(shape)[tuple(index)].reshape(other.shape)
