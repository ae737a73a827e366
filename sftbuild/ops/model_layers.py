"""Layers of recent model architectures that fused-kernel packages ship: dynamic tanh, poly norm,
modulated (AdaLN) RMS norm, sparsemax, squared ReLU, the total variation distance loss, GRPO's
selective log-softmax, the Hugging Face, Llama 4 and Qwen2-VL rotary embeddings, multi-token
attention with its causal zero mask, attention residuals over depth, a mixture-of-experts layer
of SwiGLU experts with precomputed routing, and the stream mixing of manifold-constrained
hyper-connections (mHC).

Each op states its exact formula, with the packages' own defaults as params (eps, reduction,
ignore_index, temperature, the M-RoPE sections). References compute in float32 for half inputs
(float64 when given float64) and return the input dtype; the loss and the log-probabilities are
float32, as the fused kernels return them. Input generators make what the layers see in a model:
probabilities for the loss, cos and sin whose two halves repeat for the rotary embeddings, a
learned scalar alpha for DyT, a completion mask for the log-probabilities.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from sftbuild.ops import Tolerance
from sftbuild.ops.composites import LOSS_TOL, MM_TOL, NORM_TOL, _acc, _in_layout, _targets
from sftbuild.ops.pools import ALL_LAYOUTS, ROW_POOL, TORCH_DTYPES, define, rand, unary, uniform


# ---- dynamic tanh, poly norm -------------------------------------------------------------------

def _dyt(x, alpha, gamma, beta):
    acc = _acc(x)
    return (gamma.to(acc) * torch.tanh(alpha.to(acc) * x.to(acc)) + beta.to(acc)).to(x.dtype)


def _dyt_inputs(shape, dtype, layout, gen, params):
    cols = shape[-1:]
    return [rand(shape, dtype, layout, gen, 2.0), uniform((1,), dtype, gen, 0.3, 1.0),
            rand(cols, dtype, "contiguous", gen, 0.5, 1.0), rand(cols, dtype, "contiguous", gen, 0.5)]


define("dyt", "norm",
       "dynamic tanh (DyT), the normalisation-free replacement of layer norm: y = gamma * tanh(alpha * x) + beta, "
       "with alpha a learned scalar [1] and gamma, beta per channel [cols]",
       "动态tanh（DyT），替代LayerNorm的无归一化层：y = gamma * tanh(alpha * x) + beta，"
       "alpha为可学习标量[1]，gamma、beta为逐通道参数[cols]",
       _dyt, _dyt_inputs, ROW_POOL,
       {"inputs": ["x: [rows, cols]", "alpha: [1]", "gamma: [cols]", "beta: [cols]"], "outputs": ["y: [rows, cols]"]},
       "tensors", layouts=ALL_LAYOUTS, tolerance=Tolerance(scale=2.0))


def _poly_norm(x, w, b, eps=1e-6):
    acc = _acc(x)
    xa, wa = x.to(acc), w.to(acc)

    def norm(u):
        return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)
    return (wa[0] * norm(xa ** 3) + wa[1] * norm(xa ** 2) + wa[2] * norm(xa) + b.to(acc)).to(x.dtype)


def _poly_inputs(shape, dtype, layout, gen, params):
    # unit-scale activations, weights near the PolyCom initialisation (1/3 each), a 0-d bias near 1
    return [rand(shape, dtype, layout, gen), rand((3,), dtype, "contiguous", gen, 0.2, 1 / 3),
            rand((1,), dtype, "contiguous", gen, 0.2, 1.0).reshape(())]


define("poly_norm", "norm",
       "PolyNorm (PolyCom): with norm(u) = u / sqrt(mean(u^2) + eps) over the last dim, "
       "y = w[0] * norm(x^3) + w[1] * norm(x^2) + w[2] * norm(x) + b, w of size 3, b a 0-d scalar, eps = 1e-6",
       "PolyNorm（PolyCom）：记norm(u) = u / sqrt(mean(u^2) + eps)（沿最后一维），"
       "y = w[0] * norm(x^3) + w[1] * norm(x^2) + w[2] * norm(x) + b，w长度为3，b为0维标量，eps = 1e-6",
       _poly_norm, _poly_inputs, ROW_POOL,
       {"inputs": ["x: [rows, cols]", "w: [3]", "b: []"], "outputs": ["y: [rows, cols]"]},
       "tensors", layouts=ALL_LAYOUTS, params={"eps": 1e-6}, tolerance=NORM_TOL)


# ---- sparsemax ----------------------------------------------------------------------------------

def _sparsemax(x, dim=-1):
    """The Euclidean projection of each slice along `dim` onto the probability simplex."""
    acc = _acc(x)
    z = x.to(acc).movedim(dim, -1)
    zs = z.sort(-1, descending=True).values
    cssv = zs.cumsum(-1)
    k = torch.arange(1, z.shape[-1] + 1, dtype=acc, device=z.device)
    support = (1 + k * zs > cssv).sum(-1, keepdim=True)  # the support is a prefix of the sorted values
    tau = (cssv.gather(-1, support - 1) - 1) / support.to(acc)
    return (z - tau).clamp_min(0).movedim(-1, dim).to(x.dtype)


define("sparsemax", "softmax",
       "sparsemax over the last dim: the Euclidean projection of each row onto the probability simplex, "
       "y = max(x - tau, 0) with tau chosen so that each row of y sums to 1 (sort z descending, k the largest index "
       "with 1 + k * z_k > z_1 + ... + z_k, tau = (z_1 + ... + z_k - 1) / k)",
       "沿最后一维的sparsemax：每行到概率单纯形上的欧氏投影，y = max(x - tau, 0)，tau使每行之和为1"
       "（将z降序排列，k为满足1 + k * z_k > z_1 + ... + z_k的最大下标，tau = (z_1 + ... + z_k - 1) / k）",
       _sparsemax, lambda s, d, l, g, p: [rand(s, d, l, g, 3.0)], ROW_POOL,
       {"inputs": ["x: [rows, cols]"], "outputs": ["y: [rows, cols]"]}, "tensors", layouts=ALL_LAYOUTS,
       params={"dim": -1}, tolerance=Tolerance(scale=2.0))


# ---- total variation distance loss ---------------------------------------------------------------

DIST_POOL = [(1, 7), (3, 33), (17, 1000), (64, 4099), (8, 32000)]


def _probs(shape, dtype, layout, gen):
    p = torch.softmax(torch.randn(*shape, generator=gen) * 2.0, -1).to(TORCH_DTYPES[dtype])
    return p if layout == "contiguous" else _in_layout(p, layout)


def _tvd_inputs(shape, dtype, layout, gen, params):
    rows, classes = shape
    return [_probs(shape, dtype, layout, gen), _probs(shape, dtype, "contiguous", gen),
            _targets(rows, classes, gen, params.get("ignore_index"))]


def _tvd(p, q, shift_labels, reduction="batchmean", ignore_index=-100, has_label=True):
    acc = _acc(p)
    per = 0.5 * (p.to(acc) - q.to(acc)).abs()
    keep = shift_labels != ignore_index if has_label else torch.ones(p.shape[0], dtype=torch.bool, device=p.device)
    per = per * keep[:, None].to(acc)
    if reduction == "none":
        return per.to(torch.float32) if acc == torch.float32 else per
    total = per.sum()
    n = int(keep.sum())
    scale = {"sum": 1.0, "mean": 1.0 / (n * p.shape[1]), "batchmean": 1.0 / n}[reduction]
    loss = total * scale
    return loss.to(torch.float32) if acc == torch.float32 else loss


define("tvd", "loss",
       "total variation distance loss between probability rows p and q: 0.5 * |p - q| summed over classes and rows "
       "whose label (shift_labels) is not ignore_index (-100), divided by the number of those rows (batchmean)",
       "概率行p与q之间的全变差距离损失：对标签（shift_labels）不等于ignore_index（-100）的行，将0.5 * |p - q|"
       "在类别与行上求和，再除以这些行的数量（batchmean）",
       _tvd, _tvd_inputs, DIST_POOL,
       {"inputs": ["p: [rows, classes] probabilities", "q: [rows, classes] probabilities",
                   "shift_labels: [rows] int64 (rows whose label is ignore_index do not count)"],
        "outputs": ["loss: [] float32"]},
       "tensors", layouts=ALL_LAYOUTS, tolerance=LOSS_TOL,
       params={"reduction": "batchmean", "ignore_index": -100, "has_label": True},
       grad_constants=(1,))  # q, the reference distribution


def _ce_tvd_inputs(shape, dtype, layout, gen, params):
    rows, classes = shape
    return [rand(shape, dtype, layout, gen, 3.0), rand(shape, dtype, "contiguous", gen, 3.0),
            _targets(rows, classes, gen, params.get("ignore_index"))]


def _ce_tvd(student, teacher, target, ignore_index=-100):
    """Per-row cross-entropy of the student logits and total variation distance between the student's
    and the teacher's softmax; 0 for both where the target is ignore_index."""
    acc = _acc(student)
    s, t = student.to(acc), teacher.to(acc)
    keep = (target != ignore_index).to(acc)
    safe = torch.where(target == ignore_index, torch.zeros_like(target), target)
    lse = torch.logsumexp(s, -1)
    ce = (lse - s.gather(-1, safe[:, None].long())[:, 0]) * keep
    tvd = 0.5 * (torch.softmax(s, -1) - torch.softmax(t, -1)).abs().sum(-1) * keep
    out = torch.float32 if acc == torch.float32 else acc
    return ce.to(out), tvd.to(out)


