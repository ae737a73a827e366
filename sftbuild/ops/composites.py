"""Composites that fused kernels commonly implement: gated activations, rotary embedding, losses,
offset norms, masked and variable-length attention, tempered softmax and log-sum-exp.

Every op here is dropout-free and says exactly which formula it computes: the erf and the tanh
GELU are different ops, and so are half-rotation and interleaved RoPE. References compute in
float32 for half inputs (float64 when given float64) and return the input dtype, except losses
that return float32 scalars as fused loss kernels do.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from sftbuild.ops import Tolerance
from sftbuild.ops.values import LOGITS
from sftbuild.ops.pools import ALL_LAYOUTS, ROW_POOL, TORCH_DTYPES, define, rand
from sftbuild.ops.norm import group_norm_ref

NORM_TOL = Tolerance(scale=2.0)
LOSS_TOL = Tolerance(scale=4.0)
MM_TOL = Tolerance(scale=8.0)


def _acc(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


# ---- gated activations (GLU family) -------------------------------------------------------

def _two(shape, dtype, layout, gen, params):
    return [rand(shape, dtype, layout, gen, 2.0), rand(shape, dtype, "contiguous", gen, 2.0)]


def _packed(shape, dtype, layout, gen, params):
    rows, cols = shape
    return [rand((rows, 2 * cols), dtype, layout, gen, 2.0)]


def _glu(act):
    def ref(a, b):
        acc = _acc(a)
        return (act(a.to(acc)) * b.to(acc)).to(a.dtype)
    return ref


def _glu_packed(act):
    def ref(x):
        a, b = x.chunk(2, dim=-1)
        return _glu(act)(a, b)
    return ref


GELU_TANH = lambda t: F.gelu(t, approximate="tanh")  # noqa: E731
GLUS = [  # name, act, en formula, zh formula
    ("swiglu", F.silu, "silu(a) * b, with silu(a) = a * sigmoid(a)", "silu(a) * b，其中silu(a) = a * sigmoid(a)"),
    ("geglu", F.gelu, "gelu(a) * b with the exact erf GELU", "gelu(a) * b，GELU为erf精确形式"),
    ("geglu_tanh", GELU_TANH, "gelu_tanh(a) * b with the tanh-approximation GELU",
     "gelu_tanh(a) * b，GELU为tanh近似形式"),
]
PACKED = {"swiglu": "silu_and_mul", "geglu": "gelu_and_mul", "geglu_tanh": "gelu_tanh_and_mul"}
for _name, _act, _en, _zh in GLUS:
    define(_name, "fused", f"a gated linear unit, elementwise: {_en}", f"逐元素计算门控线性单元：{_zh}",
           _glu(_act), _two, ROW_POOL,
           {"inputs": ["a: [rows, cols]", "b: [rows, cols]"], "outputs": ["y: [rows, cols]"]}, "tensors",
           layouts=ALL_LAYOUTS)
    define(PACKED[_name], "fused",
           f"a gated linear unit on a packed input x = [a | b] split in halves along the last dim: {_en}",
           f"对沿最后一维拼接的输入x = [a | b]按两半拆分后计算门控线性单元：{_zh}",
           _glu_packed(_act), _packed, ROW_POOL,
           {"inputs": ["x: [rows, 2 * cols]"], "outputs": ["y: [rows, cols]"]}, "tensors", layouts=ALL_LAYOUTS)


# ---- rotary position embedding --------------------------------------------------------------

ROPE_POOL = [(1, 1, 1, 1, 8), (2, 4, 2, 17, 64), (1, 8, 8, 100, 128), (3, 2, 1, 257, 32), (1, 32, 8, 1024, 128)]
ROPE_IO = {"inputs": ["q: [B, H, S, D]", "k: [B, Hk, S, D]", "cos: [S, D / 2]", "sin: [S, D / 2]"],
           "outputs": ["q_out: [B, H, S, D]", "k_out: [B, Hk, S, D]"]}


def _rope_inputs(shape, dtype, layout, gen, params):
    b, h, hk, s, d = shape
    inv = params.get("base", 10000.0) ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
    dt = TORCH_DTYPES[dtype]
    return [rand((b, h, s, d), dtype, layout, gen), rand((b, hk, s, d), dtype, "contiguous", gen),
            ang.cos().to(dt), ang.sin().to(dt)]


def _rotate(x, cos, sin, interleaved):
    acc = _acc(x)
    xa, c, s = x.to(acc), cos.to(acc), sin.to(acc)
    if interleaved:
        x1, x2 = xa[..., 0::2], xa[..., 1::2]
        return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], -1).flatten(-2).to(x.dtype)
    x1, x2 = xa.chunk(2, -1)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).to(x.dtype)


def _rope(interleaved):
    def ref(q, k, cos, sin, base=10000.0):
        return _rotate(q, cos, sin, interleaved), _rotate(k, cos, sin, interleaved)
    return ref


define("rope", "attention",
       "rotary position embedding of q and k with half rotation (GPT-NeoX / Llama-HF style): with x1, x2 the first and "
       "second halves of the head dim, out = [x1 * cos - x2 * sin, x2 * cos + x1 * sin], cos and sin per position",
       "对q和k做半旋转式旋转位置编码（GPT-NeoX / HF Llama风格）：x1、x2为head维的前后两半，"
       "out = [x1 * cos - x2 * sin, x2 * cos + x1 * sin]，cos与sin按位置给出",
       _rope(False), _rope_inputs, ROPE_POOL, ROPE_IO, "tensors", layouts=ALL_LAYOUTS, params={"base": 10000.0},
       outputs=2)
define("rope_interleaved", "attention",
       "rotary position embedding of q and k with interleaved pairs (GPT-J / Meta Llama style): each pair "
       "(x[2i], x[2i+1]) is rotated by angle i: (x[2i] * cos - x[2i+1] * sin, x[2i+1] * cos + x[2i] * sin)",
       "对q和k做交错式旋转位置编码（GPT-J / Meta Llama风格）：每对(x[2i], x[2i+1])按第i个角度旋转为"
       "(x[2i] * cos - x[2i+1] * sin, x[2i+1] * cos + x[2i] * sin)",
       _rope(True), _rope_inputs, ROPE_POOL, ROPE_IO, "tensors", layouts=ALL_LAYOUTS, params={"base": 10000.0},
       outputs=2)


# ---- losses: cross-entropy, fused linear cross-entropy, KL divergence, JSD -------------------

CE_POOL = [(1, 7), (3, 33), (17, 1000), (64, 4099), (8, 32000), (4, 128256)]


def _targets(n, classes, gen, ignore_index):
    t = torch.randint(0, classes, (n,), generator=gen)
    if ignore_index is not None and n > 1:
        t[torch.rand(n, generator=gen) < 0.2] = ignore_index
        t[0] = min(1, classes - 1)  # at least one counted row
    return t


def _ce_inputs(shape, dtype, layout, gen, params):
    rows, classes = shape
    return [rand(shape, dtype, layout, gen, 3.0), _targets(rows, classes, gen, params.get("ignore_index"))]


def _ce(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    loss = F.cross_entropy(logits.to(_acc(logits)), target, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)
    return loss


CE_IN = ["logits: [rows, classes]", "target: [rows] int64 (ignore_index marks rows that do not count)"]
for _name, _red, _ls, _en, _zh in [
    ("cross_entropy_mean", "mean", 0.0, "the mean over rows whose target is not ignore_index (-100) of "
     "logsumexp(logits[i]) - logits[i, target[i]]", "对target不等于ignore_index（-100）的行求"
     "logsumexp(logits[i]) - logits[i, target[i]]的均值"),
    ("cross_entropy_sum", "sum", 0.0, "the sum over rows whose target is not ignore_index (-100) of "
     "logsumexp(logits[i]) - logits[i, target[i]]", "对target不等于ignore_index（-100）的行求"
     "logsumexp(logits[i]) - logits[i, target[i]]之和"),
    ("cross_entropy_ignore", "none", 0.0, "per-row cross-entropy logsumexp(logits[i]) - logits[i, target[i]], "
     "0 for rows whose target is ignore_index (-100)", "逐行交叉熵logsumexp(logits[i]) - logits[i, target[i]]，"
     "target为ignore_index（-100）的行为0"),
    ("cross_entropy_label_smoothing", "mean", 0.1, "cross-entropy with label smoothing 0.1 (the target "
     "distribution is (1 - 0.1) one-hot + 0.1 / classes), averaged over rows whose target is not ignore_index (-100)",
     "带0.1标签平滑的交叉熵（目标分布为(1 - 0.1)的one-hot加上0.1 / classes），对target不等于ignore_index（-100）的行求均值"),
]:
    define(_name, "loss", _en, _zh, _ce, _ce_inputs, CE_POOL,
           {"inputs": CE_IN, "outputs": ["loss: [rows] float32" if _red == "none" else "loss: [] float32"]},
           "tensors", layouts=ALL_LAYOUTS, tolerance=LOSS_TOL, values=LOGITS,
           params={"ignore_index": -100, "label_smoothing": _ls, "reduction": _red})

FLCE_POOL = [(2, 8, 7), (17, 64, 1000), (64, 256, 4099), (32, 512, 32000)]  # (rows, hidden, vocab)


def _flce_inputs(shape, dtype, layout, gen, params):
    n, h, v = shape
    return [rand((n, h), dtype, layout, gen), rand((v, h), dtype, "contiguous", gen, 1.0 / math.sqrt(h)),
            _targets(n, v, gen, params.get("ignore_index"))]


define("fused_linear_cross_entropy", "loss",
       "fused linear cross-entropy: logits = x @ W^T, then the mean over rows whose target is not ignore_index (-100) "
       "of logsumexp(logits[i]) - logits[i, target[i]], without keeping the logits",
       "融合线性层的交叉熵：logits = x @ W^T，再对target不等于ignore_index（-100）的行求"
       "logsumexp(logits[i]) - logits[i, target[i]]的均值，不保留logits",
       lambda x, w, target, ignore_index=-100, label_smoothing=0.0, reduction="mean":
       _ce(x.to(_acc(x)) @ w.to(_acc(x)).T, target, ignore_index, label_smoothing, reduction),
       _flce_inputs, FLCE_POOL,
       {"inputs": ["x: [rows, hidden]", "W: [vocab, hidden]", "target: [rows] int64"], "outputs": ["loss: [] float32"]},
       "tensors", layouts=ALL_LAYOUTS, tolerance=MM_TOL,
       params={"ignore_index": -100, "label_smoothing": 0.0, "reduction": "mean"})

DIST_POOL = [(1, 7), (3, 33), (17, 1000), (64, 4099), (8, 32000)]


def _logprobs(shape, dtype, layout, gen):
    """Row-wise log-probabilities in the requested layout (log_softmax itself returns contiguous rows)."""
    t = rand(shape, "float32", layout, gen, 2.0)
    return t.copy_(torch.log_softmax(t, -1)).to(TORCH_DTYPES[dtype]) if layout == "contiguous" else \
        _in_layout(torch.log_softmax(t, -1).to(TORCH_DTYPES[dtype]), layout)


def _in_layout(t, layout):
    """t's values in a non-contiguous layout like `rand` makes (transposed storage or stride-2 last dim)."""
    if layout == "transposed":
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    base = torch.zeros(*t.shape[:-1], t.shape[-1] * 2 + 1, dtype=t.dtype)
    view = base[..., 1::2]
    view.copy_(t)
    return view


