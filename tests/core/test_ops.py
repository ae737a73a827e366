"""Every op's reference and input generator on the CPU: each allowed dtype and layout."""
import json
import math

import pytest
import torch

from sftbuild import ops
from sftbuild.ops import Tolerance, compare

ALL = ops.all_ops()


def _shape(op):
    # a small but non-trivial shape: the smallest pool entry with more than 8 elements
    sized = sorted(op.shape_pool, key=lambda s: math.prod(s))
    return next((s for s in sized if math.prod(s) > 8), sized[-1])


def test_registry_size_and_families():
    assert len(ALL) >= 60, len(ALL)
    fams = {op.family for op in ALL.values()}
    for fam in ("elementwise", "binary", "broadcast", "fused", "reduction", "softmax", "norm", "matmul", "layout",
                "indexing", "loss", "optimizer", "attention", "conv", "scan", "sort", "resample", "quant"):
        assert fam in fams, fam
    for op in ALL.values():
        assert op.semantics["en"] and op.semantics["zh"] and op.io["inputs"] and op.io["outputs"], op.name
        assert op.launch and op.shape_pool, op.name
        assert len(op.io["outputs"]) == op.outputs, op.name


def test_pools_cover_awkward_sizes():
    dims = {d for op in ALL.values() for s in op.shape_pool for d in s}
    assert 1 in dims and any(d > 16384 for d in dims)
    assert any(d % 32 and d > 32 for d in dims) and {7, 31, 4099, 16411} <= dims


@pytest.mark.parametrize("name", sorted(ALL))
def test_op_reference_on_cpu(name):
    op = ALL[name]
    shape = _shape(op)
    for dtype in op.dtypes:
        for layout in op.layouts:
            params = dict(op.params)
            inputs = op.make_inputs(shape, dtype, layout, torch.Generator().manual_seed(0), params)
            if layout != "contiguous":
                assert any(not t.is_contiguous() for t in inputs), (name, layout)
            outs = ops.as_outputs(op.run_reference(inputs, params))
            ref64 = ops.as_outputs(op.run_reference(ops.upcast(inputs), params))
            assert len(outs) == op.outputs == len(ref64), name
            caught = False
            for out, r64 in zip(outs, ref64):
                assert tuple(out.shape) == tuple(r64.shape), (name, dtype, layout)
                if out.is_floating_point():
                    assert torch.isfinite(out).all(), (name, dtype, layout)
                ok, stats = compare(out, r64, dtype, op.tolerance, native=out)
                assert ok, (name, dtype, layout, stats)
                zero, _ = compare(torch.zeros_like(out), r64, dtype, op.tolerance)
                caught |= not zero
            assert caught, f"{name}: an all-zero output passed ({dtype}, {layout})"


def test_every_pool_shape_generates():
    for op in ALL.values():
        for shape in [s for s in op.shape_pool if math.prod(s) <= 1 << 18]:
            params = dict(op.params)
            inputs = op.make_inputs(shape, "float32", "contiguous", torch.Generator().manual_seed(1), params)
            assert inputs and all(isinstance(t, torch.Tensor) for t in inputs), op.name


def test_tolerance_rules():
    r = torch.full((64,), 1e-6, dtype=torch.float64)
    assert not compare(torch.zeros(64), r, "float32", Tolerance())[0]
    nan = r.clone(); nan[3] = float("nan")
    assert not compare(nan.float(), r, "float32", Tolerance())[0]
    assert compare(nan.float(), nan, "float32", Tolerance())[0]
    inf = r.clone(); inf[5] = float("inf")
    assert not compare(r.float(), inf, "float32", Tolerance())[0]
    q = torch.tensor([1, 2, 3], dtype=torch.int8)
    assert compare(q + 1, q.double(), "float32", Tolerance(max_int_diff=1))[0]
    assert not compare(q + 1, q.double(), "float32", Tolerance(exact=True))[0]
    assert not compare(torch.tensor([0, 1]), torch.tensor([1.0, 1.0], dtype=torch.float64), "float16",
                       Tolerance(exact=True))[0]


def test_op_cards_are_the_registrys_facts_kept_as_json(tmp_path, monkeypatch):
    from sftbuild import ops
    from sftbuild.ops import cards

    monkeypatch.setenv("SFTBUILD_CACHE", str(tmp_path))
    monkeypatch.setattr(cards, "_KNOWN", {})  # what this process read or made before
    got = cards.cards(["softmax", "no_such_op", "pkg.absent.fn"])
    op = ops.get("softmax")
    card = got["softmax"]
    assert (card["family"], card["io"], card["semantics"]) == (op.family, op.io, op.semantics)
    assert cards.tolerance(card).floors("float16") == op.tolerance.floors("float16")
    assert got["no_such_op"] is None and got["pkg.absent.fn"] is None
    (path,) = (tmp_path / "op_cards").glob("*.json")
    kept = json.loads(path.read_text())
    assert kept["softmax"] == card and kept["no_such_op"] is None and "pkg.absent.fn" not in kept
    path.write_text("{not json")  # a damaged file is read as empty and written again whole
    monkeypatch.setattr(cards, "_KNOWN", {})  # as a fresh process finds it
    assert cards.cards(["softmax"]) == {"softmax": card}
    assert json.loads(path.read_text()) == {"softmax": card}