define("cross_entropy_tvd", "loss",
       "per-row cross-entropy and total variation distance for distillation: ce[i] = logsumexp(s[i]) - s[i, "
       "target[i]] and tvd[i] = 0.5 * sum_v |softmax(s[i])_v - softmax(t[i])_v| for student logits s and teacher "
       "logits t, both 0 for rows whose target is ignore_index (-100); unreduced, float32",
       "用于蒸馏的逐行交叉熵与全变差距离：对学生logits s与教师logits t，ce[i] = logsumexp(s[i]) - s[i, target[i]]，"
       "tvd[i] = 0.5 * sum_v |softmax(s[i])_v - softmax(t[i])_v|；target为ignore_index（-100）的行两者均为0；"
       "不做归约，float32",
       _ce_tvd, _ce_tvd_inputs, DIST_POOL,
       {"inputs": ["student_logits: [rows, classes]", "teacher_logits: [rows, classes]",
                   "target: [rows] int64 (ignore_index marks rows that do not count)"],
        "outputs": ["ce: [rows] float32", "tvd: [rows] float32"]},
       "tensors", layouts=ALL_LAYOUTS, tolerance=LOSS_TOL, outputs=2, params={"ignore_index": -100},
       grad_constants=(1,))  # the teacher


# ---- rotary embeddings: Llama 4 (complex pairs), Qwen2-VL multimodal sections -------------------