def _kl_inputs(shape, dtype, layout, gen, params):
    y = _logprobs(shape, dtype, "contiguous", gen)
    return [_logprobs(shape, dtype, layout, gen), y if params.get("log_target") else y.exp()]


def _kl(x, y, reduction="batchmean", log_target=False):
    acc = _acc(x)
    return F.kl_div(x.to(acc), y.to(acc), reduction=reduction, log_target=log_target)


for _name, _red, _lt, _en, _zh in [
    ("kl_div", "batchmean", False, "KL divergence with log-space input x = log q and probabilities y = p: "
     "sum(y * (log y - x)) / rows", "输入为对数空间x = log q、目标为概率y = p的KL散度：sum(y * (log y - x)) / rows"),
    ("kl_div_log_target", "batchmean", True, "KL divergence with log-space input x = log q and log-space target "
     "y = log p: sum(exp(y) * (y - x)) / rows", "输入x = log q与目标y = log p均在对数空间的KL散度："
     "sum(exp(y) * (y - x)) / rows"),
    ("kl_div_pointwise", "none", False, "the pointwise KL-divergence terms y * (log y - x) for log-space input x and "
     "probabilities y (0 where y is 0)", "逐元素KL散度项y * (log y - x)，x在对数空间、y为概率（y为0处取0）"),
]:
    define(_name, "loss", _en, _zh, _kl, _kl_inputs, DIST_POOL,
           {"inputs": ["x: [rows, classes] log-probabilities", "y: [rows, classes]"],
            "outputs": ["loss: [rows, classes] float32" if _red == "none" else "loss: [] float32"]},
           "tensors", layouts=ALL_LAYOUTS, tolerance=LOSS_TOL, params={"reduction": _red, "log_target": _lt},
           grad_constants=(1,))  # the target distribution


