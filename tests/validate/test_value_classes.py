"""Value classes (sftbuild.ops.values): trials beside N(0, 1) catch kernels that are right only there,
name the class in the verdict, and fall back to the op's own draw where a class is ill-posed."""
from __future__ import annotations

import torch

from sftbuild.ops import values
from sftbuild.trial_types import TrialTask

NAIVE_SOFTMAX = ("import torch\n\n\ndef wrapper(x, dim=-1):\n    e = x.float().exp()\n"
                 "    return (e / e.sum(dim, keepdim=True)).to(x.dtype).contiguous()\n")
SOFTMAX = ("import torch\n\n\ndef wrapper(x, dim=-1):\n    x32 = x.float()\n    e = (x32 - x32.amax(dim, keepdim=True)).exp()\n"
           "    return (e / e.sum(dim, keepdim=True)).to(x.dtype).contiguous()\n")
LAYER_NORM = '''import torch


def wrapper(x, w, b, eps=1e-5):
    xf = x.float()
    m = xf.mean(-1, keepdim=True)
    d = xf - m
    v = (d * d).mean(-1, keepdim=True)
    return (d / torch.sqrt(v + eps) * w.float() + b.float()).to(x.dtype).contiguous()
'''
ONE_PASS = LAYER_NORM.replace("    d = xf - m\n    v = (d * d).mean(-1, keepdim=True)\n",
                              "    v = (xf * xf).mean(-1, keepdim=True) - m * m\n    d = xf - m\n")


def _python(code, op, dtype="float32", binding=None):
    from sftbuild.trial import pyrun

    task = {"id": "t", "language": "triton", "code": code, "binding": {"op": op, **(binding or {})},
            "entry": {"wrapper": "wrapper"}, "dtypes": [dtype], "shapes": 1, "seeds": 2, "timing": False,
            "device": "cpu", "runtime_checks": {"triton_decoy": False}}  # torch stand-ins launch no Triton kernel
    return pyrun.run_python(task)


def test_a_class_redraws_floating_inputs_alone_deterministically_in_place_of_layout():
    x = torch.randn(4, 6).t()  # a transposed view: the class keeps its strides
    idx = torch.arange(4)
    a, i = values.apply("shifted", [x, idx], "float16", 3)
    assert a.stride() == x.stride() and a.dtype == x.dtype and i is idx
    assert float(a.double().mean()) > 500 and torch.equal(a, values.apply("shifted", [x, idx], "float16", 3)[0])
    assert float(values.apply("shifted", [x], "float32", 3)[0].mean()) < 200  # 1e2 of the spread at float32
    assert values.schedule(None, "float32") == [n for n in values.GENERIC if n != "near_max"]
    assert "near_max" in values.schedule(None, "bfloat16") and values.schedule((), "float16") == []


def test_a_naive_softmax_is_caught_on_large_logits_and_its_twin_passes_every_class():
    bad = _python(NAIVE_SOFTMAX, "softmax")
    assert bad["reason"] == "incorrect" and "on large values" in bad["detail"]
    good = _python(SOFTMAX, "softmax")
    assert good["status"] == "ok" and {"normal", "large", "shifted"} <= set(good["value_classes"])


def test_a_one_pass_variance_is_caught_on_rows_with_a_large_mean_at_each_dtype():
    for dtype in ("float32", "float16"):
        bad = _python(ONE_PASS, "layer_norm", dtype)
        assert bad["reason"] == "incorrect" and "on shifted values" in bad["detail"], bad
        assert _python(LAYER_NORM, "layer_norm", dtype)["status"] == "ok"


def test_a_declared_domain_limits_the_classes_and_ill_posed_ones_fall_back():
    assert _python(NAIVE_SOFTMAX, "softmax", binding={"values": []})["status"] == "ok"  # N(0, 1) only
    # log of inputs moved below zero is NaN in float64 too: that class never runs, its trials keep the own draw
    out = _python("import torch\n\n\ndef wrapper(x):\n    return torch.log(x)\n", "log",
                  binding={"values": ["shifted_neg"]})
    assert out["status"] == "ok" and out["value_classes"] == ["normal"]
    assert out["value_classes_ill_posed"] == ["shifted_neg"]


def test_the_classes_each_op_of_a_record_ran_add_up_in_the_payload():
    from sftbuild.trial import loop
    from tests.validate.test_trial_loop import Fake

    class Ran(Fake):
        def __init__(self, ran):
            super().__init__(("a",))
            self.ran = ran

        def summary(self):
            return {"value_classes": self.ran}

    out = loop.run([Ran(["large", "normal"]), Ran(["normal", "shifted"])], TrialTask("t", "triton", "", seeds=1))
    assert out["value_classes"] == ["large", "normal", "shifted"]
