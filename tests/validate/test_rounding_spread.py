"""The reference's own spread under rounding (sftbuild.ops.rounding) widens the tolerance only where
the reference cancels: the input gradient of a group norm over one value per group is 0, and a
kernel with a fused multiply-add leaves one rounding of w*dy times rstd = 1/sqrt(eps) there."""
import torch

from sftbuild import ops
from sftbuild.ops import norm, rounding
from sftbuild.trial import pyrun


def _group_norm_one_value_per_group():
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(1, 2, 1, generator=g) * 2 + 0.5).double()
    w = (torch.rand(2, generator=g) + 0.5).double()
    b = torch.randn(2, generator=g).double()
    run = lambda xs: [norm.group_norm_ref(*xs, groups=2, eps=1e-5)]  # noqa: E731
    ref = pyrun.with_grads(run, [x, w, b])
    native = pyrun.with_grads(run, [t.float() for t in (x, w, b)])
    spread = rounding.spread(lambda: pyrun.with_grads(run, [x, w, b]), ref, "float32")
    wdy = w.float().view(1, 2, 1) * pyrun.cotangent(ref[0]).float()  # what a kernel rounds
    fused = (w.view(1, 2, 1) * pyrun.cotangent(ref[0]) - wdy.double()) * 1e-5 ** -0.5  # fma(w, dy, -wdy) * rstd
    return ref, native, spread, wdy, fused


def test_one_rounding_times_rstd_passes_where_the_gradient_cancels():
    ref, native, spread, _, fused = _group_norm_one_value_per_group()
    assert bool((ref[1] == 0).all()) and bool((native[1] == 0).all())  # torch's own kernel rounds exactly
    cand = [t.float() for t in ref]
    cand[1] = fused.float()
    assert bool((cand[1] != 0).all())
    tol = ops.get("group_norm").tolerance
    assert not pyrun.compare_outputs(cand, ref, native, "float32", tol)[0]  # floors alone: 0 allows nothing
    ok, stats = pyrun.compare_outputs(cand, ref, native, "float32", tol, (), spread)
    assert ok and stats["rounding_sensitive"], stats


def test_a_wrong_gradient_there_still_fails():
    ref, native, spread, wdy, fused = _group_norm_one_value_per_group()
    tol = ops.get("group_norm").tolerance
    for wrong in (wdy * 1e-3, fused * 20, torch.full_like(wdy, 1e-3)):
        cand = [t.float() for t in ref]
        cand[1] = wrong.float()
        assert not pyrun.compare_outputs(cand, ref, native, "float32", tol, (), spread)[0]


def test_a_well_conditioned_output_keeps_its_floors():
    x = torch.randn(64, 33, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    run = lambda: [torch.softmax(x, -1)]  # noqa: E731
    ref = run()
    spread = rounding.spread(run, ref, "float16")
    assert float((spread[0] / ref[0]).max()) < 8 * rounding.UNIT_ROUNDOFF["float16"]
    off = [(ref[0] * (1 + 3 * ops.tolerance.FLOORS["float16"][0])).half()]  # past the floors everywhere
    ok, stats = pyrun.compare_outputs(off, ref, [ref[0].half()], "float16", ops.Tolerance(), (), spread)
    assert not ok and "rounding_sensitive" not in stats


def test_views_and_in_place_updates_are_not_jittered():
    x = torch.arange(1.0, 7.0, dtype=torch.float64)

    def fn():
        y = x.view(2, 3)  # a view: must still alias x's values exactly
        z = torch.zeros(2, 3, dtype=torch.float64)
        z.copy_(y)  # in place
        return [y, z]
    out = rounding.jittered(fn, "float32")
    assert torch.equal(out[0], x.view(2, 3)) and torch.equal(out[1], x.view(2, 3))
    assert not torch.equal(rounding.jittered(lambda: [x * 1.0], "float32")[0], x)


def test_the_book_measures_the_spread_for_gradients_only():
    # four extra float64 runs per book entry are paid where outputs are gradients (terms cancel by
    # construction there); elsewhere the floors and torch's own error cover rounding
    from sftbuild.trial import refbook

    class Problem:
        def __init__(self, gradients):
            self.gradients = lambda: gradients

        def grown(self, variant):
            return False

        def reference(self, variant, dtype, xs, double=False):
            x = xs[0].double()
            return [x * 3 - (x * 3).mean()]
    xs = [torch.randn(8, generator=torch.Generator().manual_seed(0))]
    plain = Problem(True).reference(None, "float32", xs, double=True)
    assert refbook._spread(Problem(False), None, "float32", xs, plain) == []
    spread = refbook._spread(Problem(True), None, "float32", xs, plain)
    assert len(spread) == 1 and float(spread[0].max()) > 0