def _jsd(x, y, beta=0.5):
    """Generalised JSD of log-space student x = log q and teacher y = log p, summed and divided by rows."""
    acc = _acc(x)
    xa, ya = x.to(acc), y.to(acc)
    if beta == 0.0:
        return (ya.exp() * (ya - xa)).sum() / x.shape[0]
    if beta == 1.0:
        return (xa.exp() * (xa - ya)).sum() / x.shape[0]
    p, q = ya.exp(), xa.exp()
    log_m = torch.log(beta * p + (1 - beta) * q)
    return (beta * p * (ya - log_m) + (1 - beta) * q * (xa - log_m)).sum() / x.shape[0]


define("jsd", "loss",
       "generalised Jensen-Shannon divergence of log-space inputs x = log q (student) and y = log p (teacher) with "
       "beta = 0.5: m = beta * p + (1 - beta) * q, loss = sum(beta * p * (y - log m) + (1 - beta) * q * (x - log m)) / rows",
       "对数空间输入x = log q（学生）与y = log p（教师）的广义JS散度，beta = 0.5：m = beta * p + (1 - beta) * q，"
       "loss = sum(beta * p * (y - log m) + (1 - beta) * q * (x - log m)) / rows",
       _jsd, lambda s, d, l, g, p: [_logprobs(s, d, l, g), _logprobs(s, d, "contiguous", g)], DIST_POOL,
       {"inputs": ["x: [rows, classes] log-probabilities", "y: [rows, classes] log-probabilities"],
        "outputs": ["loss: [] float32"]}, "tensors", layouts=ALL_LAYOUTS, tolerance=LOSS_TOL, params={"beta": 0.5},
       grad_constants=(1,))  # the teacher


