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
