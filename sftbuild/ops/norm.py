"""Normalisation: layer, RMS, group and batch norm, forward and backward, plus residual fusions."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from sftbuild.ops import Tolerance
from sftbuild.ops.pools import ALL_LAYOUTS, ROW_POOL, TORCH_DTYPES, define, rand

EPS = {"eps": 1e-5}
NORM_TOL = Tolerance(scale=2.0)
# x [N, C, L]; shapes with L == 1 double as channels-last [N*HW, C] inputs
BN_POOL = [(1, 1, 1), (2, 3, 5), (4, 7, 33), (8, 64, 100), (3, 17, 1000), (32, 3, 257), (2, 256, 7),
           (64, 7, 1), (1000, 33, 1), (4099, 5, 1)]
GN_POOL = [(1, 2, 1), (2, 8, 33), (1, 4, 1000), (3, 32, 7), (2, 6, 4099)]


def _acc(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _stats(x, eps):
    """Per-channel mean and inverse std of x [N, C, L] over N and L, in the accumulation type."""
    xa = x.to(_acc(x))
    mean = xa.mean((0, 2))
    var = xa.var((0, 2), unbiased=False)
    return mean, torch.rsqrt(var + eps)


def _rows_w(shape, dtype, layout, gen, params, bias=True, residual=False):
    out = [rand(shape, dtype, layout, gen, 2.0, 0.5)]
    if residual:
        out.append(rand(shape, dtype, "contiguous", gen))
    out.append(rand(shape[-1:], dtype, "contiguous", gen, 0.5, 1.0))
    if bias:
        out.append(rand(shape[-1:], dtype, "contiguous", gen, 0.5))
    return out


def _layer_norm(x, w, b, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], w, b, eps)


def _rms_norm(x, w, eps=1e-5):
    xa = x.to(_acc(x))
    return (xa * torch.rsqrt(xa.pow(2).mean(-1, keepdim=True) + eps) * w.to(xa.dtype)).to(x.dtype)


define("layer_norm", "norm", "layer normalisation over the last dim with weight and bias: (x - mean) / sqrt(var + eps) * w + b",
       "沿最后一维做LayerNorm（带weight与bias）：(x - mean) / sqrt(var + eps) * w + b",
       _layer_norm, _rows_w, ROW_POOL,
       {"inputs": ["x: [rows, cols]", "w: [cols]", "b: [cols]"], "outputs": ["y: [rows, cols]"]}, "tensors",
       layouts=ALL_LAYOUTS, params=dict(EPS), tolerance=NORM_TOL)
define("rms_norm", "norm", "RMS normalisation over the last dim: x / sqrt(mean(x^2) + eps) * w",
       "沿最后一维做RMSNorm：x / sqrt(mean(x^2) + eps) * w",
       _rms_norm, lambda s, d, l, g, p: _rows_w(s, d, l, g, p, bias=False), ROW_POOL,
       {"inputs": ["x: [rows, cols]", "w: [cols]"], "outputs": ["y: [rows, cols]"]}, "tensors",
       layouts=ALL_LAYOUTS, params=dict(EPS), tolerance=NORM_TOL)
define("add_rms_norm", "fused", "a residual add fused with RMS norm: rms_norm(x + r) * w over the last dim",
       "残差相加与RMSNorm融合：沿最后一维计算rms_norm(x + r) * w",
       lambda x, r, w, eps=1e-5: _rms_norm(x + r, w, eps),
       lambda s, d, l, g, p: _rows_w(s, d, l, g, p, bias=False, residual=True), ROW_POOL,
       {"inputs": ["x: [rows, cols]", "r: [rows, cols]", "w: [cols]"], "outputs": ["y: [rows, cols]"]},
       "tensors", layouts=ALL_LAYOUTS, params=dict(EPS), tolerance=NORM_TOL)
define("add_layer_norm", "fused", "a residual add fused with layer norm: layer_norm(x + r) * w + b over the last dim",
       "残差相加与LayerNorm融合：沿最后一维计算layer_norm(x + r) * w + b",
       lambda x, r, w, b, eps=1e-5: _layer_norm(x + r, w, b, eps),
       lambda s, d, l, g, p: _rows_w(s, d, l, g, p, residual=True), ROW_POOL,
       {"inputs": ["x: [rows, cols]", "r: [rows, cols]", "w: [cols]", "b: [cols]"], "outputs": ["y: [rows, cols]"]},
       "tensors", layouts=ALL_LAYOUTS, params=dict(EPS), tolerance=NORM_TOL)


def _ln_backward(dy, x, w, eps=1e-5):
    acc = _acc(x)
    xa, dya, wa = x.to(acc), dy.to(acc), w.to(acc)
    mean = xa.mean(-1, keepdim=True)
    rstd = torch.rsqrt(xa.var(-1, unbiased=False, keepdim=True) + eps)
    xhat = (xa - mean) * rstd
    g = dya * wa
    dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dya * xhat).sum(0).to(w.dtype), dya.sum(0).to(w.dtype)


def _rms_backward(dy, x, w, eps=1e-5):
    acc = _acc(x)
    xa, dya, wa = x.to(acc), dy.to(acc), w.to(acc)
    rstd = torch.rsqrt(xa.pow(2).mean(-1, keepdim=True) + eps)
    g = dya * wa
    dx = rstd * g - xa * rstd.pow(3) * (g * xa).mean(-1, keepdim=True)
    return dx.to(x.dtype)


def _grad_rows(shape, dtype, layout, gen, params):
    return [rand(shape, dtype, "contiguous", gen), rand(shape, dtype, layout, gen, 2.0, 0.5),
            rand(shape[-1:], dtype, "contiguous", gen, 0.5, 1.0)]


define("layer_norm_backward", "norm",
       "the layer-norm backward pass: dx, dw and db from dy, x and w (statistics recomputed over the last dim)",
       "LayerNorm反向：由dy、x和w计算dx、dw与db（沿最后一维重新计算统计量）",
       _ln_backward, _grad_rows, ROW_POOL,
       {"inputs": ["dy: [rows, cols]", "x: [rows, cols]", "w: [cols]"],
        "outputs": ["dx: [rows, cols]", "dw: [cols]", "db: [cols]"]}, "tensors",
       layouts=ALL_LAYOUTS, params=dict(EPS), outputs=3, tolerance=Tolerance(scale=4.0))
define("rms_norm_backward", "norm", "the RMS-norm backward pass: dx from dy, x and w over the last dim",
       "RMSNorm反向：沿最后一维由dy、x和w计算dx",
       _rms_backward, _grad_rows, ROW_POOL,
       {"inputs": ["dy: [rows, cols]", "x: [rows, cols]", "w: [cols]"], "outputs": ["dx: [rows, cols]"]},
       "tensors", layouts=ALL_LAYOUTS, params=dict(EPS), tolerance=Tolerance(scale=4.0))


def group_norm_ref(x, w, b, groups=2, eps=1e-5):
    """Group norm from its formula: per sample and group of C / groups channels (all their positions),
    (x - mean) / sqrt(var + eps) with the biased variance, then per-channel w and b; in float32 for
    half inputs. A group of one value normalises to 0 (F.group_norm refuses it as a training batch)."""
    acc = _acc(x)
    n, c = x.shape[:2]
    xg = x.to(acc).reshape(n, groups, -1)
    mean = xg.mean(-1, keepdim=True)
    var = xg.var(-1, unbiased=False, keepdim=True)
    y = ((xg - mean) / torch.sqrt(var + eps)).reshape(x.shape)
    extra = (1,) * (x.dim() - 2)
    return (y * w.to(acc).reshape(c, *extra) + b.to(acc).reshape(c, *extra)).to(x.dtype)


define("group_norm", "norm", "group normalisation of x [N, C, L] over `groups` channel groups, with per-channel weight and bias",
       "对x [N, C, L]按groups个通道组做GroupNorm，带逐通道weight与bias",
       group_norm_ref,
       lambda s, d, l, g, p: [rand(s, d, l, g, 2.0, 0.5), rand(s[1:2], d, "contiguous", g, 0.5, 1.0),
                              rand(s[1:2], d, "contiguous", g, 0.5)],
       GN_POOL, {"inputs": ["x: [N, C, L]", "w: [C]", "b: [C]"], "outputs": ["y: [N, C, L]"]}, "tensors",
       layouts=ALL_LAYOUTS, params={"groups": 2, "eps": 1e-5}, tolerance=NORM_TOL)


def _bn_inputs(shape, dtype, layout, gen, params):
    c = shape[1]
    return [rand(shape, dtype, layout, gen, 2.0, 0.5), rand((c,), dtype, "contiguous", gen, 0.3),
            torch.rand(c, generator=gen).to(TORCH_DTYPES[dtype]) + 0.5,
            rand((c,), dtype, "contiguous", gen, 0.5, 1.0), rand((c,), dtype, "contiguous", gen, 0.5)]


define("batch_norm", "norm",
       "batch normalisation in inference mode: (x - running_mean) / sqrt(running_var + eps) * w + b per channel of x [N, C, L]",
       "推理模式的BatchNorm：对x [N, C, L]的每个通道计算(x - running_mean) / sqrt(running_var + eps) * w + b",
       lambda x, m, v, w, b, eps=1e-5: F.batch_norm(x, m, v, w, b, False, 0.0, eps), _bn_inputs, BN_POOL,
       {"inputs": ["x: [N, C, L]", "running_mean: [C]", "running_var: [C]", "w: [C]", "b: [C]"],
        "outputs": ["y: [N, C, L]"]}, "tensors", layouts=ALL_LAYOUTS, params=dict(EPS), tolerance=NORM_TOL)


def _bn_train_inputs(shape, dtype, layout, gen, params):
    x, _, _, w, b = _bn_inputs(shape, dtype, layout, gen, params)
    return [x, w, b]


define("batch_norm_train", "norm",
       "batch normalisation in training mode: normalise each channel of x [N, C, L] by its batch mean and biased variance, then w and b",
       "训练模式的BatchNorm：用批内均值与有偏方差归一化x [N, C, L]的每个通道，再乘w加b",
       lambda x, w, b, eps=1e-5: F.batch_norm(x, None, None, w, b, True, 0.0, eps), _bn_train_inputs, BN_POOL,
       {"inputs": ["x: [N, C, L]", "w: [C]", "b: [C]"], "outputs": ["y: [N, C, L]"]}, "tensors",
       layouts=ALL_LAYOUTS, params=dict(EPS), tolerance=NORM_TOL)
define("batch_norm_stats", "norm",
       "per-channel batch statistics of x [N, C, L]: the mean and 1 / sqrt(biased var + eps), in float32 for half inputs",
       "计算x [N, C, L]逐通道的批统计量：均值与1 / sqrt(有偏方差 + eps)，半精度输入时以float32输出",
       lambda x, eps=1e-5: _stats(x, eps),
       lambda s, d, l, g, p: [rand(s, d, l, g, 2.0, 0.5)], BN_POOL,
       {"inputs": ["x: [N, C, L]"], "outputs": ["mean: [C] float32", "invstd: [C] float32"]}, "tensors",
       layouts=ALL_LAYOUTS, params=dict(EPS), outputs=2, tolerance=NORM_TOL)


# counts come in the kernel's element dtype (ATen's accessor is scalar_t) and ATen's kernel adds them up in it
# (`n + count` with an integer n and a c10::BFloat16 count is a BFloat16 sum): past the dtype's last exact
# integer (bf16 256, fp16 2048) the running count rounds, and the mean and invstd drift from any exact
# combination by percents. So the counts of a trial add up to at most that integer, and no trial has more
# groups than it.
def exact_integers(dtype: str) -> int:
    """The largest n such that every integer up to n is exact in the floating dtype (2^(mantissa + 1))."""
    return round(2 / torch.finfo(TORCH_DTYPES[dtype]).eps)  # eps = 2^-mantissa


GATHER_MAX_GROUPS = exact_integers("bfloat16")  # 256: one count of 1 per group still adds up exactly in bf16


def _gather_inputs(shape, dtype, layout, gen, params):
    groups, c = shape
    most = max(1, min(49, exact_integers(dtype) // max(1, groups)))  # the total stays exact in the dtype
    counts = torch.randint(1, most + 1, (groups,), generator=gen).to(TORCH_DTYPES[dtype])
    return [torch.randn(groups, c, generator=gen), torch.rand(groups, c, generator=gen) + 0.5, counts]


def _gather_stats(mean, invstd, counts, eps=1e-5):
    acc = mean.dtype
    n = counts.to(acc)[:, None]
    var = 1.0 / invstd.pow(2) - eps
    total = n.sum(0)
    m = (mean * n).sum(0) / total
    v = ((var + (mean - m).pow(2)) * n).sum(0) / total
    return m, torch.rsqrt(v + eps)


define("batch_norm_gather_stats", "norm",
       "per-channel mean and invstd combined from per-group batch-norm statistics (mean, invstd, element count)",
       "将多组BatchNorm统计量（均值、invstd、元素个数）合并为逐通道的均值与invstd",
       _gather_stats, _gather_inputs, [(1, 1), (2, 3), (4, 64), (8, 1000), (3, 4099)],
       {"inputs": ["mean: [G, C] float32", "invstd: [G, C] float32", "counts: [G]"],
        "outputs": ["mean: [C] float32", "invstd: [C] float32"]}, "tensors",
       params=dict(EPS), outputs=2, tolerance=NORM_TOL, constraints={"max_dims": {0: GATHER_MAX_GROUPS}})


def _bn_bwd_inputs(shape, dtype, layout, gen, params):
    x = rand(shape, dtype, layout, gen, 2.0, 0.5)
    mean, invstd = _stats(x, params.get("eps", 1e-5))
    return [x, rand(shape, dtype, "contiguous", gen), mean, invstd,
            rand(shape[1:2], dtype, "contiguous", gen, 0.5, 1.0)]


def _bn_backward_reduce(x, dy, mean, invstd, w):
    acc = mean.dtype
    xa, dya = x.to(acc), dy.to(acc)
    sum_dy = dya.sum((0, 2))
    sum_dy_xmu = (dya * (xa - mean[None, :, None])).sum((0, 2))
    return sum_dy, sum_dy_xmu, (sum_dy_xmu * invstd).to(w.dtype), sum_dy.to(w.dtype)


def _bn_backward(x, dy, mean, invstd, w):
    acc = mean.dtype
    xa, dya = x.to(acc), dy.to(acc)
    n = x.shape[0] * x.shape[2]
    sum_dy, sum_dy_xmu, gw, gb = _bn_backward_reduce(x, dy, mean, invstd, w)
    c = lambda t: t[None, :, None]  # noqa: E731
    dx = (dya - c(sum_dy) / n - (xa - c(mean)) * c(invstd).pow(2) * c(sum_dy_xmu) / n) * c(invstd * w.to(acc))
    return dx.to(x.dtype), gw, gb


BN_GRAD_IN = ["x: [N, C, L]", "dy: [N, C, L]", "mean: [C] float32", "invstd: [C] float32", "w: [C]"]
define("batch_norm_backward", "norm",
       "the training-mode batch-norm backward pass: dx, dw and db from x, dy, the saved mean and invstd, and w",
       "训练模式BatchNorm反向：由x、dy、保存的均值与invstd以及w计算dx、dw与db",
       _bn_backward, _bn_bwd_inputs, BN_POOL,
       {"inputs": BN_GRAD_IN, "outputs": ["dx: [N, C, L]", "dw: [C]", "db: [C]"]}, "tensors",
       layouts=ALL_LAYOUTS, outputs=3, tolerance=Tolerance(scale=4.0))
define("batch_norm_backward_reduce", "norm",
       "the reduction half of batch-norm backward: per-channel sum(dy), sum(dy * (x - mean)), dw and db",
       "BatchNorm反向的归约部分：逐通道计算sum(dy)、sum(dy * (x - mean))、dw与db",
       _bn_backward_reduce, _bn_bwd_inputs, BN_POOL,
       {"inputs": BN_GRAD_IN, "outputs": ["sum_dy: [C] float32", "sum_dy_xmu: [C] float32", "dw: [C]", "db: [C]"]},
       "tensors", layouts=ALL_LAYOUTS, outputs=4, tolerance=Tolerance(scale=4.0))
def _bn_elemt_inputs(shape, dtype, layout, gen, params):
    x, dy, mean, invstd, w = _bn_bwd_inputs(shape, dtype, layout, gen, params)
    sum_dy, sum_dy_xmu, _, _ = _bn_backward_reduce(x, dy, mean, invstd, w)
    return [x, dy, mean, invstd, w, sum_dy, sum_dy_xmu]


def _bn_elemt(x, dy, mean, invstd, w, sum_dy, sum_dy_xmu):
    acc = mean.dtype
    n = x.shape[0] * x.shape[2]
    c = lambda t: t.to(acc)[None, :, None]  # noqa: E731
    dx = (dy.to(acc) - c(sum_dy) / n - (x.to(acc) - c(mean)) * c(invstd).pow(2) * c(sum_dy_xmu) / n) \
        * c(invstd) * c(w)
    return dx.to(x.dtype)


define("batch_norm_backward_elemt", "norm",
       "the elementwise half of batch-norm backward: dx from dy, x, mean, invstd, w and the per-channel sums of dy and dy * (x - mean)",
       "BatchNorm反向的逐元素部分：由dy、x、均值、invstd、w以及逐通道的sum(dy)与sum(dy * (x - mean))计算dx",
       _bn_elemt, _bn_elemt_inputs, BN_POOL,
       {"inputs": BN_GRAD_IN + ["sum_dy: [C] float32", "sum_dy_xmu: [C] float32"], "outputs": ["dx: [N, C, L]"]},
       "tensors", layouts=ALL_LAYOUTS, tolerance=Tolerance(scale=4.0))


def _apply_inputs(shape, dtype, layout, gen, params):
    x, _, _, w, b = _bn_inputs(shape, dtype, layout, gen, params)
    mean, invstd = _stats(x, params.get("eps", 1e-5))
    return [x, mean, invstd, w, b]


define("batch_norm_apply", "norm",
       "apply given batch statistics: (x - mean) * invstd * w + b per channel of x [N, C, L] (training-mode forward)",
       "应用给定的批统计量：对x [N, C, L]的每个通道计算(x - mean) * invstd * w + b（训练模式前向）",
       lambda x, mean, invstd, w, b: ((x.to(mean.dtype) - mean[None, :, None]) * invstd[None, :, None]
                                      * w.to(mean.dtype)[None, :, None] + b.to(mean.dtype)[None, :, None]).to(x.dtype),
       _apply_inputs, BN_POOL,
       {"inputs": ["x: [N, C, L]", "mean: [C] float32", "invstd: [C] float32", "w: [C]", "b: [C]"],
        "outputs": ["y: [N, C, L]"]}, "tensors", layouts=ALL_LAYOUTS, tolerance=NORM_TOL)