# ---- per-chunk loss-and-gradient primitives of fused linear distillation losses ---------------------
# A fused linear loss computes, per chunk of rows, the loss and its gradient with respect to the logits
# in one pass (the gradient written over the logits): both are outputs here, the gradient being that of
# the summed loss, as autograd gives it.

def _loss_and_grad(loss_of, x, *rest):
    acc = _acc(x)
    with torch.enable_grad():
        xa = x.detach().to(acc).requires_grad_()
        loss = loss_of(xa, *[t.to(acc) if isinstance(t, torch.Tensor) else t for t in rest])
        dx, = torch.autograd.grad(loss.sum(), xa)
    return loss.detach(), dx.to(x.dtype)


def _jsd_terms(x, y, beta, n):
    p, q = y.exp(), x.exp()
    log_m = torch.log(beta * p + (1 - beta) * q)
    return (beta * p * (y - log_m) + (1 - beta) * q * (x - log_m)) / n


define("jsd_loss_and_grad", "loss",
       "the per-element generalised Jensen-Shannon divergence terms of log-space student x = log q and teacher "
       "y = log p with beta = 0.5, divided by the count of rows the caller kept (n_non_ignore = 3): m = beta * p + "
       "(1 - beta) * q, loss = (beta * p * (y - log m) + (1 - beta) * q * (x - log m)) / n_non_ignore in float32, "
       "and dx, the gradient of sum(loss) with respect to x, in x's dtype",
       "对数空间学生x = log q与教师y = log p的逐元素广义JS散度项（beta = 0.5），除以调用方保留的行数"
       "（n_non_ignore = 3）：m = beta * p + (1 - beta) * q，loss = (beta * p * (y - log m) + (1 - beta) * q * "
       "(x - log m)) / n_non_ignore，为float32；以及dx，即sum(loss)对x的梯度，与x同dtype",
       lambda x, y, beta=0.5, ignore_index=-100, n_non_ignore=3.0:
           _loss_and_grad(lambda xa, ya: _jsd_terms(xa, ya, beta, n_non_ignore), x, y),
       lambda s, d, l, g, p: [_logprobs(s, d, l, g), _logprobs(s, d, "contiguous", g)], DIST_POOL,
       {"inputs": ["x: [rows, classes] log-probabilities", "y: [rows, classes] log-probabilities"],
        "outputs": ["loss: [rows, classes] float32", "dx: [rows, classes]"]}, "tensors", layouts=ALL_LAYOUTS,
       tolerance=LOSS_TOL, params={"beta": 0.5, "ignore_index": -100, "n_non_ignore": 3.0}, outputs=2)


