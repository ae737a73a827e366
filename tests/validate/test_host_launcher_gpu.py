"""A raw-pointer host launcher bound by probing and validated ok on the GPU; its broken twin dropped.

The launchers are our own code, shaped like llm.c's: `layernorm_forward(out, mean, rstd, inp, weight,
bias, B, T, C)` writes mean and rstd beside `out`, and takes `inp` without const."""
from __future__ import annotations

import pytest

from tests.conftest import HAS_GPU, HAS_NVCC
from tests.validate.twins import validate_twins

LAUNCHER = r"""#include <cuda_runtime.h>
#define CEIL_DIV(M, N) (((M) + (N) - 1) / (N))

__global__ void rows_norm_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const float* x = inp + row * C;
    float m = 0.0f;
    for (int i = 0; i < C; i++) m += x[i];
    m = m / C;
    float v = 0.0f;
    for (int i = 0; i < C; i++) { float d = x[i] - m; v += d * d; }
    float s = 1.0f / sqrtf(v / C + 1e-5f);
    float* o = out + row * C;
    for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * weight[i]BIAS;
    mean[row] = m;
    rstd[row] = s;
}

void layernorm_forward(float* out, float* mean, float* rstd, float* inp, float* weight, float* bias,
                       int B, int T, int C) {
    const int N = B * T;
    rows_norm_kernel<<<CEIL_DIV(N, 128), 128>>>(out, mean, rstd, inp, weight, bias, N, C);
}
"""


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_GPU and HAS_NVCC), reason="needs a CUDA GPU and nvcc")
def test_a_probed_launcher_validates_ok_and_its_broken_twin_is_dropped(make_ctx, tmp_path):
    good, broken = tmp_path / "good", tmp_path / "broken"
    for repo, bias in ((good, " + bias[i]"), (broken, "")):  # the twin forgets the bias
        repo.mkdir()
        (repo / "layernorm.cu").write_text(LAUNCHER.replace("BIAS", bias))
    ok, twin, results = validate_twins(make_ctx(), good, broken)
    assert ok.binding and ok.binding.by == "host_launcher" and ok.binding.op == "layer_norm", ok.unbound
    assert len(ok.binding.evidence["shapes"]) >= 3
    assert results[ok.id]["status"] == "ok", results[ok.id]
    assert twin.binding is None and "no shortlisted op matched" in (twin.unbound or ""), twin.unbound
    assert results[twin.id]["status"] == "dropped" and results[twin.id]["reason"] == "unbound"
