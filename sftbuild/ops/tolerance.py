"""Tolerance policy: per dtype, relative to the output's magnitude, NaN never passes.

A candidate is compared with a float64 reference computed on the same inputs.
It passes when
  * NaN and Inf sit exactly where the reference has them;
  * every finite element satisfies |c - r| <= atol * scale + rtol * |r|, with
    scale = max |r| (so all-zero outputs cannot hide behind a tiny reference);
  * the relative error norm ||c - r|| / ||r|| is under the dtype's floor or
    under `slack` times the error of torch's own kernel at that dtype,
    whichever is larger, but no larger than 8 floors. An fp32 op computed in TF32
    or fp16 fails this.
  * Where torch's own kernel at the dtype is further from the float64 result than
    8 floors of the output, but within 8 floors of the call's largest output
    (`context`), the output is ill-conditioned there (terms cancelling to ~0, as
    the gradient through a norm over one element): each element may then also be
    off by `slack` times torch's largest error, and the norm by `slack` times its.
    A torch kernel that is simply inaccurate widens nothing.
  * Where the reference itself moves past the floors at some element when each of its intermediate
    values is rounded once at the dtype (`spread`: the float64 reference's distance under
    sftbuild.ops.rounding's jitter), by no more than 8 floors of `context`, the output cancels
    there even if torch's own kernel happens to round exactly (one value per group: w*dy -
    mean(w*dy) is 0 in torch, one rounding of w*dy times rstd in a kernel with a fused
    multiply-add): each element may then also be off by `slack` times its spread, and the norm by
    `slack` times the spread's. An output whose spread the floors cover everywhere (a
    well-conditioned one) keeps its floors exactly.
"""
from __future__ import annotations

import dataclasses

FLOORS = {  # dtype: (rtol, atol relative to max|ref|, norm-relative error)
    "float64": (1e-10, 1e-12, 1e-12),
    "float32": (1e-4, 1e-5, 2e-5),
    "float16": (4e-3, 2e-3, 2e-3),
    "bfloat16": (3e-2, 1.6e-2, 1.2e-2),
    "int": (0.0, 0.0, 0.0),
}


@dataclasses.dataclass
class Tolerance:
    slack: float = 4.0  # allowed multiple of torch's own error at the dtype
    scale: float = 1.0  # widen every floor (ops with long accumulations)
    exact: bool = False  # integer or index outputs: must match exactly
    max_int_diff: int = 0  # integer outputs may differ by this much (rounding at .5 in quantisers)

    def floors(self, dtype: str) -> tuple[float, float, float]:
        r, a, n = FLOORS.get(dtype, FLOORS["float32"])
        return r * self.scale, a * self.scale, n * self.scale


def _overflow(cand: torch.Tensor, c: torch.Tensor, r: torch.Tensor, extra_inf: torch.Tensor) -> torch.Tensor:
    """Where the candidate's Inf is the output dtype's own: the exact value (the float64 reference) is
    at or past the dtype's largest finite number, with the same sign. (A long fp16 sum past 65504 is
    Inf in torch's own kernel too, or not, as its rounding falls.)"""
    import torch

    if not cand.is_floating_point() or not bool(extra_inf.any()):
        return torch.zeros_like(extra_inf)
    big = torch.finfo(cand.dtype).max
    return extra_inf & (r.abs() >= big) & (torch.sign(c) == torch.sign(r))


def largest(tensors) -> float:
    """The largest finite magnitude among the floating tensors of one call's results (a `context`)."""
    import torch

    # one-byte floats (float8) have no abs on the CPU: their magnitudes are read in float32
    found = [float((t.detach().float() if t.element_size() == 1 else t.detach()).abs().nan_to_num(0.0, 0.0, 0.0).max())
             for t in tensors
             if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()]
    return max(found, default=0.0)