def _kl_rows(x, q, temperature, eps, scale):
    return (q * (torch.log(q.clamp_min(eps)) - torch.log_softmax(x / temperature, -1))).sum(-1) * scale


define("kl_loss_and_grad", "loss",
       "the per-row KL divergence KL(q || softmax(x / T)) of target probabilities q from student logits x at "
       "temperature T = 0.7, times a reduction scale the caller computed (scale = 0.5): loss[r] = scale * sum over "
       "v of q * (log max(q, eps) - log_softmax(x / T)) with eps = 1e-10, in float32, and dx, the gradient of "
       "sum(loss) with respect to x, in x's dtype",
       "目标概率q相对学生logits x（温度T = 0.7）的逐行KL散度KL(q || softmax(x / T))，乘以调用方算好的归约系数"
       "（scale = 0.5）：loss[r] = scale * 对v求和q * (log max(q, eps) - log_softmax(x / T))，eps = 1e-10，为float32；"
       "以及dx，即sum(loss)对x的梯度，与x同dtype",
       lambda x, q, ignore_index=-100, temperature=0.7, eps=1e-10, scale=0.5:
           _loss_and_grad(lambda xa, qa: _kl_rows(xa, qa, temperature, eps, scale), x, q),
       lambda s, d, l, g, p: [rand(s, d, l, g, 3.0), _logprobs(s, d, "contiguous", g).exp()], DIST_POOL,
       {"inputs": ["x: [rows, classes] logits", "q: [rows, classes] probabilities"],
        "outputs": ["loss: [rows] float32", "dx: [rows, classes]"]}, "tensors", layouts=ALL_LAYOUTS,
       tolerance=LOSS_TOL, params={"ignore_index": -100, "temperature": 0.7, "eps": 1e-10, "scale": 0.5},
       outputs=2)


# ---- norms with offsets, fused add + norm, 4-D group norm ------------------------------------

def _rows_w(shape, dtype, layout, gen, params, bias=False, residual=False):
    out = [rand(shape, dtype, layout, gen, 2.0, 0.5)]
    if residual:
        out.append(rand(shape, dtype, "contiguous", gen))
    out.append(rand(shape[-1:], dtype, "contiguous", gen, 0.5))
    if bias:
        out.append(rand(shape[-1:], dtype, "contiguous", gen, 0.5))
    return out


def _rms(x, w, eps=1e-6, offset=0.0):
    acc = _acc(x)
    xa = x.to(acc)
    return (xa * torch.rsqrt(xa.pow(2).mean(-1, keepdim=True) + eps) * (offset + w.to(acc))).to(x.dtype)


define("rms_norm_offset", "norm",
       "RMS normalisation as in the `Gemma` models, over the last dim with a unit offset on the weight: "
       "x / sqrt(mean(x^2) + eps) * (1 + w)",
       "`Gemma`模型所用的RMSNorm，weight带单位偏移：沿最后一维计算x / sqrt(mean(x^2) + eps) * (1 + w)",
       _rms, _rows_w, ROW_POOL, {"inputs": ["x: [rows, cols]", "w: [cols]"], "outputs": ["y: [rows, cols]"]},
       "tensors", layouts=ALL_LAYOUTS, params={"eps": 1e-6, "offset": 1.0}, tolerance=NORM_TOL)
define("layer_norm_offset", "norm",
       "layer normalisation over the last dim with a unit offset on the weight: (x - mean) / sqrt(var + eps) * (1 + w) + b",
       "weight带单位偏移的LayerNorm：沿最后一维计算(x - mean) / sqrt(var + eps) * (1 + w) + b",
       lambda x, w, b, eps=1e-5, offset=1.0: F.layer_norm(x.to(_acc(x)), x.shape[-1:], offset + w.to(_acc(x)),
                                                          b.to(_acc(x)), eps).to(x.dtype),
       lambda s, d, l, g, p: _rows_w(s, d, l, g, p, bias=True), ROW_POOL,
       {"inputs": ["x: [rows, cols]", "w: [cols]", "b: [cols]"], "outputs": ["y: [rows, cols]"]},
       "tensors", layouts=ALL_LAYOUTS, params={"eps": 1e-5, "offset": 1.0}, tolerance=NORM_TOL)