# (B, H, Hk, S, D); the smallest has several positions, so no probe shape rotates by angle 0 alone
ROPE_POOL = [(1, 2, 1, 4, 8), (2, 4, 2, 17, 64), (1, 8, 8, 100, 128), (3, 2, 1, 257, 32), (1, 32, 8, 1024, 128)]


def _angles(positions, d, base=10000.0):
    """positions [...] -> angles [..., d / 2]: position * base^(-2i / d)."""
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    return positions.to(torch.float64)[..., None] * inv


def _llama4_inputs(shape, dtype, layout, gen, params):
    b, h, hk, s, d = shape
    ang = _angles(torch.arange(s), d, params.get("base", 500000.0))
    freqs = torch.stack([ang.cos(), ang.sin()], -1).to(TORCH_DTYPES[dtype])
    return [rand((b, s, h, d), dtype, layout, gen), rand((b, s, hk, d), dtype, "contiguous", gen), freqs]


def _complex_rotate(x, freqs_cis):
    acc = _acc(x)
    xr, xi = x.to(acc)[..., 0::2], x.to(acc)[..., 1::2]
    c, s = freqs_cis.to(acc)[..., 0][:, None, :], freqs_cis.to(acc)[..., 1][:, None, :]  # [S, 1, D / 2]
    return torch.stack([xr * c - xi * s, xr * s + xi * c], -1).flatten(-2).to(x.dtype)


define("llama4_rope", "attention",
       "Llama 4's rotary position embedding of q [B, S, H, D] and k [B, S, Hk, D]: each pair (x[2i], x[2i+1]) is the "
       "complex number x[2i] + i x[2i+1], multiplied by freqs_cis[s, i] = cos + i sin (given as real pairs "
       "[S, D / 2, 2]): out = (x[2i] * cos - x[2i+1] * sin, x[2i] * sin + x[2i+1] * cos)",
       "Llama 4的旋转位置编码，作用于q [B, S, H, D]与k [B, S, Hk, D]：每对(x[2i], x[2i+1])视为复数"
       "x[2i] + i x[2i+1]，乘以freqs_cis[s, i] = cos + i sin（以实数对[S, D / 2, 2]给出）："
       "out = (x[2i] * cos - x[2i+1] * sin, x[2i] * sin + x[2i+1] * cos)",
       lambda q, k, freqs_cis, base=500000.0: (_complex_rotate(q, freqs_cis), _complex_rotate(k, freqs_cis)),
       _llama4_inputs, ROPE_POOL,
       {"inputs": ["q: [B, S, H, D]", "k: [B, S, Hk, D]", "freqs_cis: [S, D / 2, 2] (cos, sin)"],
        "outputs": ["q_out: [B, S, H, D]", "k_out: [B, S, Hk, D]"]},
       "tensors", layouts=ALL_LAYOUTS, params={"base": 500000.0}, outputs=2)


def mrope_sections(head_dim: int) -> list[int]:
    """Qwen2-VL's split of the D / 2 frequencies into (temporal, height, width): [16, 24, 24] at D = 128,
    the same proportions at other head sizes."""
    half = head_dim // 2
    hw = 3 * half // 8
    return [half - 2 * hw, hw, hw]


def _mrope_inputs(shape, dtype, layout, gen, params):
    b, h, hk, s, d = shape
    params["mrope_section"] = mrope_sections(d)
    # temporal positions run along the sequence, height and width ones are grid coordinates
    pos = torch.stack([torch.arange(s).expand(b, s), torch.randint(0, 16, (b, s), generator=gen),
                       torch.randint(0, 16, (b, s), generator=gen)])
    ang = _angles(pos, d, params.get("base", 10000.0))
    ang = torch.cat([ang, ang], -1)  # [3, B, S, D]: the two halves repeat, as the model's embedding makes them
    dt = TORCH_DTYPES[dtype]
    return [rand((b, h, s, d), dtype, layout, gen), rand((b, hk, s, d), dtype, "contiguous", gen),
            ang.cos().to(dt), ang.sin().to(dt)]