def compare(cand: torch.Tensor, ref64: torch.Tensor, dtype: str, tol: Tolerance,
            native: torch.Tensor | None = None, context: float | None = None,
            spread: torch.Tensor | None = None) -> tuple[bool, dict]:
    """Return (passed, stats) for one output tensor. `context`: the largest magnitude among all the
    outputs of the same call (the scale of the terms an output near zero may be the difference of);
    `spread`: how far the float64 reference moves with its intermediates rounded at the dtype (module doc)."""
    import torch

    stats: dict = {}
    if not isinstance(cand, torch.Tensor):
        return False, {"why": f"output is {type(cand).__name__}, not a tensor"}
    if tuple(cand.shape) != tuple(ref64.shape):
        return False, {"why": f"shape {tuple(cand.shape)} != {tuple(ref64.shape)}"}
    c = cand.detach().to(torch.float64)
    r = ref64.detach().to(torch.float64)
    if tol.exact or not (cand.is_floating_point() or cand.is_complex()):
        if not torch.equal(torch.isnan(c), torch.isnan(r)):
            return False, {"exact": True, "why": "NaN pattern differs from the reference"}
        c, r = torch.nan_to_num(c, nan=0.0), torch.nan_to_num(r, nan=0.0)
        off = int(((c - r).abs() > (tol.max_int_diff if not cand.is_floating_point() else 0)).sum())
        return off == 0, {"exact": True, "mismatches": off, **({"why": f"{off} elements differ"} if off else {})}
    nan_c, nan_r = torch.isnan(c), torch.isnan(r)
    inf_c, inf_r = torch.isinf(c), torch.isinf(r)
    if not torch.equal(nan_c, nan_r):
        return False, {"why": "NaN where the reference has none (or the reverse)",
                       "nan": int(nan_c.sum()), "ref_nan": int(nan_r.sum())}
    overflow = _overflow(cand, c, r, inf_c & ~inf_r)
    if not torch.equal(inf_c & ~overflow, inf_r) or not torch.equal(c[inf_r], r[inf_r]):
        return False, {"why": "Inf pattern differs from the reference"}
    fin = torch.isfinite(r) & ~overflow
    if bool(overflow.any()):
        stats["overflow"] = int(overflow.sum())
    c, r = c[fin], r[fin]
    if r.numel() == 0:
        return True, {"max_abs": 0.0, "max_rel": 0.0, "norm_rel": 0.0}
    rtol, atol, ntol = tol.floors(dtype)
    scale = float(r.abs().max())
    diff = (c - r).abs()
    stats["max_abs"] = float(diff.max())
    stats["max_rel"] = float((diff / r.abs().clamp_min(scale * 1e-3 + 1e-30)).max())
    denom = float(torch.linalg.vector_norm(r))
    stats["norm_rel"] = float(torch.linalg.vector_norm(c - r)) / denom if denom > 0 else float(diff.max())
    allow = 0.0  # absolute error allowed besides the floors: torch's own, where the output is ill-conditioned
    if native is not None:
        n = native.detach().to(torch.float64)[fin]
        nat = float(torch.linalg.vector_norm(n - r)) / denom if denom > 0 else float((n - r).abs().max())
        stats["native_norm_rel"] = nat
        # never looser than what the dtype's own rounding explains ...
        cap = max(FLOORS.get(dtype, FLOORS["float32"])[2] * tol.scale * 8, 1e-30)
        own = float((n - r).abs().max()) if bool(torch.isfinite(n).all()) else float("inf")
        if nat <= cap or not context or own > cap * context:
            ntol = min(max(ntol, tol.slack * nat), cap)
        else:  # ... unless torch's own kernel is further off, by no more than the dtype's rounding of the
            # call's larger terms: values cancelling to ~0 (a gradient through a one-element norm)
            ntol = tol.slack * nat
            allow = tol.slack * own
            stats["ill_conditioned"] = True
    floor = atol * scale + rtol * r.abs()
    if spread is not None and context and tuple(spread.shape) == tuple(ref64.shape):
        allow, ntol = _rounding_sensitive(spread, fin, floor, denom, dtype, tol, context, allow, ntol, stats)
    stats["norm_tol"] = ntol
    bad = diff > (floor + allow)
    stats["bad_elements"] = int(bad.sum())
    ok = stats["bad_elements"] == 0 and stats["norm_rel"] <= ntol
    if not ok:
        stats["why"] = (f"{stats['bad_elements']} elements out of tolerance" if stats["bad_elements"]
                        else f"relative error {stats['norm_rel']:.3g} > {ntol:.3g}")
    return ok, stats


def _rounding_sensitive(spread, fin, floor, denom, dtype, tol, context, allow, ntol, stats):
    """(allow, ntol) widened by the reference's own spread where it passes the floors (module doc)."""
    import torch

    w = spread.detach().to(torch.float64)[fin]
    if not bool(torch.isfinite(w).all()):
        return allow, ntol
    over = w > floor
    cap = FLOORS.get(dtype, FLOORS["float32"])[2] * tol.scale * 8
    if not bool(over.any()) or float(w.max()) > cap * context:
        return allow, ntol
    stats["rounding_sensitive"] = int(over.sum())
    norm = float(torch.linalg.vector_norm(w)) / denom if denom > 0 else float(w.max())
    return allow + tol.slack * w, max(ntol, tol.slack * norm)