define("add_rms_norm_residual", "fused",
       "a residual add fused with RMS norm that also returns the sum (vLLM's fused_add_rms_norm): "
       "h = x + r, y = h / sqrt(mean(h^2) + eps) * w over the last dim; outputs y and h",
       "残差相加与RMSNorm融合并返回相加结果（同vLLM的fused_add_rms_norm）：h = x + r，"
       "沿最后一维y = h / sqrt(mean(h^2) + eps) * w；输出y与h",
       lambda x, r, w, eps=1e-6: (_rms(x + r, w, eps), x + r),
       lambda s, d, l, g, p: _rows_w(s, d, l, g, p, residual=True), ROW_POOL,
       {"inputs": ["x: [rows, cols]", "r: [rows, cols]", "w: [cols]"],
        "outputs": ["y: [rows, cols]", "h: [rows, cols]"]},
       "tensors", layouts=ALL_LAYOUTS, params={"eps": 1e-6}, outputs=2, tolerance=NORM_TOL)

GN4_POOL = [(1, 64, 2, 3), (2, 64, 7, 7), (1, 128, 16, 16), (4, 32, 33, 5), (2, 320, 32, 32)]  # [N, C, H, W]
define("group_norm_4d", "norm",
       "group normalisation of an image batch x [N, C, H, W] over 32 channel groups (statistics over each group's "
       "channels and all pixels), then per-channel weight and bias",
       "对图像批x [N, C, H, W]按32个通道组做GroupNorm（统计量取自每组通道的全部像素），再乘逐通道weight加bias",
       lambda x, w, b, groups=32, eps=1e-5: group_norm_ref(x, w, b, groups, eps),
       lambda s, d, l, g, p: [rand(s, d, l, g, 2.0, 0.5), rand(s[1:2], d, "contiguous", g, 0.5, 1.0),
                              rand(s[1:2], d, "contiguous", g, 0.5)],
       GN4_POOL, {"inputs": ["x: [N, C, H, W]", "w: [C]", "b: [C]"], "outputs": ["y: [N, C, H, W]"]}, "tensors",
       layouts=ALL_LAYOUTS, params={"groups": 32, "eps": 1e-5}, tolerance=NORM_TOL)


# ---- softmax with temperature, log-sum-exp ---------------------------------------------------

define("softmax_temperature", "softmax",
       "softmax over the last dim of logits divided by a temperature: softmax(x / T) with T = 0.7",
       "对除以温度的logits沿最后一维做softmax：softmax(x / T)，T = 0.7",
       lambda x, temperature=0.7: torch.softmax(x.to(_acc(x)) / temperature, -1).to(x.dtype),
       lambda s, d, l, g, p: [rand(s, d, l, g, 3.0)], ROW_POOL,
       {"inputs": ["x: [rows, cols]"], "outputs": ["y: [rows, cols]"]}, "tensors", layouts=ALL_LAYOUTS,
       params={"temperature": 0.7})
define("logsumexp", "reduction",
       "the log-sum-exp of each row, computed stably: m + log(sum(exp(x - m))) with m the row maximum",
       "数值稳定地计算每行的log-sum-exp：m + log(sum(exp(x - m)))，m为该行最大值",
       lambda x: torch.logsumexp(x.to(_acc(x)), -1).to(x.dtype),
       lambda s, d, l, g, p: [rand(s, d, l, g, 3.0)], ROW_POOL,
       {"inputs": ["x: [rows, cols]"], "outputs": ["y: [rows]"]}, "tensors", layouts=ALL_LAYOUTS,
       tolerance=Tolerance(scale=2.0), values=LOGITS)


# ---- attention: masked, grouped-query, variable length ---------------------------------------

def _attend(q, k, v, mask=None, causal=False, scale=None):
    """softmax(q k^T * scale [masked]) v over the last two dims; k and v heads repeat for grouped queries."""
    acc = _acc(q)
    if k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
    s = q.to(acc) @ k.to(acc).transpose(-1, -2) * (scale or 1.0 / math.sqrt(q.shape[-1]))
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return (torch.softmax(s, -1) @ v.to(acc)).to(q.dtype)


ATT_POOL = [(1, 1, 1, 1, 8), (2, 4, 2, 17, 32), (1, 8, 8, 100, 64), (2, 8, 2, 257, 64), (1, 4, 1, 33, 128)]


