"""Binding strategies: tried in order, the first answer wins, stored with how it was found and the strategy's
name as `by`."""
import pytest

from sftbuild import plugins
from sftbuild.binding import Binding
from sftbuild.bind import binders as B
from sftbuild.bind.binders import manifest
from sftbuild.plugins import PluginError
from sftbuild.record import Record

SOFTMAX_BW = ("__global__ void softmax_warp_backward(float* dx, const float* y, int rows, int cols) "
              "{ dx[0] = y[0]; }\n")
SOFTMAX_BW_PARAMS = ["float* dx", "const float* y", "int rows", "int cols"]
RELU = "__global__ void relu_kernel(float* y, const float* x, int n) { y[0] = x[0] > 0.f ? x[0] : 0.f; }\n"


def _rec(code, name, params, path="k.cu"):
    return Record(language="cuda", code=code, source="test", entry={"kernels": [name], "params": params},
                  provenance={"path": path})


def test_binders_run_in_order_and_are_listed():
    builtin = ["manifest", "file_reference", "inferred", "probed", "host_launcher"]
    assert [n for n in (b.name for b in B.BINDERS.configured({})) if n in builtin] == builtin
    listed = {name: summary for kind, name, summary in plugins.describe("binder")}
    assert set(listed) == set(B.BINDERS.names()) >= set(builtin) and all(listed.values())


def test_the_declared_table_comes_first():
    # a name and path the table declares: the table answers, though the signature reads as a row softmax
    rec = _rec(SOFTMAX_BW, "softmax_warp_backward", SOFTMAX_BW_PARAMS, "ATen/native/cuda/PersistentSoftmax.cuh")
    b = B.infer(rec)
    assert b.how == "declared" and b.by == "manifest" and b.kind == "op" and b.op == "softmax_backward"
    assert b.harness == "aten_softmax_backward"
    elsewhere = B.infer(_rec(SOFTMAX_BW, "softmax_warp_backward", SOFTMAX_BW_PARAMS, "mine/softmax.cu"))
    assert elsewhere.how == "inferred" and elsewhere.op == "softmax"


def test_signature_inference_and_selection():
    rec = _rec(RELU, "relu_kernel", ["float* y", "const float* x", "int n"])
    b = B.infer(rec)
    assert b.how == "inferred" and b.op == "relu" and b.harness == "generic_launch"
    assert b.harness_args["args"] == ["ptr:0", "ptr:1", "int:0"] and b.dtypes == ("float32",)
    only_table = B.BINDERS.configured({"inferred": False})
    assert B.infer(rec, only_table) is None
    with pytest.raises(PluginError, match=r"bind\.binders\.probe"):
        B.BINDERS.configured({"probe": {}}, "bind.binders")


def test_only_unbound_cuda_kernels_are_inferred():
    assert B.infer(Record(language="triton", code="x", source="t", entry={"kernels": ["relu_kernel"]})) is None
    assert B.infer(Record(language="cuda", code="x", source="t", entry={"kernels": []})) is None


def test_a_new_strategy_is_one_class(monkeypatch):
    @B.BINDERS.register
    class Always(B.Binder):
        """Everything is a copy (a test strategy)."""
        name = "always"
        order = 99

        def bind(self, record):
            return {"op": "transpose"}

    try:
        rec = _rec("__global__ void odd(int* p) {}\n", "odd", ["int* p"])
        b = B.infer(rec)
        assert {k: getattr(b, k) for k in ("kind", "how", "by", "op")} == {"kind": "op", "how": "inferred",
                                                                           "by": "always", "op": "transpose"}
        assert b.key == Binding.from_dict(b.to_dict()).key
    finally:
        B.BINDERS._members.pop("always")


def test_binder_files_are_what_bind_hashes():
    assert B.files() == [manifest.TABLE] and manifest.TABLE.exists()
