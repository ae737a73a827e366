"""Parameters that change: a module pair's reference and candidate get the same new parameter and
buffer values between calls, as training gives them, and must still agree.

  * New values are drawn on the host from a fixed seed, from the reference's own state: each floating
    parameter moved (scaled by U(0.5, 1.5) plus noise of a tenth of its magnitude), each floating buffer
    scaled by U(0.5, 1.5) (a running variance stays positive); integer entries stay.
  * Two changes, in order: `load` (load_state_dict of the new values) and `step` (an in-place update of
    every floating parameter, as an optimiser step makes after a call). Both change values in place,
    as training does: a layer that keys a derived copy on `param._version` sees them, one keyed on
    `data_ptr()` alone does not.
  * The candidate's state is matched to the reference's by name and shape, else each reference entry
    to the candidate's first unused one of the same shape, in state_dict order; a state that does not
    match is not changed (the caller notes it).
"""
from __future__ import annotations

import torch

SEED = 20261207
CHANGES = {"load": "load_state_dict of new parameter values",
           "step": "an in-place update of the parameters (an optimiser step) after a call"}


def draw(model: torch.nn.Module) -> tuple[dict, dict]:
    """(new state for `load`, per-parameter deltas for `step`), float64 host tensors keyed by the
    reference's state_dict names; empty when the model has no floating state."""
    gen = torch.Generator().manual_seed(SEED)
    params = {k for k, _ in model.named_parameters()}
    state, deltas = {}, {}
    for k, t in model.state_dict().items():
        if not t.is_floating_point() or not t.numel():
            continue
        x = t.detach().double().cpu()
        size = float(x.abs().max()) or 1.0
        factor = 0.5 + torch.rand(x.shape, generator=gen, dtype=torch.float64)
        if k in params:
            state[k] = x * factor + 0.1 * size * torch.randn(x.shape, generator=gen, dtype=torch.float64)
            deltas[k] = 0.05 * size * torch.randn(x.shape, generator=gen, dtype=torch.float64)
        else:
            state[k] = x * factor
    return state, deltas


def match(ref_state: dict, cand: torch.nn.Module) -> dict | None:
    """{reference name: candidate name} for every entry of `ref_state` (see the module doc), or None."""
    mine = {k: t for k, t in cand.state_dict().items() if t.is_floating_point()}
    if all(k in mine and mine[k].shape == v.shape for k, v in ref_state.items()):
        return {k: k for k in ref_state}
    names, used = {}, set()
    for k, v in ref_state.items():
        hit = next((c for c, t in mine.items() if c not in used and t.shape == v.shape), None)
        if hit is None:
            return None
        names[k] = hit
        used.add(hit)
    return names


def change(model: torch.nn.Module, what: str, values: dict, names: dict | None = None) -> None:
    """Apply change `what` ("load" or "step") of `values` to `model`, its entries named by `names`."""
    names = names or {k: k for k in values}
    live = model.state_dict(keep_vars=True)
    with torch.no_grad():
        if what == "load":
            model.load_state_dict({names[k]: v.to(live[names[k]].dtype) for k, v in values.items()}, strict=False)
        else:
            for k, v in values.items():
                t = live[names[k]]
                t.add_(v.to(device=t.device, dtype=t.dtype))
