"""Comparison at the edge of a dtype's range: an Inf that the output dtype forces is no error."""
import torch

from sftbuild.ops.tolerance import Tolerance, compare


def test_an_fp16_sum_past_its_range_may_be_inf():
    ref = torch.tensor([70000.0, 10.0, -80000.0], dtype=torch.float64)
    cand = torch.tensor([float("inf"), 10.0, float("-inf")], dtype=torch.float16)
    ok, stats = compare(cand, ref, "float16", Tolerance())
    assert ok and stats["overflow"] == 2


def test_an_inf_inside_the_range_or_of_the_wrong_sign_is_wrong():
    ref = torch.tensor([60000.0, 10.0], dtype=torch.float64)
    assert not compare(torch.tensor([float("inf"), 10.0], dtype=torch.float16), ref, "float16", Tolerance())[0]
    ref = torch.tensor([70000.0, 10.0], dtype=torch.float64)
    assert not compare(torch.tensor([float("-inf"), 10.0], dtype=torch.float16), ref, "float16", Tolerance())[0]
    # a float32 output has range for 70000: Inf there is wrong
    assert not compare(torch.tensor([float("inf"), 10.0]), ref, "float32", Tolerance())[0]


def test_values_cancelling_to_zero_are_held_to_torchs_own_error_there():
    """A gradient through a one-element RMS norm is ~2e-8 in float64; torch's own float32 kernel is 15%
    off it. A kernel as close as torch passes; one further off than slack times torch does not, and
    where torch is as close as the dtype's rounding explains, the floors hold as before."""
    import torch

    from sftbuild import ops

    r = torch.tensor([-1.9667681004642557e-08], dtype=torch.float64)
    torch_own = (r + 2.9e-9).float()
    tol = ops.Tolerance()
    terms = 0.78  # the call's other outputs (the weight's gradient)
    assert ops.compare((r + 3.4e-9).float(), r, "float32", tol, native=torch_own, context=terms)[0]
    assert not ops.compare((r + 3.4e-9).float(), r, "float32", tol, native=torch_own)[0]  # no context: floors
    assert not ops.compare((r + 2e-8).float(), r, "float32", tol, native=torch_own, context=terms)[0]
    assert not ops.compare((r + 3.4e-9).float(), r, "float32", tol, native=r.float(), context=terms)[0]
    big = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
    ok, stats = ops.compare((big * 1.01).float(), big, "float32", tol, native=(big * 1.01).float(), context=3.0)
    assert not ok and "ill_conditioned" not in stats  # an inaccurate torch kernel widens nothing