def _mrope(q, k, cos, sin, mrope_section=(16, 24, 24), base=10000.0):
    acc = _acc(q)
    sections = list(mrope_section) * 2

    def pick(t):  # section j of the head dim takes its angles from component j % 3 (t, h, w)
        return torch.cat([c[j % 3] for j, c in enumerate(t.to(acc).split(sections, -1))], -1)[:, None]

    c, s = pick(cos), pick(sin)
    return _rotate_half(q, c, s, acc), _rotate_half(k, c, s, acc)


def _rotate_half(x, c, s, acc):
    """x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1] over the halves of the head dim."""
    xa = x.to(acc)
    x1, x2 = xa.chunk(2, -1)
    return (xa * c + torch.cat([-x2, x1], -1) * s).to(x.dtype)


define("qwen2vl_mrope", "attention",
       "Qwen2-VL's multimodal rotary position embedding (M-RoPE) of q [B, H, S, D] and k [B, Hk, S, D] with half "
       "rotation: cos and sin [3, B, S, D] hold temporal, height and width angles; the head dim is split into "
       "sections mrope_section * 2 ([16, 24, 24] twice at D = 128) and section j reads component j % 3; then "
       "out = x * cos + rotate_half(x) * sin with rotate_half(x) = [-x2, x1]",
       "Qwen2-VL的多模态旋转位置编码（M-RoPE），以半旋转方式作用于q [B, H, S, D]与k [B, Hk, S, D]："
       "cos与sin [3, B, S, D]分别存放时间、高度、宽度三组角度；head维按mrope_section * 2划分"
       "（D = 128时为两遍[16, 24, 24]），第j段取第j % 3组；再计算out = x * cos + rotate_half(x) * sin，"
       "其中rotate_half(x) = [-x2, x1]",
       _mrope, _mrope_inputs, ROPE_POOL,
       {"inputs": ["q: [B, H, S, D]", "k: [B, Hk, S, D]", "cos: [3, B, S, D]", "sin: [3, B, S, D]"],
        "outputs": ["q_out: [B, H, S, D]", "k_out: [B, Hk, S, D]"]},
       "tensors", layouts=ALL_LAYOUTS, params={"mrope_section": [16, 24, 24], "base": 10000.0}, outputs=2)


# ---- multi-token attention -----------------------------------------------------------------------

MTA_POOL = [(1, 2, 8, 2, 3), (2, 4, 17, 4, 3), (1, 8, 33, 8, 3), (2, 2, 64, 2, 5), (1, 16, 128, 16, 3)]
MTA_MASK = -1e9  # the large negative the package writes over future scores (not -inf)


def _future(n: int, device) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


def _mta_inputs(shape, dtype, layout, gen, params):
    b, c, length, c_out, k = shape
    fan_in = c * k * k
    return [rand((b, c, length, length), dtype, layout, gen, 2.0),
            rand((c_out, c, k, k), dtype, "contiguous", gen, fan_in ** -0.5), rand((c_out,), dtype, "contiguous", gen, 0.1)]


def _mta(scores, weight, bias, stride=1, padding=0, dilation=1, groups=1):
    acc = _acc(scores)
    s = scores.to(acc)
    probs = torch.softmax(s.masked_fill(_future(s.shape[-1], s.device), MTA_MASK), -1)
    out = F.conv2d(probs, weight.to(acc), bias.to(acc), stride=stride, padding=padding, dilation=dilation,
                   groups=groups)
    return out.masked_fill(_future(out.shape[-1], out.device), 0.0).to(scores.dtype)


define("multi_token_attention", "attention",
       "multi-token attention over score maps [B, C, L, L]: future scores (key j > query i) are set to -1e9, a softmax "
       "runs over the keys, a 2-D convolution mixes neighbouring queries, keys and heads (weight [C_out, C, k, k], "
       "bias [C_out], stride 1, no padding), and future positions of the result are zeroed",
       "多token注意力，作用于分数图[B, C, L, L]：未来位置（key j > query i）的分数置为-1e9，沿key做softmax，"
       "再以二维卷积混合相邻的query、key与head（weight [C_out, C, k, k]，bias [C_out]，步长1，无填充），"
       "最后将结果中的未来位置置零",
       _mta, _mta_inputs, MTA_POOL,
       {"inputs": ["scores: [B, C, L, L]", "weight: [C_out, C, k, k]", "bias: [C_out]"],
        "outputs": ["out: [B, C_out, L - k + 1, L - k + 1]"]},
       "tensors", layouts=ALL_LAYOUTS, params={"stride": 1, "padding": 0, "dilation": 1, "groups": 1},
       tolerance=MM_TOL)

