"""Sample size and bound math, stratification and merging, allocation and determinism."""
from __future__ import annotations

import math

import pytest

from sftbuild.review import sample as S


@pytest.mark.parametrize("p, conf, n", [(0.05, 0.95, 59), (0.01, 0.95, 299), (0.10, 0.90, 22), (0.05, 0.99, 90)])
def test_acceptance_plan_size(p, conf, n):
    assert S.acceptance_n(p, conf) == n
    # the plan is the smallest n whose all-accept outcome bounds the rate at p
    assert (1 - p) ** n <= 1 - conf < (1 - p) ** (n - 1)


def test_size_is_the_larger_of_fraction_and_plan_capped_at_the_population():
    assert S.sample_size(20, 0.1, 0.05, 0.95) == 20      # fewer records than the plan needs: all of them
    assert S.sample_size(300, 0.1, 0.05, 0.95) == 59     # the plan beats 10% (30)
    assert S.sample_size(1000, 0.1, 0.05, 0.95) == 100   # 10% beats the plan
    assert S.sample_size(1001, 0.1, 0.05, 0.95) == 101   # at least 10%, rounded up
    with pytest.raises(ValueError, match="defect_rate"):
        S.acceptance_n(float("nan"), 0.95)


def test_clopper_pearson_upper_bound_matches_the_exact_definition():
    for k, m in ((0, 59), (1, 59), (3, 100), (10, 40)):
        ub = S.upper_bound(k, m, 0.95)
        # one-sided exact bound: P(X <= k | m, ub) = 5%
        assert S._binom_cdf(k, m, ub) == pytest.approx(0.05, abs=1e-6)
    assert S.upper_bound(0, 59, 0.95) < 0.05 < S.upper_bound(0, 58, 0.95)  # why 59
    assert S.upper_bound(5, 5, 0.95) == 1.0 and S.upper_bound(0, 0, 0.95) == 1.0


def test_the_bound_is_scipys_beta_quantile():
    beta = pytest.importorskip("scipy.stats").beta
    for m in (1, 5, 59, 300, 2000):
        for k in range(min(m, 12)):
            for conf in (0.9, 0.95, 0.99):
                assert S.upper_bound(k, m, conf) == pytest.approx(float(beta.ppf(conf, k + 1, m - k)), rel=1e-10)


def test_statements():
    assert S.statement(59, 500, 0, 0, 0.05, 0.95).startswith("defect rate <= 5% at 95% confidence")
    assert S.statement(59, 500, 0, 59, 0.05, 0.95).startswith("defect rate <= 4.95% at 95% confidence")
    assert "2 rejected of 59" in S.statement(59, 500, 2, 59, 0.05, 0.95)
    assert "still to come" in S.statement(59, 500, 0, 10, 0.05, 0.95)
    assert S.statement(20, 20, 1, 20, 0.05, 0.95).startswith("defect rate = 5.0% exactly")


def test_small_strata_merge_upwards_and_big_ones_stay():
    sizes = {("a", "norm", "cuda"): 50, ("a", "sort", "cuda"): 2, ("a", "scan", "cuda"): 3,
             ("a", "sort", "triton"): 1, ("b", "conv", "cuda"): 1}
    m = S.merge_strata(sizes, threshold=5)
    assert m[("a", "norm", "cuda")] == ("a", "norm", "cuda")
    assert m[("a", "sort", "cuda")] == m[("a", "scan", "cuda")] == ("a", "*", "cuda")  # 5 together: enough
    assert m[("a", "sort", "triton")] == m[("b", "conv", "cuda")] == ("*", "*", "*")   # still small: the rest


def test_largest_remainder_allocation():
    seats = S.allocate({"x": 50, "y": 30, "z": 20}, 7, seed=0)
    assert seats == {"x": 4, "y": 2, "z": 1}  # quotas 3.5, 2.1, 1.4: the .5 takes the last seat
    assert sum(S.allocate({i: 1 + i for i in range(13)}, 17, seed=3).values()) == 17


def _keys(n):
    fams = ["elementwise"] * 6 + ["norm"] * 3 + ["sort"]
    return {f"id{i:04d}": (["llmc", "liger", "flag"][i % 3], fams[i % 10], ["cuda", "triton"][i % 2])
            for i in range(n)}


def test_draw_is_proportional_seeded_and_deterministic():
    keys = _keys(1000)
    a = S.draw(keys, 0.1, 0.05, 0.95, seed=7)
    b = S.draw(dict(reversed(list(keys.items()))), 0.1, 0.05, 0.95, seed=7)
    assert a.rows == b.rows and a.size == 100 and len({r[0] for r in a.rows}) == 100
    assert S.draw(keys, 0.1, 0.05, 0.95, seed=8).rows != a.rows
    # every stratum gets its share within one record
    for stratum, got in a.strata.items():
        size = sum(1 for k in keys.values() if "/".join(k) == stratum)
        assert abs(got - 100 * size / 1000) < 1
    # 10% of 25 records, as on the GPU run, is no longer 68%: the plan asks for all 25 (and says so)
    assert S.draw(_keys(25), 0.1, 0.05, 0.95, 0).size == 25
    small = S.draw(_keys(25), 0.1, 0.10, 0.50, 0)  # a lax plan: ceil(ln .5/ln .9) = 7
    assert small.size == 7 and len(small.strata) < 12  # merged, not one per stratum


def test_overlap_marks_a_share_for_two_reviewers():
    d = S.draw(_keys(1000), 0.1, 0.05, 0.95, seed=1, overlap=0.2)
    assert sum(1 for r in d.rows if r[2] == 2) == 20


def test_cohen_kappa():
    pairs = [("a", "a")] * 20 + [("r", "r")] * 15 + [("a", "r")] * 5 + [("r", "a")] * 10
    # po = .7; pe = .5*.6 + .5*.4 = .5; kappa = .4
    assert S.cohen_kappa(pairs) == pytest.approx(0.4)
    assert S.cohen_kappa([("a", "a")] * 4) is None
    assert S.cohen_kappa([("a", "r"), ("r", "a")]) == pytest.approx(-1.0)
    assert math.isclose(S.cohen_kappa([("a", "a"), ("r", "r")]), 1.0)