def _gqa_inputs(shape, dtype, layout, gen, params, masked=False):
    b, h, hk, s, d = shape
    out = [rand((b, h, s, d), dtype, layout, gen), rand((b, hk, s, d), dtype, "contiguous", gen),
           rand((b, hk, s, d), dtype, "contiguous", gen)]
    if masked:
        mask = torch.rand(b, 1, s, s, generator=gen) < 0.7
        mask[..., 0] = True  # every query attends to at least one key
        out.append(mask)
    return out


define("sdpa_masked", "attention",
       "scaled dot-product attention with a boolean mask (true = attend): softmax(q k^T / sqrt(D) with masked-out "
       "scores set to -inf) v; the mask [B, 1, S, S] is shared by the heads, and k, v may have fewer heads (grouped "
       "queries: head h reads k/v head h // (H / Hk))",
       "带布尔掩码（true表示参与注意力）的缩放点积注意力：softmax(q k^T / sqrt(D)，被屏蔽的分数置为-inf) v；"
       "掩码[B, 1, S, S]在各head间共享，k、v的head数可以更少（分组查询：第h个head读取第h // (H / Hk)个k/v head）",
       lambda q, k, v, mask: _attend(q, k, v, mask=mask), lambda *a: _gqa_inputs(*a, masked=True), ATT_POOL,
       {"inputs": ["q: [B, H, S, D]", "k: [B, Hk, S, D]", "v: [B, Hk, S, D]", "mask: [B, 1, S, S] bool"],
        "outputs": ["o: [B, H, S, D]"]}, "tensors", layouts=ALL_LAYOUTS, tolerance=MM_TOL)
define("sdpa_gqa_causal", "attention",
       "causal grouped-query attention: softmax(q k^T / sqrt(D)) v where query i attends to keys j <= i and query head "
       "h reads k/v head h // (H / Hk)",
       "因果分组查询注意力：softmax(q k^T / sqrt(D)) v，第i个query只关注j <= i的key，第h个query head读取"
       "第h // (H / Hk)个k/v head",
       lambda q, k, v: _attend(q, k, v, causal=True), _gqa_inputs, ATT_POOL,
       {"inputs": ["q: [B, H, S, D]", "k: [B, Hk, S, D]", "v: [B, Hk, S, D]"], "outputs": ["o: [B, H, S, D]"]},
       "tensors", layouts=ALL_LAYOUTS, tolerance=MM_TOL)

VARLEN_POOL = [(1, 1, 1, 8), (3, 2, 2, 32), (4, 8, 2, 64), (2, 4, 4, 128), (7, 4, 1, 64)]  # (seqs, H, Hk, D)


def _varlen_inputs(shape, dtype, layout, gen, params):
    n, h, hk, d = shape
    lens = torch.randint(1, 200, (n,), generator=gen)
    cu = torch.zeros(n + 1, dtype=torch.int32)
    cu[1:] = lens.cumsum(0)
    total = int(cu[-1])
    return [rand((total, h, d), dtype, layout, gen), rand((total, hk, d), dtype, "contiguous", gen),
            rand((total, hk, d), dtype, "contiguous", gen), cu]


def _varlen(q, k, v, cu_seqlens, causal=False):
    out = torch.empty_like(q)
    bounds = cu_seqlens.tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        sl = slice(a, b)
        out[sl] = _attend(q[sl].transpose(0, 1), k[sl].transpose(0, 1), v[sl].transpose(0, 1),
                          causal=causal).transpose(0, 1)
    return out


VARLEN_IO = {"inputs": ["q: [total, H, D]", "k: [total, Hk, D]", "v: [total, Hk, D]",
                        "cu_seqlens: [seqs + 1] int32 (sequence i spans rows cu_seqlens[i]:cu_seqlens[i + 1])"],
             "outputs": ["o: [total, H, D]"]}
define("attention_varlen", "attention",
       "variable-length (packed) attention: each sequence, rows cu_seqlens[i] to cu_seqlens[i + 1] of q, k and v, "
       "attends only within itself: softmax(q k^T / sqrt(D)) v, grouped-query heads allowed",
       "变长（打包）注意力：每个序列（q、k、v中cu_seqlens[i]到cu_seqlens[i + 1]的行）只在自身内部做"
       "softmax(q k^T / sqrt(D)) v，允许分组查询head",
       lambda q, k, v, cu: _varlen(q, k, v, cu), _varlen_inputs, VARLEN_POOL, VARLEN_IO, "tensors",
       layouts=ALL_LAYOUTS, tolerance=MM_TOL)