MASK_POOL = [(1, 1, 1, 1), (1, 1, 7, 7), (2, 3, 17, 17), (4, 8, 33, 33), (2, 16, 128, 128), (1, 4, 1000, 1000)]
define("causal_mask_zero", "attention",
       "the causal zero mask of square maps x [B, C, L, L]: y[..., i, j] = x[..., i, j] where j <= i and 0 where "
       "j > i (the lower triangle, diagonal included, is kept)",
       "方阵x [B, C, L, L]的因果置零掩码：j <= i处y[..., i, j] = x[..., i, j]，j > i处为0（保留含对角线的下三角）",
       lambda x: x.masked_fill(_future(x.shape[-1], x.device), 0),
       lambda s, d, l, g, p: [rand(s, d, l, g, 2.0)], MASK_POOL,
       {"inputs": ["x: [B, C, L, L]"], "outputs": ["y: [B, C, L, L]"]}, "tensors",
       layouts=("contiguous",))  # score maps come contiguous from the matmul that makes them


# ---- squared ReLU, Hugging Face RoPE, modulated RMS norm, selective log-softmax ------------------

unary("relu_squared", "the squared ReLU (Primer), elementwise: y = max(x, 0)^2",
      "逐元素计算平方ReLU（Primer）：y = max(x, 0)^2",
      lambda x: (torch.relu(x.to(_acc(x))) ** 2).to(x.dtype), scale=2.0, tol=Tolerance(scale=2.0))


def _rope_hf_inputs(shape, dtype, layout, gen, params):
    b, h, hk, s, d = shape
    ang = _angles(torch.arange(s).expand(b, s), d, params.get("base", 10000.0))
    ang = torch.cat([ang, ang], -1)  # [B, S, D]: cat(freqs, freqs), as the model's rotary embedding returns it
    dt = TORCH_DTYPES[dtype]
    return [rand((b, h, s, d), dtype, layout, gen), rand((b, hk, s, d), dtype, "contiguous", gen),
            ang.cos().to(dt), ang.sin().to(dt)]


def _rope_hf(q, k, cos, sin, base=10000.0):
    acc = _acc(q)
    c, s = cos.to(acc)[:, None], sin.to(acc)[:, None]  # [B, 1, S, D]
    return _rotate_half(q, c, s, acc), _rotate_half(k, c, s, acc)


define("rope_hf", "attention",
       "rotary position embedding in the Hugging Face convention (apply_rotary_pos_emb): q [B, H, S, D] and k "
       "[B, Hk, S, D] with full-width cos and sin [B, S, D] (the D / 2 angles repeated twice): "
       "out = x * cos + rotate_half(x) * sin with rotate_half(x) = [-x2, x1], x1 and x2 the halves of the head dim",
       "Hugging Face约定（apply_rotary_pos_emb）的旋转位置编码：q [B, H, S, D]与k [B, Hk, S, D]，"
       "cos与sin为全宽[B, S, D]（D / 2个角度重复两遍）：out = x * cos + rotate_half(x) * sin，"
       "其中rotate_half(x) = [-x2, x1]，x1、x2为head维的前后两半",
       _rope_hf, _rope_hf_inputs, ROPE_POOL,
       {"inputs": ["q: [B, H, S, D]", "k: [B, Hk, S, D]", "cos: [B, S, D]", "sin: [B, S, D]"],
        "outputs": ["q_out: [B, H, S, D]", "k_out: [B, Hk, S, D]"]},
       "tensors", layouts=ALL_LAYOUTS, params={"base": 10000.0}, outputs=2)

MOD_POOL = [(1, 1, 8), (2, 3, 33), (2, 17, 100), (4, 64, 257), (2, 128, 1024), (1, 4, 4099)]  # (B, T, D)


def _modulated_inputs(shape, dtype, layout, gen, params):
    b, t, d = shape
    return [rand(shape, dtype, layout, gen, 2.0, 0.5), rand((d,), dtype, "contiguous", gen, 0.5, 1.0),
            rand((b, d), dtype, "contiguous", gen, 0.3), rand((b, d), dtype, "contiguous", gen, 0.3)]


def _modulated_rms(x, w, scale, shift, eps=1e-6, offset=0.0, casting_mode="llama"):
    acc = _acc(x)
    xa = x.to(acc)
    y = xa * torch.rsqrt(xa.pow(2).mean(-1, keepdim=True) + eps) * (offset + w.to(acc))
    return (y * (1 + scale.to(acc)[:, None]) + shift.to(acc)[:, None]).to(x.dtype)


define("modulated_rms_norm", "norm",
       "RMS norm with an adaptive (AdaLN) modulation per sequence: for x [B, T, D], "
       "y = x / sqrt(mean(x^2) + eps) * (offset + w) * (1 + scale[b]) + shift[b] over the last dim, "
       "scale and shift [B, D] shared along the sequence, eps = 1e-6, offset = 0",
       "带逐序列自适应调制（AdaLN）的RMSNorm：对x [B, T, D]沿最后一维计算"
       "y = x / sqrt(mean(x^2) + eps) * (offset + w) * (1 + scale[b]) + shift[b]，"
       "scale与shift为[B, D]，沿序列共享，eps = 1e-6，offset = 0",
       _modulated_rms, _modulated_inputs, MOD_POOL,
       {"inputs": ["x: [B, T, D]", "w: [D]", "scale: [B, D]", "shift: [B, D]"], "outputs": ["y: [B, T, D]"]},
       "tensors", layouts=ALL_LAYOUTS, params={"eps": 1e-6, "offset": 0.0, "casting_mode": "llama"},
       tolerance=NORM_TOL)

