"""Value classes: the ranges a trial's floating inputs are drawn in, beside the op's own N(0, 1)-like draw.

  * A class maps each floating input tensor to new values of the same shape, dtype and strides,
    deterministically from the trial's seed; integer and boolean inputs stay as they are.
    `normal` is the op's own draw; `shifted` / `shifted_neg` move it by +/-10^3 of its spread (10^2
    at float32: at 10^3 a float32 mean's own rounding, 6e-5 of the spread, passes float32's floors,
    and torch's own float32 layer_norm failed them); `large` and `small` scale it by 10^2 and
    10^-3; `near_max` (float16, bfloat16) scales it to within 64x of the dtype's largest value;
    `saturating` puts it where exp nears overflow and tanh / sigmoid saturate; `positive_wide` makes
    it positive over many decades (log, sqrt).
  * An op's domain names the classes it allows (`Op.values`, a binding's `values` overriding it);
    GENERIC where it names none. `schedule` orders them for a dtype; `pick` gives one per trial
    slot, so a record's trials cover the classes without running more trials.
  * A class runs only where it is well-posed: the float64 reference finite and torch's own result at
    the dtype within the dtype's tolerance of it (the caller checks, see `well_posed`); elsewhere the
    trial falls back to `normal`.
"""
from __future__ import annotations

import math

import torch

GENERIC = ("shifted", "large", "shifted_neg", "small", "near_max")
LOGITS = ("large",) + tuple(n for n in GENERIC if n != "large")  # softmax, logsumexp, cross-entropy: large logits first
HALF = ("float16", "bfloat16")
SHIFT = {"float32": 1e2}  # x the spread; 1e3 at every other dtype (module doc)
LARGE, SMALL = 1e2, 1e-3
WHAT = {  # how a verdict names each class
    "normal": "the op's own draw",
    "shifted": "a mean of +1e3 x the spread, +1e2 at float32",
    "shifted_neg": "a mean of -1e3 x the spread, -1e2 at float32",
    "large": "values x 1e2",
    "small": "values x 1e-3",
    "near_max": "values near the dtype's largest",
    "saturating": "values where exp nears overflow and tanh/sigmoid saturate",
    "positive_wide": "positive values over many decades",
}


def schedule(allowed, dtype: str) -> list[str]:
    """The classes to rotate through at `dtype`, in order: those `allowed` names (None: GENERIC)
    that apply at the dtype (`near_max` at float16 and bfloat16 only)."""
    names = GENERIC if allowed is None else tuple(allowed)
    return [n for n in names if n in WHAT and n != "normal" and (n != "near_max" or dtype in HALF)]


def slot(vi: int, di: int, ndtypes: int, seed: int, order: int, seeds: int) -> int | None:
    """The class slot of one input set: variant `vi`, dtype number `di`, seed, order (0: the trial's
    first inputs, 1: the new values of its second order). None for the first order of seed 0, which
    keeps the op's own draw in every (variant, dtype)."""
    k = 2 * seed + order - 1
    return None if k < 0 else (vi * ndtypes + di) * (2 * seeds - 1) + k


def pick(classes: list[str], at: int | None) -> str:
    return "normal" if at is None or not classes else classes[at % len(classes)]


def describe(name: str) -> str:
    return f"{name} values ({WHAT.get(name, name)})"


def on(name: str) -> str:
    """What a failed comparison's `why` adds to name its inputs' class (nothing for the own draw)."""
    return "" if name == "normal" else f", on {describe(name)}"


def apply(name: str, inputs: list, dtype: str, seed: int) -> list:
    """`inputs` with their floating tensors redrawn in class `name` (module doc); others unchanged."""
    if name == "normal":
        return inputs
    gen = torch.Generator().manual_seed(seed * 104729 + 17)
    return [_redraw(name, t, dtype, gen) if _floating(t) else t for t in inputs]


def _floating(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0


def _redraw(name: str, t: torch.Tensor, dtype: str, gen: torch.Generator) -> torch.Tensor:
    x = t.detach().double().cpu()
    spread = float(x.std()) if x.numel() > 1 else 0.0
    spread = spread if math.isfinite(spread) and spread > 0 else max(float(x.abs().max()), 1.0)
    top = max(float(x.abs().max()), 1e-30)
    info = torch.finfo(t.dtype)
    if name in ("shifted", "shifted_neg"):
        y = x + SHIFT.get(dtype, 1e3) * spread * (-1 if name == "shifted_neg" else 1)
    elif name == "large":
        y = x * LARGE
    elif name == "small":
        y = x * SMALL
    elif name == "near_max":
        y = x * (info.max / 64 / top)
    elif name == "saturating":  # |x| up to 0.9 of log(max): exp stays finite, tanh and sigmoid are flat
        y = x * (0.9 * math.log(info.max) / top)
    else:  # positive_wide: exp of a uniform over +/- a third of log(max), about 13 decades at float32
        k = math.log(info.max) / 3
        y = torch.exp((torch.rand(x.shape, generator=gen, dtype=torch.float64) * 2 - 1) * k)
    out = t.clone()
    out.copy_(y.clamp(-info.max, info.max).to(t.dtype))
    return out


def finite(outputs) -> bool:
    """Every floating output tensor finite (a class's float64 reference must be, to run)."""
    return all(bool(torch.isfinite(o).all()) for o in outputs
               if isinstance(o, torch.Tensor) and o.is_floating_point())


def well_posed(native, double, dtype: str, tol) -> bool:
    """A class's inputs suit the dtype: the float64 reference finite and torch's own result at the
    dtype within the dtype's tolerance of it (an op whose every kernel at the dtype loses the answer
    there, attention on shifted queries, says nothing of the candidate)."""
    from sftbuild.ops.tolerance import compare

    if not finite(double):
        return False
    pairs = [(n, d) for n, d in zip(native, double) if isinstance(n, torch.Tensor) and isinstance(d, torch.Tensor)]
    return all(compare(n, d, dtype, tol)[0] for n, d in pairs)
