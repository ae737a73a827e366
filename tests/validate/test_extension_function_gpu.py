"""An extension function bound by probing and validated ok on the GPU; its broken twin dropped.

The function is our own (tests/data/harvest/extension/fused_rms_norm.cu): `torch::Tensor
fused_rms_norm(input, weight, eps)` with AT_DISPATCH over float, half and bfloat16, exposed by
PYBIND11_MODULE. The twin forgets the weight."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import HAS_GPU, HAS_NVCC
from tests.validate.twins import validate_twins

RMS = Path(__file__).resolve().parents[1] / "data" / "harvest" / "extension" / "fused_rms_norm.cu"


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_GPU and HAS_NVCC), reason="needs a CUDA GPU and nvcc")
def test_a_probed_extension_function_validates_ok_and_its_broken_twin_is_dropped(make_ctx, tmp_path):
    good, broken = tmp_path / "good", tmp_path / "broken"
    weighted = " * static_cast<float>(weight[i])"
    for repo, w in ((good, weighted), (broken, "")):
        repo.mkdir()
        (repo / "fused_rms_norm.cu").write_text(RMS.read_text().replace(weighted, w))
    ok, twin, results = validate_twins(make_ctx(), good, broken)
    assert ok.binding and ok.binding.by == "extension_function" and ok.binding.op == "rms_norm", ok.unbound
    ev = ok.binding.evidence
    assert len(ev["shapes"]) >= 3 and ev["dtypes"] == ["float32", "float16", "bfloat16"], ev
    assert ev["exposed"]["kind"] == "PYBIND11_MODULE" and ev["dispatch"] == "AT_DISPATCH_FLOATING_TYPES_AND2"
    assert results[ok.id]["status"] == "ok", results[ok.id]
    assert twin.binding is None and "no shortlisted op matched the extension function's outputs" in \
        (twin.unbound or ""), twin.unbound
    assert results[twin.id]["status"] == "dropped" and results[twin.id]["reason"] == "unbound"


ELSEWHERE = RMS.parents[1] / "extension_elsewhere"  # our own: the function in binding.cpp, the launcher in a .cu


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_GPU and HAS_NVCC), reason="needs a CUDA GPU and nvcc")
def test_an_extension_function_of_another_file_validates_ok_and_its_broken_twin_is_dropped(make_ctx, tmp_path):
    import shutil

    good, broken = tmp_path / "good", tmp_path / "broken"
    weighted = " * (float)w[c]"
    for repo, w in ((good, weighted), (broken, "")):
        shutil.copytree(ELSEWHERE, repo)
        kernels = repo / "norm_kernels.cu"
        kernels.write_text(kernels.read_text().replace(weighted, w))
    ctx = make_ctx()
    ctx.config.bind.binders = {"host_launcher": False}  # the raw launcher would bind first: probe the function
    ok, twin, results = validate_twins(ctx, good, broken, kernel="rms_norm_kernel")
    assert ok.binding and ok.binding.by == "extension_function" and ok.binding.op == "rms_norm", ok.unbound
    assert ok.binding.evidence["dtypes"] == ["float32", "float16"], ok.binding.evidence
    assert results[ok.id]["status"] == "ok", results[ok.id]
    assert twin.binding is None and "no shortlisted op matched the extension function's outputs" in \
        (twin.unbound or ""), twin.unbound
    assert ctx.store.binding_row(twin.id)["evidence"]["cause"] == "no_op_matched"
    assert results[twin.id]["status"] == "dropped" and results[twin.id]["reason"] == "unbound"