SLS_POOL = [(1, 1, 7), (2, 16, 100), (4, 33, 1000), (2, 64, 4099), (1, 128, 32000)]  # (B, L, V)


def _sls_inputs(shape, dtype, layout, gen, params):
    b, length, vocab = shape
    mask = (torch.rand(b, length, generator=gen) < 0.8).long()  # a completion mask: 0 marks padding
    return [rand((b, length + 1, vocab), dtype, layout, gen, 3.0),
            torch.randint(0, vocab, (b, length), generator=gen), mask]


def _selective_log_softmax(logits, input_ids, mask, temperature=0.9):
    acc = torch.float64 if logits.dtype == torch.float64 else torch.float32
    n = logits.shape[1] - 1
    logp = torch.log_softmax(logits[:, :n].to(acc) / temperature, -1)
    picked = logp.gather(-1, input_ids[:, -n:, None].long())[..., 0]
    return picked.masked_fill(mask[:, -n:] == 0, 0.0)


define("selective_log_softmax", "softmax",
       "the log-probability of the chosen tokens (GRPO's selective log-softmax): for logits [B, L + 1, V] whose last "
       "position is not used, token ids [B, L] and a completion mask [B, L], out[b, t] = "
       "log_softmax(logits[b, t] / T)[ids[b, t]] with temperature T = 0.9 where mask[b, t] != 0 and 0 where it is 0, "
       "in float32",
       "被选token的对数概率（GRPO的selective log-softmax）：logits为[B, L + 1, V]（最后一个位置不使用），"
       "token编号为[B, L]，补全掩码为[B, L]；mask[b, t] != 0处out[b, t] = log_softmax(logits[b, t] / T)[ids[b, t]]，"
       "mask为0处为0，温度T = 0.9，结果为float32",
       _selective_log_softmax, _sls_inputs, SLS_POOL,
       {"inputs": ["logits: [B, L + 1, V]", "input_ids: [B, L] int64", "mask: [B, L] int64 (0: not computed)"],
        "outputs": ["log_p: [B, L] float32"]},
       "tensors", layouts=ALL_LAYOUTS, params={"temperature": 0.9}, tolerance=LOSS_TOL)


GRPO_POOL = [(1, 3, 7), (2, 5, 33), (2, 16, 100), (4, 33, 1000), (2, 64, 4099), (1, 128, 32000)]  # (B, L, V)


def _grpo_inputs(shape, dtype, layout, gen, params):
    """Logits, then log-probabilities of the sampling policy and of the reference model near the
    current ones (so some ratios leave the clip range), token ids, one advantage per sequence and a
    completion mask."""
    b, length, vocab = shape
    logits = rand((b, length + 1, vocab), dtype, "contiguous", gen, 3.0)
    ids = torch.randint(0, vocab, (b, length), generator=gen)
    logp = torch.log_softmax(logits[:, :length].double() / params.get("temperature", 0.9), -1)
    logp = logp.gather(-1, ids[..., None])[..., 0]
    old = (logp + 0.3 * torch.randn(b, length, generator=gen, dtype=torch.float64)).to(logits.dtype)
    ref = (logp + 0.3 * torch.randn(b, length, generator=gen, dtype=torch.float64)).to(logits.dtype)
    adv = rand((b,), dtype, "contiguous", gen)
    mask = (torch.rand(b, length, generator=gen) < 0.8).long()
    return [logits, old, ref, ids, adv, mask]


