"""The reference's own sensitivity to rounding at a dtype (Monte Carlo arithmetic).

`jittered(fn, dtype)` runs `fn` (a float64 reference) with the result of every floating ATen op
it runs, autograd's backward ops included, multiplied by (1 + s * u): s a fixed-seed random sign
per element, u the unit roundoff of `dtype`. Its distance from the plain float64 result is how far
the output moves when each intermediate value is rounded once at that dtype: about u times the
output where the computation is well conditioned, but much more where terms cancel to ~0 (the input
gradient through a norm over one value: (w*dy - mean(w*dy)) * rstd with rstd = 1/sqrt(eps), where
an honest kernel's fused multiply-add leaves one rounding of w*dy times rstd). `spread` gives the
largest such distance over a few runs per element; tolerance.compare widens an output's allowance
by it only where the dtype's floors do not already cover it somewhere (see its doc).

Ops that return a view or update an argument in place are left alone (their outputs alias other
tensors); so are non-floating outputs. A reference that fails under the jitter gives None.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
SEED = 20240611
RUNS = 2  # jittered runs per reference: the allowance takes the largest distance of these


def _fresh(func) -> bool:
    """Whether `func` returns new tensors (no view, no in-place or out= update)."""
    schema = func._schema
    return not schema.is_mutable and not any(r.alias_info is not None for r in schema.returns)


class _Jitter(TorchDispatchMode):
    def __init__(self, unit: float, seed: int):
        super().__init__()
        self.unit, self.seed = unit, seed
        self.gens: dict = {}

    def _gen(self, device) -> torch.Generator:
        key = str(device)
        if key not in self.gens:
            self.gens[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self.gens[key]

    def _jitter(self, t):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
            return t
        coin = torch.randint(0, 2, t.shape, generator=self._gen(t.device), device=t.device, dtype=t.dtype)
        return t * (1.0 + self.unit * (2.0 * coin - 1.0))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return tree_map(self._jitter, out) if _fresh(func) else out


def jittered(fn, dtype: str, seed: int = SEED):
    """`fn()` with every intermediate rounded once, at random, by `dtype`'s unit roundoff (module doc);
    None where the reference does not run so."""
    unit = UNIT_ROUNDOFF.get(dtype)
    if unit is None:
        return None
    try:
        with _Jitter(unit, seed):
            return fn()
    except Exception:
        return None


def spread(fn, plain: list, dtype: str, runs: int = RUNS) -> list:
    """Per output of `fn` (a float64 reference whose plain results are `plain`): the largest distance,
    element by element, of `runs` jittered runs from the plain result. Random signs may cancel at an
    element in one run; the largest of a few is a steadier measure. [] where the jitter fails or
    changes the outputs' number or shapes; None in the place of a non-floating output."""
    out = None
    for k in range(runs):
        got = jittered(fn, dtype, SEED + k)
        if not isinstance(got, (list, tuple)) or len(got) != len(plain):
            return []
        dist = []
        for g, p in zip(got, plain):
            if not (isinstance(g, torch.Tensor) and isinstance(p, torch.Tensor) and p.is_floating_point()
                    and g.shape == p.shape):
                dist.append(None)
                continue
            dist.append((g.detach().to(torch.float64) - p.detach().to(torch.float64)).abs())
        out = dist if out is None else [a if b is None else torch.maximum(a, b) for a, b in zip(out, dist)]
    return out or []
