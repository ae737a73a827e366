"""Matmul family, attention, depthwise causal conv1d and optimiser steps."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from sftbuild.ops import Tolerance
from sftbuild.ops.pools import ALL_LAYOUTS, FLAT_POOL, TORCH_DTYPES, define, rand

MM_POOL = [(1, 1, 1), (7, 33, 5), (64, 257, 31), (129, 1000, 17), (128, 128, 128), (1, 4099, 3),
           (1000, 31, 100), (3, 16411, 2)]  # (M, K, N)
MM_TOL = Tolerance(scale=4.0)


def _acc(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _mm_inputs(bias=False, batch=False):
    def inputs(shape, dtype, layout, gen, params):
        if batch:
            b, m, k, n = shape
            out = [rand((b, m, k), dtype, layout, gen, 0.5), rand((b, k, n), dtype, "contiguous", gen, 0.5)]
        else:
            m, k, n = shape
            out = [rand((m, k), dtype, layout, gen, 0.5), rand((k, n), dtype, "contiguous", gen, 0.5)]
        if bias:
            out.append(rand((shape[-1],), dtype, "contiguous", gen))
        return out
    return inputs


define("matmul", "matmul", "the matrix product C = A @ B", "计算矩阵乘法C = A @ B",
       torch.matmul, _mm_inputs(), MM_POOL,
       {"inputs": ["A: [M, K]", "B: [K, N]"], "outputs": ["C: [M, N]"]}, "tensors", layouts=ALL_LAYOUTS, tolerance=MM_TOL)
define("gemm_bias", "matmul", "a GEMM with a bias epilogue: C = A @ B + bias, bias broadcast over rows",
       "带偏置epilogue的GEMM：C = A @ B + bias，bias按行广播",
       lambda a, b, bias: torch.addmm(bias, a, b), _mm_inputs(bias=True), MM_POOL,
       {"inputs": ["A: [M, K]", "B: [K, N]", "bias: [N]"], "outputs": ["C: [M, N]"]}, "tensors", layouts=ALL_LAYOUTS,
       tolerance=MM_TOL)
define("gemm_bias_relu", "fused", "a GEMM with a fused bias + ReLU epilogue: C = relu(A @ B + bias)",
       "融合偏置与ReLU epilogue的GEMM：C = relu(A @ B + bias)",
       lambda a, b, bias: torch.relu(torch.addmm(bias, a, b)), _mm_inputs(bias=True), MM_POOL,
       {"inputs": ["A: [M, K]", "B: [K, N]", "bias: [N]"], "outputs": ["C: [M, N]"]}, "tensors", layouts=ALL_LAYOUTS,
       tolerance=MM_TOL)
define("bmm", "matmul", "a batched matrix product C[b] = A[b] @ B[b]", "计算批量矩阵乘法C[b] = A[b] @ B[b]",
       torch.bmm, _mm_inputs(batch=True), [(1, 1, 1, 1), (3, 7, 33, 5), (8, 64, 64, 64), (2, 129, 257, 31),
                                           (17, 16, 100, 16)],
       {"inputs": ["A: [batch, M, K]", "B: [batch, K, N]"], "outputs": ["C: [batch, M, N]"]}, "tensors",
       layouts=ALL_LAYOUTS, tolerance=MM_TOL)


def _sdpa(q, k, v, causal=False):
    acc = _acc(q)
    s = q.to(acc) @ k.to(acc).transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return (torch.softmax(s, -1) @ v.to(acc)).to(q.dtype)


SDPA_POOL = [(1, 1, 1, 8), (2, 3, 17, 32), (1, 4, 100, 64), (2, 2, 257, 16), (1, 1, 33, 128)]  # (B, H, S, D)
SDPA_IO = {"inputs": ["q: [B, H, S, D]", "k: [B, H, S, D]", "v: [B, H, S, D]"], "outputs": ["o: [B, H, S, D]"]}


def _qkv(shape, dtype, layout, gen, params):
    return [rand(shape, dtype, layout, gen), rand(shape, dtype, "contiguous", gen), rand(shape, dtype, "contiguous", gen)]


define("sdpa", "attention", "scaled dot-product attention softmax(q k^T / sqrt(D)) v, no mask",
       "计算无掩码的缩放点积注意力softmax(q k^T / sqrt(D)) v",
       _sdpa, _qkv, SDPA_POOL, SDPA_IO, "tensors", layouts=ALL_LAYOUTS, tolerance=MM_TOL)
define("sdpa_causal", "attention", "causal scaled dot-product attention: query i attends to keys j <= i",
       "计算因果缩放点积注意力：第i个query只关注j <= i的key",
       lambda q, k, v: _sdpa(q, k, v, causal=True), _qkv, SDPA_POOL, SDPA_IO, "tensors", layouts=ALL_LAYOUTS,
       tolerance=MM_TOL)


def _neighborhood(q, k, v, kernel_size=7, dilation=1):
    """Attention where query i sees key j when |j - i| <= (kernel_size // 2) * dilation and j - i is a
    multiple of dilation (the window is cut at the sequence's ends)."""
    pos = torch.arange(q.shape[-2], device=q.device)
    rel = pos[None, :] - pos[:, None]
    near = (rel.abs() <= (kernel_size // 2) * dilation) & (rel % dilation == 0)
    acc = _acc(q)
    s = q.to(acc) @ k.to(acc).transpose(-1, -2) / math.sqrt(q.shape[-1])
    return (torch.softmax(s.masked_fill(~near, float("-inf")), -1) @ v.to(acc)).to(q.dtype)


define("neighborhood_attention", "attention",
       "1-D neighborhood attention: softmax(q k^T / sqrt(D)) v where query i attends only to keys j with "
       "|j - i| <= (kernel_size // 2) * dilation and (j - i) a multiple of dilation, kernel_size = 7, dilation = 1 "
       "(the window is cut at the sequence's ends)",
       "一维邻域注意力：softmax(q k^T / sqrt(D)) v，第i个query只关注满足|j - i| <= (kernel_size // 2) * dilation且"
       "(j - i)为dilation倍数的key j，kernel_size = 7，dilation = 1（窗口在序列两端截断）",
       _neighborhood, _qkv, SDPA_POOL, SDPA_IO, "tensors", layouts=ALL_LAYOUTS, tolerance=MM_TOL,
       params={"kernel_size": 7, "dilation": 1})


def _conv1d(x, w, b, width=4):
    acc = _acc(x)
    width = w.shape[-1]
    y = F.conv1d(F.pad(x.to(acc), (width - 1, 0)), w.to(acc)[:, None, :], b.to(acc), groups=x.shape[1])
    return y.to(x.dtype)


define("conv1d_depthwise_causal", "conv",
       "a depthwise causal 1-D convolution: y[b, c, t] = bias[c] + sum_k w[c, k] * x[b, c, t - K + 1 + k], zero left padding",
       "深度可分离因果一维卷积：y[b, c, t] = bias[c] + sum_k w[c, k] * x[b, c, t - K + 1 + k]，左侧补零",
       _conv1d,
       lambda s, d, l, g, p: [rand(s, d, l, g), rand((s[1], p.get("width", 4)), d, "contiguous", g, 0.5),
                              rand((s[1],), d, "contiguous", g)],
       [(1, 1, 1), (2, 3, 7), (1, 64, 1000), (4, 33, 257), (2, 7, 4099)],
       {"inputs": ["x: [B, C, L]", "w: [C, K]", "bias: [C]"], "outputs": ["y: [B, C, L]"]}, "tensors",
       layouts=ALL_LAYOUTS, params={"width": 4}, tolerance=Tolerance(scale=2.0))


def _adam(p, g, m, v, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, step=3, decoupled=False):
    acc = _acc(p)
    pa, ga, ma, va = p.to(acc), g.to(acc), m.to(acc), v.to(acc)
    if decoupled:
        pa = pa * (1 - lr * weight_decay)
    else:
        ga = ga + weight_decay * pa
    ma = beta1 * ma + (1 - beta1) * ga
    va = beta2 * va + (1 - beta2) * ga * ga
    denom = (va / (1 - beta2 ** step)).sqrt() + eps
    pa = pa - lr / (1 - beta1 ** step) * ma / denom
    return pa.to(p.dtype), ma.to(m.dtype), va.to(v.dtype)


def _adam_inputs(shape, dtype, layout, gen, params):
    dt = TORCH_DTYPES[dtype]
    return [rand(shape, dtype, layout, gen), rand(shape, dtype, "contiguous", gen),
            rand(shape, dtype, "contiguous", gen, 0.1), (torch.rand(*shape, generator=gen) * 0.01).to(dt)]


ADAM_IO = {"inputs": ["param: [n] (updated in place)", "grad: [n]", "exp_avg: [n] (updated in place)",
                      "exp_avg_sq: [n] (updated in place)"],
           "outputs": ["param: [n]", "exp_avg: [n]", "exp_avg_sq: [n]"]}
define("adam_step", "optimizer", "one Adam step (L2 weight decay added to the gradient, bias-corrected) updating param, exp_avg and exp_avg_sq in place",
       "执行一步Adam更新（L2权重衰减加到梯度上，带偏差校正），原地更新param、exp_avg与exp_avg_sq",
       _adam, _adam_inputs, FLAT_POOL, ADAM_IO, "tensors", layouts=("contiguous",),
       params={"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "step": 3},
       outputs=3, mutates=(0, 2, 3), tolerance=Tolerance(scale=2.0))
define("adamw_step", "optimizer", "one AdamW step (decoupled weight decay, bias-corrected) updating param, exp_avg and exp_avg_sq in place",
       "执行一步AdamW更新（解耦权重衰减，带偏差校正），原地更新param、exp_avg与exp_avg_sq",
       lambda p, g, m, v, **kw: _adam(p, g, m, v, decoupled=True, **kw), _adam_inputs, FLAT_POOL, ADAM_IO,
       "tensors", layouts=("contiguous",),
       params={"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, "step": 3},
       outputs=3, mutates=(0, 2, 3), tolerance=Tolerance(scale=2.0))
