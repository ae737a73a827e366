"""Data movement: transpose and permute, gather/scatter/embedding, im2col and friends, resampling, int8 quantisation."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from sftbuild.ops import Tolerance
from sftbuild.ops.pools import ALL_LAYOUTS, CUBE_POOL, ROW_POOL, TORCH_DTYPES, define, rand

EXACT = Tolerance(exact=True)  # pure data movement: every element must be copied bit for bit


def _x(shape, dtype, layout, gen, params):
    return [rand(shape, dtype, layout, gen)]


define("transpose", "layout", "the transpose of a 2-D tensor, written contiguously", "对二维张量做转置并连续存储",
       lambda x: x.t().contiguous(), _x, ROW_POOL, {"inputs": ["x: [rows, cols]"], "outputs": ["y: [cols, rows]"]},
       "tensors", layouts=ALL_LAYOUTS, tolerance=EXACT)
define("permute", "layout", "a permutation of the dims of a 3-D tensor by `perm`, written contiguously",
       "按perm重排三维张量的维度并连续存储",
       lambda x, perm=(0, 2, 1): x.permute(*perm).contiguous(), _x, CUBE_POOL,
       {"inputs": ["x: [d0, d1, d2]"], "outputs": ["y: [d_perm0, d_perm1, d_perm2]"]}, "tensors",
       layouts=ALL_LAYOUTS, params={"perm": (0, 2, 1)}, tolerance=EXACT)

IDX_POOL = [(1, 1, 1), (3, 33, 7), (64, 257, 100), (129, 1000, 31), (2, 16411, 5000), (4097, 5, 5)]  # (rows, cols, k)


def _gather_inputs(shape, dtype, layout, gen, params):
    rows, cols, k = shape
    return [rand((rows, cols), dtype, layout, gen), torch.randint(0, cols, (rows, k), generator=gen)]


define("gather", "indexing", "y[i, j] = x[i, idx[i, j]]: gather along the last dim by int64 indices",
       "沿最后一维按int64下标收集：y[i, j] = x[i, idx[i, j]]",
       lambda x, idx: torch.gather(x, 1, idx), _gather_inputs, IDX_POOL,
       {"inputs": ["x: [rows, cols]", "idx: [rows, k] int64"], "outputs": ["y: [rows, k]"]}, "tensors",
       layouts=ALL_LAYOUTS, tolerance=EXACT)
define("scatter_add", "indexing", "out = base, then out[i, idx[i, j]] += src[i, j] along the last dim",
       "先令out = base，再沿最后一维做out[i, idx[i, j]] += src[i, j]",
       lambda base, idx, src: base.scatter_add(1, idx, src),
       lambda s, d, l, g, p: [rand(s[:2], d, l, g), torch.randint(0, s[1], (s[0], s[2]), generator=g),
                              rand((s[0], s[2]), d, "contiguous", g)],
       IDX_POOL, {"inputs": ["base: [rows, cols]", "idx: [rows, k] int64", "src: [rows, k]"],
                  "outputs": ["out: [rows, cols]"]}, "tensors", layouts=ALL_LAYOUTS, tolerance=Tolerance(scale=2.0))
define("index_select", "indexing", "y = x[idx]: select whole rows of x by int64 indices", "按int64下标选取x的整行：y = x[idx]",
       lambda x, idx: x.index_select(0, idx),
       lambda s, d, l, g, p: [rand(s[:2], d, l, g), torch.randint(0, s[0], (s[2],), generator=g)],
       IDX_POOL, {"inputs": ["x: [rows, cols]", "idx: [k] int64"], "outputs": ["y: [k, cols]"]}, "tensors",
       layouts=ALL_LAYOUTS, tolerance=EXACT)

EMB_POOL = [(1, 1, 1), (7, 100, 33), (1000, 50257, 64), (4099, 31, 257), (33, 7, 4099)]  # (tokens, vocab, dim)
define("embedding", "indexing", "an embedding lookup: out[t] = weight[ids[t]]", "嵌入查表：out[t] = weight[ids[t]]",
       lambda weight, ids: F.embedding(ids, weight),
       lambda s, d, l, g, p: [rand(s[1:], d, l, g), torch.randint(0, s[1], (s[0],), generator=g)],
       EMB_POOL, {"inputs": ["weight: [vocab, dim]", "ids: [tokens] int64"], "outputs": ["out: [tokens, dim]"]},
       "tensors", layouts=ALL_LAYOUTS, tolerance=EXACT)
define("embedding_backward", "indexing", "the dense embedding gradient: dW[v] = sum of dout[t] over tokens t with ids[t] == v",
       "嵌入层的稠密梯度：dW[v] = 所有ids[t] == v的dout[t]之和",
       lambda dout, ids, vocab=1: torch.zeros(vocab, dout.shape[1], dtype=dout.dtype, device=dout.device).index_add(0, ids, dout),
       lambda s, d, l, g, p: [p.update(vocab=s[1]) or rand((s[0], s[2]), d, l, g),
                              torch.randint(0, s[1], (s[0],), generator=g)],
       EMB_POOL, {"inputs": ["dout: [tokens, dim]", "ids: [tokens] int64"], "outputs": ["dW: [vocab, dim]"]},
       "tensors", layouts=ALL_LAYOUTS, params={"vocab": 1}, tolerance=Tolerance(scale=2.0))

# ---- im2col family: params are the (square) kernel, padding, stride and dilation -----------------

CONV = {"kernel": 3, "pad": 1, "stride": 1, "dilation": 1}
IMG_POOL = [(1, 1, 3, 3), (2, 3, 7, 5), (1, 16, 33, 33), (3, 5, 64, 31), (1, 2, 129, 257)]  # (N, C, H, W)


def _out_len(n, k, pad, stride, dilation):
    return (n + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def _im2col(x, kernel=3, pad=1, stride=1, dilation=1):
    return F.unfold(x, kernel, dilation, pad, stride)


def _col2im(cols, height=1, width=1, kernel=3, pad=1, stride=1, dilation=1):
    return F.fold(cols, (height, width), kernel, dilation, pad, stride)


def _cols_inputs(shape, dtype, layout, gen, params):
    n, c, h, w = shape
    k, pad, st, dil = (params.get(k, v) for k, v in CONV.items())
    length = _out_len(h, k, pad, st, dil) * _out_len(w, k, pad, st, dil)
    params.update(height=h, width=w)  # the output size is not recoverable from the columns alone
    return [rand((n, c * k * k, length), dtype, layout, gen)]


define("im2col", "conv", "im2col (torch unfold) of images [N, C, H, W] for a square kernel with padding, stride and dilation",
       "对图像[N, C, H, W]做im2col（torch的unfold），方形卷积核，带padding、stride与dilation",
       _im2col, _x, IMG_POOL, {"inputs": ["x: [N, C, H, W]"], "outputs": ["cols: [N, C * k * k, H_out * W_out]"]},
       "tensors", layouts=ALL_LAYOUTS, params=dict(CONV), tolerance=EXACT)
define("col2im", "conv", "col2im (torch fold): sum the column patches back into images [N, C, H, W]",
       "col2im（torch的fold）：将列块累加回图像[N, C, H, W]",
       lambda cols, **p: _col2im(cols, **p), _cols_inputs, IMG_POOL,
       {"inputs": ["cols: [N, C * k * k, H_out * W_out]"], "outputs": ["x: [N, C, H, W]"]}, "tensors",
       layouts=ALL_LAYOUTS, params={**CONV, "height": 0, "width": 0}, tolerance=Tolerance(scale=2.0))

VOL = {"kernel": 2, "pad": 1, "stride": 1}
VOL_POOL = [(1, 1, 2, 2, 2), (2, 3, 5, 4, 3), (1, 4, 9, 17, 8), (1, 2, 16, 16, 33)]  # (N, C, D, H, W)


def _vol2col(x, kernel=2, pad=1, stride=1):
    xp = F.pad(x, (pad,) * 6)
    u = xp.unfold(2, kernel, stride).unfold(3, kernel, stride).unfold(4, kernel, stride)
    n, c, do, ho, wo = u.shape[:5]
    return u.permute(0, 1, 5, 6, 7, 2, 3, 4).reshape(n, c * kernel ** 3, do * ho * wo)


def _vol2im(cols, depth=1, height=1, width=1, kernel=2, pad=1, stride=1):
    # the adjoint of vol2col: scatter-add each column entry back to its voxel
    acc = torch.float64 if cols.dtype == torch.float64 else torch.float32
    n, ck, _ = cols.shape
    x = torch.zeros(n, ck // kernel ** 3, depth, height, width, dtype=acc, device=cols.device, requires_grad=True)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(_vol2col(x, kernel, pad, stride), x, cols.to(acc))
    return grad.to(cols.dtype)


def _vol_cols_inputs(shape, dtype, layout, gen, params):
    n, c, d, h, w = shape
    k, pad, st = (params.get(k, v) for k, v in VOL.items())
    length = _out_len(d, k, pad, st, 1) * _out_len(h, k, pad, st, 1) * _out_len(w, k, pad, st, 1)
    params.update(depth=d, height=h, width=w)
    return [rand((n, c * k ** 3, length), dtype, layout, gen)]


define("vol2col", "conv", "vol2col, the 3-D im2col of volumes [N, C, D, H, W] for a cubic kernel with padding and stride",
       "对体数据[N, C, D, H, W]做vol2col（三维im2col），立方卷积核，带padding与stride",
       _vol2col, _x, VOL_POOL, {"inputs": ["x: [N, C, D, H, W]"], "outputs": ["cols: [N, C * k^3, D_out * H_out * W_out]"]},
       "tensors", layouts=ALL_LAYOUTS, params=dict(VOL), tolerance=EXACT)
define("vol2im", "conv", "vol2im, the 3-D col2im: sum column patches back into volumes [N, C, D, H, W]",
       "vol2im（三维col2im）：将列块累加回体数据[N, C, D, H, W]",
       lambda cols, **p: _vol2im(cols, **p), _vol_cols_inputs, VOL_POOL,
       {"inputs": ["cols: [N, C * k^3, D_out * H_out * W_out]"], "outputs": ["x: [N, C, D, H, W]"]}, "tensors",
       layouts=ALL_LAYOUTS, params={**VOL, "depth": 0, "height": 0, "width": 0}, tolerance=Tolerance(scale=2.0))

# ---- resampling -------------------------------------------------------------------------------

RES_POOL = [(1, 1, 1, 1), (2, 3, 7, 5), (1, 16, 33, 33), (4, 5, 64, 31)]


def _acc_call(fn, x, *args, **kw):
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return fn(x.to(acc), *[a.to(acc) if isinstance(a, torch.Tensor) else a for a in args], **kw).to(x.dtype)


define("upsample_nearest2d", "resample", "nearest-neighbour 2x upsampling of images [N, C, H, W]",
       "对图像[N, C, H, W]做2倍最近邻上采样",
       lambda x, scale=2: _acc_call(F.interpolate, x, scale_factor=scale, mode="nearest"), _x, RES_POOL,
       {"inputs": ["x: [N, C, H, W]"], "outputs": ["y: [N, C, 2H, 2W]"]}, "tensors", layouts=ALL_LAYOUTS,
       params={"scale": 2}, tolerance=EXACT)
define("upsample_bilinear2d", "resample", "bilinear 2x upsampling of images [N, C, H, W] with align_corners=False",
       "对图像[N, C, H, W]做2倍双线性上采样（align_corners=False）",
       lambda x, scale=2: _acc_call(F.interpolate, x, scale_factor=scale, mode="bilinear", align_corners=False),
       _x, RES_POOL, {"inputs": ["x: [N, C, H, W]"], "outputs": ["y: [N, C, 2H, 2W]"]}, "tensors",
       layouts=ALL_LAYOUTS, params={"scale": 2})
define("grid_sample", "resample",
       "bilinear grid sampling of images [N, C, H, W] at grid [N, Ho, Wo, 2] in [-1, 1], zero padding, align_corners=False",
       "按采样网格grid [N, Ho, Wo, 2]（取值约[-1, 1]）对图像[N, C, H, W]做双线性采样，越界补零，align_corners=False",
       lambda x, grid: _acc_call(F.grid_sample, x, grid, mode="bilinear", padding_mode="zeros", align_corners=False),
       lambda s, d, l, g, p: [rand(s, d, l, g), ((torch.rand(s[0], s[2], s[3], 2, generator=g) * 2.2 - 1.1)
                                                   .to(TORCH_DTYPES[d]))],
       RES_POOL, {"inputs": ["x: [N, C, H, W]", "grid: [N, Ho, Wo, 2]"], "outputs": ["y: [N, C, Ho, Wo]"]},
       "tensors", layouts=ALL_LAYOUTS, tolerance=Tolerance(scale=2.0))

# ---- int8 row-wise quantisation ----------------------------------------------------------------


def _quantize(x):
    xa = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    scale = xa.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 127.0
    return torch.round(xa / scale).clamp(-127, 127).to(torch.int8), scale.squeeze(-1)


define("quantize_int8_rowwise", "quant",
       "symmetric int8 row-wise quantisation: scale = max|x| / 127 per row, q = round(x / scale) (off by one allowed)",
       "对称int8逐行量化：每行scale = max|x| / 127，q = round(x / scale)（允许相差1）",
       _quantize, lambda s, d, l, g, p: [rand(s, d, l, g, 3.0)], ROW_POOL,
       {"inputs": ["x: [rows, cols]"], "outputs": ["q: [rows, cols] int8", "scale: [rows] float32"]}, "tensors",
       layouts=ALL_LAYOUTS, outputs=2, tolerance=Tolerance(max_int_diff=1))
define("dequantize_int8_rowwise", "quant", "int8 row-wise dequantisation: y = q * scale[row]",
       "int8逐行反量化：y = q * scale[row]",
       lambda q, scale, out_dtype="float32": (q.to(scale.dtype) * scale[:, None]),
       lambda s, d, l, g, p: [torch.randint(-127, 128, s, generator=g, dtype=torch.int8),
                              (torch.rand(s[0], generator=g) * 0.1 + 1e-3).to(TORCH_DTYPES[d])],
       ROW_POOL, {"inputs": ["q: [rows, cols] int8", "scale: [rows]"], "outputs": ["y: [rows, cols]"]}, "tensors",
       layouts=("contiguous",))