def _grpo(logits, old_logp, ref_logp, completion_ids, advantages, completion_mask, temperature=0.9, beta=0.04,
          eps_low=0.2, eps_high=0.2):
    """GRPO's clipped policy loss with a KL penalty (TRL's `loss_type="grpo"`, per-token ratios)."""
    acc = _acc(logits)
    n = completion_ids.shape[1]
    logp = torch.log_softmax(logits[:, :n].to(acc) / temperature, -1)
    logp = logp.gather(-1, completion_ids[..., None].long())[..., 0]
    ratio = torch.exp(logp - old_logp.to(acc))
    adv = advantages.to(acc)[:, None]
    per = -torch.minimum(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    d = ref_logp.to(acc) - logp
    per = per + beta * (torch.exp(d) - d - 1)
    mask = completion_mask.to(acc)
    loss = ((per * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    return loss.to(torch.float32) if acc == torch.float32 else loss


define("grpo_loss", "loss",
       "GRPO's policy loss: with logp[b, t] = log_softmax(logits[b, t] / T)[ids[b, t]] (T = 0.9; the last logits "
       "position is not used), ratio = exp(logp - old_logp) and advantage A[b], per token "
       "-min(ratio * A, clamp(ratio, 1 - 0.2, 1 + 0.2) * A) + beta * (exp(ref_logp - logp) - (ref_logp - logp) - 1) "
       "with beta = 0.04, summed over each sequence's completion mask, divided by its mask count (at least 1) and "
       "averaged over sequences, in float32",
       "GRPO的策略损失：logp[b, t] = log_softmax(logits[b, t] / T)[ids[b, t]]（T = 0.9，logits最后一个位置不使用），"
       "ratio = exp(logp - old_logp)，优势为A[b]；逐token计算-min(ratio * A, clamp(ratio, 1 - 0.2, 1 + 0.2) * A) + "
       "beta * (exp(ref_logp - logp) - (ref_logp - logp) - 1)，beta = 0.04；按每个序列的补全掩码求和，除以掩码计数"
       "（至少为1），再对序列求平均，结果为float32",
       _grpo, _grpo_inputs, GRPO_POOL,
       {"inputs": ["logits: [B, L + 1, V]", "old_logp: [B, L]", "ref_logp: [B, L]", "completion_ids: [B, L] int64",
                   "advantages: [B]", "completion_mask: [B, L] int64 (0: padding)"],
        "outputs": ["loss: [] float32"]},
       "tensors", params={"temperature": 0.9, "beta": 0.04, "eps_low": 0.2, "eps_high": 0.2}, tolerance=LOSS_TOL,
       grad_constants=(1, 2, 4))  # the sampling and reference policies' log-probabilities and the advantages


# ---- attention residuals: softmax attention over depth ---------------------------------------------

ATTN_RES_POOL = [(2, 1, 3, 8), (3, 2, 5, 33), (4, 2, 17, 100), (8, 1, 64, 257), (16, 2, 32, 1024)]  # (N, B, T, D)


def _attn_res(blocks, w_query, w_norm, eps=1e-6):
    acc = _acc(blocks)
    v = blocks.to(acc)
    keys = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * w_norm.to(acc)
    alpha = torch.softmax((keys * w_query.to(acc)).sum(-1), 0)  # [N, B, T]: over the blocks
    return (alpha[..., None] * v).sum(0).to(blocks.dtype)


define("attn_res", "attention",
       "attention residuals (AttnRes): the outputs of N earlier blocks V [N, B, T, D] are mixed by softmax attention "
       "over depth with a learned query: k_i = V_i / sqrt(mean(V_i^2) + eps) * w_norm, s_i = <w_query, k_i>, "
       "alpha = softmax over i of s_i, h = sum over i of alpha_i * V_i (eps = 1e-6)",
       "注意力残差（AttnRes）：以可学习query在深度方向做softmax注意力，混合N个先前block的输出V [N, B, T, D]："
       "k_i = V_i / sqrt(mean(V_i^2) + eps) * w_norm，s_i = <w_query, k_i>，alpha为s_i沿i的softmax，"
       "h = 对i求和alpha_i * V_i（eps = 1e-6）",
       _attn_res,
       lambda s, d, l, g, p: [rand(s, d, l, g, 1.0), rand(s[-1:], d, "contiguous", g, 0.3),
                              rand(s[-1:], d, "contiguous", g, 0.3, 1.0)],
       ATTN_RES_POOL, {"inputs": ["blocks: [N, B, T, D]", "w_query: [D]", "w_norm: [D]"], "outputs": ["h: [B, T, D]"]},
       "tensors", layouts=ALL_LAYOUTS, params={"eps": 1e-6}, tolerance=NORM_TOL)


# ---- mixture of experts: routed SwiGLU experts -----------------------------------------------------

# (T tokens, H hidden, I intermediate, E experts, K experts per token). The smallest (those a probe uses)
# share H and I and K: grouped-GEMM kernels take them as constants and autotune on them, so a probe
# compiles each kernel once per dtype; the others vary them (odd widths leave ragged tiles).
MOE_POOL = [(1, 32, 32, 2, 2), (7, 32, 32, 4, 2), (33, 32, 32, 8, 2), (64, 128, 96, 8, 4), (257, 64, 64, 16, 2),
            (65, 48, 80, 4, 1)]


def _moe_inputs(shape, dtype, layout, gen, params):
    t, h, i, e, k = shape
    scores = torch.randn(t, e, generator=gen)
    top, index = scores.topk(k, -1)  # k distinct experts per token, as a router picks them
    return [rand((t, h), dtype, layout, gen, 1.0), rand((e, 2 * i, h), dtype, "contiguous", gen, h ** -0.5),
            rand((e, h, i), dtype, "contiguous", gen, i ** -0.5), index.to(torch.int32),
            torch.softmax(top, -1).to(TORCH_DTYPES[dtype])]


def _moe_swiglu(x, gate_up_proj, down_proj, top_k_index, top_k_weights):
    acc = _acc(x)
    t, k = top_k_index.shape
    inter = gate_up_proj.shape[1] // 2
    token = torch.arange(t, device=x.device).repeat_interleave(k)
    expert = top_k_index.reshape(-1).long()
    weight = top_k_weights.reshape(-1).to(acc)
    out = torch.zeros(x.shape, dtype=acc, device=x.device)
    for e in expert.unique().tolist():
        pick = expert == e
        h = x.to(acc)[token[pick]] @ gate_up_proj[e].to(acc).T  # [n, 2I]: gate, then up
        y = (F.silu(h[:, :inter]) * h[:, inter:]) @ down_proj[e].to(acc).T
        out = out.index_add(0, token[pick], y * weight[pick, None])
    return out.to(x.dtype)


define("moe_swiglu", "mlp",
       "a mixture-of-experts (MoE) layer of SwiGLU experts with precomputed routing: for token t and each of its K "
       "experts e = top_k_index[t, k] with weight top_k_weights[t, k], [g, u] = gate_up_proj[e] @ x[t] (g the first "
       "I rows, u the last I), y = down_proj[e] @ (silu(g) * u), out[t] = sum over k of top_k_weights[t, k] * y",
       "预先给定路由的SwiGLU专家混合（MoE）层：对token t及其K个专家e = top_k_index[t, k]（权重top_k_weights[t, k]），"
       "[g, u] = gate_up_proj[e] @ x[t]（g为前I行，u为后I行），y = down_proj[e] @ (silu(g) * u)，"
       "out[t] = 对k求和top_k_weights[t, k] * y",
       _moe_swiglu, _moe_inputs, MOE_POOL,
       {"inputs": ["x: [T, H]", "gate_up_proj: [E, 2 * I, H]", "down_proj: [E, H, I]", "top_k_index: [T, K] int32",
                   "top_k_weights: [T, K]"], "outputs": ["out: [T, H]"]},
       "tensors", layouts=("contiguous",), tolerance=MM_TOL)


# ---- manifold-constrained hyper-connections (mHC): mixing the residual streams ----------------------

MHC_POOL = [(1, 4, 8), (3, 4, 33), (17, 2, 100), (64, 4, 257), (129, 4, 512), (257, 2, 1000)]  # (N, HC, C)


def _mhc_pre(x, h_pre):
    return (h_pre.double()[..., None] * x.double()).sum(-2).to(_f32(x))


def _mhc_post_res(x, f_out, h_post, h_res):
    acc = torch.float64
    return (h_post.to(acc)[..., None] * f_out.to(acc)[..., None, :]
            + h_res.to(acc) @ x.to(acc)).to(_f32(x))


def _f32(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


define("mhc_pre", "mlp",
       "the pre-mixing of manifold-constrained hyper-connections (mHC): HC residual streams x [N, HC, C] are mixed "
       "into one layer input by per-token weights h_pre [N, HC]: out[n, c] = sum over s of h_pre[n, s] * x[n, s, c], "
       "in float32",
       "流形约束超连接（mHC）的前混合：以逐token权重h_pre [N, HC]将HC条残差流x [N, HC, C]混合为一个层输入："
       "out[n, c] = 对s求和h_pre[n, s] * x[n, s, c]，结果为float32",
       _mhc_pre,
       lambda s, d, l, g, p: [rand(s, d, "contiguous", g), uniform(s[:2], d, g, 0.0, 1.0)],
       MHC_POOL, {"inputs": ["x: [N, HC, C]", "h_pre: [N, HC]"], "outputs": ["out: [N, C] float32"]},
       "tensors", layouts=("contiguous",), tolerance=NORM_TOL)
define("mhc_post_res", "mlp",
       "the post and residual mixing of manifold-constrained hyper-connections (mHC): the layer output f_out [N, C] "
       "is spread over HC streams by h_post [N, HC] and the streams x [N, HC, C] are mixed by h_res [N, HC, HC]: "
       "out[n, o, c] = h_post[n, o] * f_out[n, c] + sum over i of h_res[n, o, i] * x[n, i, c], in float32",
       "流形约束超连接（mHC）的后混合与残差混合：层输出f_out [N, C]经h_post [N, HC]分配到HC条流，"
       "残差流x [N, HC, C]经h_res [N, HC, HC]混合：out[n, o, c] = h_post[n, o] * f_out[n, c] + "
       "对i求和h_res[n, o, i] * x[n, i, c]，结果为float32",
       _mhc_post_res,
       lambda s, d, l, g, p: [rand(s, d, "contiguous", g), rand((s[0], s[2]), d, "contiguous", g),
                              uniform(s[:2], d, g, 0.0, 2.0), uniform((s[0], s[1], s[1]), d, g, 0.0, 0.5)],
       MHC_POOL, {"inputs": ["x: [N, HC, C]", "f_out: [N, C]", "h_post: [N, HC]", "h_res: [N, HC, HC]"],
                  "outputs": ["out: [N, HC, C] float32"]},
       "tensors", layouts=("contiguous",), tolerance=NORM_TOL)