define("attention_varlen_causal", "attention",
       "causal variable-length (packed) attention: within each sequence cu_seqlens[i]:cu_seqlens[i + 1], query "
       "position t attends to key positions <= t: softmax(q k^T / sqrt(D)) v, grouped-query heads allowed",
       "因果变长（打包）注意力：在每个序列cu_seqlens[i]:cu_seqlens[i + 1]内，第t个query只关注位置<= t的key："
       "softmax(q k^T / sqrt(D)) v，允许分组查询head",
       lambda q, k, v, cu: _varlen(q, k, v, cu, causal=True), _varlen_inputs, VARLEN_POOL, VARLEN_IO, "tensors",
       layouts=ALL_LAYOUTS, tolerance=MM_TOL)


# ---- backward passes of the gated activations and RoPE (what fused training kernels also ship) ----

def _vjp(forward, n_grads: int):
    """A backward reference: (dy, *xs) -> the gradients of forward(*xs) w.r.t. its first n_grads inputs,
    by autograd in float32 for half inputs (float64 when given float64), returned in the inputs' dtype."""
    def ref(dy, *xs, **params):
        acc = _acc(xs[0])
        with torch.enable_grad():
            leaves = [x.detach().to(acc).requires_grad_(i < n_grads) for i, x in enumerate(xs)]
            grads = torch.autograd.grad(forward(*leaves, **params), leaves[:n_grads], dy.to(acc))
        return tuple(g.detach().to(x.dtype) for g, x in zip(grads, xs))
    return ref


def _three(shape, dtype, layout, gen, params):
    return [rand(shape, dtype, "contiguous", gen), rand(shape, dtype, layout, gen, 2.0),
            rand(shape, dtype, "contiguous", gen, 2.0)]


GLU_BWD = [  # name, act, en, zh
    ("swiglu_backward", F.silu, "y = silu(a) * b", "y = silu(a) * b"),
    ("geglu_backward", F.gelu, "y = gelu(a) * b with the exact erf GELU", "y = gelu(a) * b（erf精确GELU）"),
    ("geglu_tanh_backward", GELU_TANH, "y = gelu_tanh(a) * b with the tanh-approximation GELU",
     "y = gelu_tanh(a) * b（tanh近似GELU）"),
]
for _name, _act, _en, _zh in GLU_BWD:
    define(_name, "fused",
           f"the backward pass of the gated unit {_en}: from dy, a and b, da = dy * b * act'(a) and db = dy * act(a)",
           f"门控单元{_zh}的反向：由dy、a和b计算da = dy * b * act'(a)与db = dy * act(a)",
           _vjp(lambda a, b, act=_act: act(a) * b, 2), _three, ROW_POOL,
           {"inputs": ["dy: [rows, cols]", "a: [rows, cols]", "b: [rows, cols]"],
            "outputs": ["da: [rows, cols]", "db: [rows, cols]"]}, "tensors", layouts=ALL_LAYOUTS, outputs=2,
           tolerance=Tolerance(scale=2.0))


def _rope_bwd(interleaved):
    def ref(dq, dk, cos, sin, base=10000.0):
        # the transpose of a rotation is the rotation by the opposite angle
        return _rotate(dq, cos, -sin, interleaved), _rotate(dk, cos, -sin, interleaved)
    return ref


ROPE_BWD_IO = {"inputs": ["dq_out: [B, H, S, D]", "dk_out: [B, Hk, S, D]", "cos: [S, D / 2]", "sin: [S, D / 2]"],
               "outputs": ["dq: [B, H, S, D]", "dk: [B, Hk, S, D]"]}
for _name, _inter, _en, _zh in [("rope_backward", False, "half-rotation", "半旋转式"),
                                ("rope_interleaved_backward", True, "interleaved", "交错式")]:
    define(_name, "attention",
           f"the backward pass of {_en} rotary position embedding: dq and dk are dq_out and dk_out rotated by the "
           f"opposite angle (sin negated)",
           f"{_zh}旋转位置编码的反向：dq与dk为dq_out与dk_out按相反角度旋转（sin取负）",
           _rope_bwd(_inter), _rope_inputs, ROPE_POOL, ROPE_BWD_IO, "tensors", layouts=ALL_LAYOUTS,
           params={"base": 10000.0}, outputs=2)
