"""Reductions over any dimension, softmax variants, scans, sorting and selection, cross-entropy."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from sftbuild.ops import Tolerance
from sftbuild.ops.values import LOGITS
from sftbuild.ops.pools import ALL_LAYOUTS, CUBE_POOL, ROW_POOL, TORCH_DTYPES, define, rand, rowwise

DIM_PARAMS = {"dim": -1}
REDUCED = {"inputs": ["x: [d0, d1, d2]"], "outputs": ["y: x's shape with dim `dim` reduced to 1"]}


def _cube(shape, dtype, layout, gen, params):
    return [rand(shape, dtype, layout, gen, 2.0)]


def reduction(name, en, zh, ref, tol=None, io=REDUCED):
    # keepdim outputs let a launch contract recover the reduced dim from the shapes alone
    return define(name, "reduction", en, zh, ref, _cube, CUBE_POOL, io, "tensors",
                  layouts=ALL_LAYOUTS, params=dict(DIM_PARAMS), tolerance=tol or Tolerance())


reduction("sum", "the sum over dimension `dim` (kept as size 1)", "沿维度dim求和（保留该维，大小为1）",
          lambda x, dim=-1: x.sum(dim, keepdim=True), tol=Tolerance(scale=2.0))
reduction("mean", "the mean over dimension `dim` (kept as size 1)", "沿维度dim求均值（保留该维，大小为1）",
          lambda x, dim=-1: x.mean(dim, keepdim=True), tol=Tolerance(scale=2.0))
reduction("amax", "the maximum over dimension `dim` (kept as size 1)", "沿维度dim求最大值（保留该维，大小为1）",
          lambda x, dim=-1: x.amax(dim, keepdim=True))
reduction("amin", "the minimum over dimension `dim` (kept as size 1)", "沿维度dim求最小值（保留该维，大小为1）",
          lambda x, dim=-1: x.amin(dim, keepdim=True))
reduction("argmax", "the int64 index of the first maximum over dimension `dim` (kept as size 1)",
          "沿维度dim求第一个最大值的int64下标（保留该维，大小为1）",
          lambda x, dim=-1: x.argmax(dim, keepdim=True), tol=Tolerance(exact=True),
          io={"inputs": REDUCED["inputs"], "outputs": ["idx: int64, x's shape with dim reduced to 1"]})
reduction("argmin", "the int64 index of the first minimum over dimension `dim` (kept as size 1)",
          "沿维度dim求第一个最小值的int64下标（保留该维，大小为1）",
          lambda x, dim=-1: x.argmin(dim, keepdim=True), tol=Tolerance(exact=True),
          io={"inputs": REDUCED["inputs"], "outputs": ["idx: int64, x's shape with dim reduced to 1"]})
reduction("norm2", "the Euclidean norm over dimension `dim` (kept as size 1)", "沿维度dim求L2范数（保留该维，大小为1）",
          lambda x, dim=-1: torch.linalg.vector_norm(x, 2, dim, keepdim=True), tol=Tolerance(scale=2.0))

define("row_sum", "reduction", "the sum of each row of a 2-D tensor, kept as a column", "对二维张量逐行求和（结果为一列）",
       lambda x, dim=-1: x.sum(-1, keepdim=True),
       lambda shape, dtype, layout, gen, params: [rand(shape, dtype, layout, gen, 2.0)], ROW_POOL,
       {"inputs": ["x: [rows, cols]"], "outputs": ["y: [rows, 1]"]}, "rowwise", layouts=ALL_LAYOUTS,
       params=dict(DIM_PARAMS), tolerance=Tolerance(scale=2.0))

# ---- softmax family ---------------------------------------------------------------

rowwise("softmax", "softmax",
        "softmax over the last dimension of a 2-D tensor",
        "对二维张量的最后一维做softmax",
        lambda x, dim=-1: torch.softmax(x, dim=dim), params={"dim": -1}, values=LOGITS)
rowwise("log_softmax", "softmax",
        "log-softmax over the last dimension of a 2-D tensor",
        "对二维张量的最后一维做log-softmax",
        lambda x, dim=-1: torch.log_softmax(x, dim=dim), params={"dim": -1}, values=LOGITS)
define("softmax_dim", "softmax", "softmax over dimension `dim` of a 3-D tensor", "对三维张量沿维度dim做softmax",
       lambda x, dim=-1: torch.softmax(x, dim), _cube, CUBE_POOL,
       {"inputs": ["x: [d0, d1, d2]"], "outputs": ["y: [d0, d1, d2]"]}, "tensors", layouts=ALL_LAYOUTS,
       params=dict(DIM_PARAMS))


def _softmax_grad_inputs(log):
    def inputs(shape, dtype, layout, gen, params):
        y = torch.randn(*shape, generator=gen) * 3.0
        y = torch.log_softmax(y, -1) if log else torch.softmax(y, -1)
        return [rand(shape, dtype, layout, gen), y.to(TORCH_DTYPES[dtype])]
    return inputs


define("softmax_backward", "softmax",
       "the softmax gradient over the last dim: dx = y * (dy - sum(dy * y)), from dy and the softmax output y",
       "softmax沿最后一维的反向：由dy与softmax输出y计算dx = y * (dy - sum(dy * y))",
       lambda dy, y: y * (dy - (dy * y).sum(-1, keepdim=True)), _softmax_grad_inputs(False), ROW_POOL,
       {"inputs": ["dy: [rows, cols]", "y: [rows, cols]"], "outputs": ["dx: [rows, cols]"]}, "rowwise_backward",
       layouts=ALL_LAYOUTS, tolerance=Tolerance(scale=2.0))
define("log_softmax_backward", "softmax",
       "the log-softmax gradient over the last dim: dx = dy - exp(y) * sum(dy), from dy and the output y",
       "log-softmax沿最后一维的反向：由dy与输出y计算dx = dy - exp(y) * sum(dy)",
       lambda dy, y: dy - torch.exp(y) * dy.sum(-1, keepdim=True), _softmax_grad_inputs(True), ROW_POOL,
       {"inputs": ["dy: [rows, cols]", "y: [rows, cols]"], "outputs": ["dx: [rows, cols]"]}, "rowwise_backward",
       layouts=ALL_LAYOUTS, tolerance=Tolerance(scale=2.0))


def _masked_inputs(shape, dtype, layout, gen, params):
    mask = torch.rand(*shape, generator=gen) < 0.3
    mask[..., 0] = False  # every row keeps one element, so no row is all -inf
    return [rand(shape, dtype, layout, gen, 3.0), mask]


define("masked_softmax", "softmax",
       "softmax over the last dim where masked elements (mask true) are excluded and get probability 0",
       "对最后一维做带掩码的softmax：mask为真的位置被排除，其概率为0",
       lambda x, mask: torch.softmax(x.masked_fill(mask, float("-inf")), -1), _masked_inputs, ROW_POOL,
       {"inputs": ["x: [rows, cols]", "mask: [rows, cols] bool"], "outputs": ["y: [rows, cols]"]},
       "tensors", layouts=ALL_LAYOUTS)
define("causal_softmax", "softmax",
       "causal softmax of attention scores: position j > i in row i is masked out before the softmax",
       "对注意力分数做因果softmax：第i行中j > i的位置在softmax前被屏蔽",
       lambda x: torch.softmax(x.masked_fill(torch.ones(x.shape[-2:], dtype=torch.bool, device=x.device)
                                             .triu(1), float("-inf")), -1),
       lambda shape, dtype, layout, gen, params: [rand(shape, dtype, layout, gen, 3.0)],
       [(1, 1, 1), (2, 7, 7), (3, 33, 33), (1, 100, 100), (4, 257, 257), (1, 1024, 1024)],
       {"inputs": ["x: [batch, seq, seq]"], "outputs": ["y: [batch, seq, seq]"]}, "tensors",
       layouts=ALL_LAYOUTS)
define("cross_entropy", "loss",
       "per-row cross-entropy: loss[i] = logsumexp(logits[i]) - logits[i, target[i]]",
       "逐行计算交叉熵：loss[i] = logsumexp(logits[i]) - logits[i, target[i]]",
       lambda logits, target: F.cross_entropy(logits, target, reduction="none"),
       lambda shape, dtype, layout, gen, params: [rand(shape, dtype, layout, gen, 3.0),
                                                  torch.randint(0, shape[1], (shape[0],), generator=gen)],
       ROW_POOL, {"inputs": ["logits: [rows, classes]", "target: [rows] int64"], "outputs": ["loss: [rows]"]},
       "tensors", layouts=ALL_LAYOUTS, tolerance=Tolerance(scale=2.0))

# ---- scans --------------------------------------------------------------------------

SCANNED = {"inputs": ["x: [d0, d1, d2]"], "outputs": ["y: [d0, d1, d2]"]}
WITH_IDX = {"inputs": ["x: [d0, d1, d2]"], "outputs": ["values: [d0, d1, d2]", "indices: [d0, d1, d2] int64"]}
SCAN_POOL = [s for s in CUBE_POOL if s[1] * s[2] <= 40000] + [(3, 4097, 1)]


def scan(name, en, zh, ref, io=SCANNED, outputs=1, tol=None, scale=1.0):
    return define(name, "scan", en, zh, ref,
                  lambda shape, dtype, layout, gen, params: [rand(shape, dtype, layout, gen, scale)],
                  SCAN_POOL, io, "tensors", layouts=ALL_LAYOUTS, params=dict(DIM_PARAMS), outputs=outputs,
                  tolerance=tol or Tolerance())


scan("cumsum", "the inclusive prefix sum along dimension `dim`", "沿维度dim计算包含式前缀和",
     lambda x, dim=-1: torch.cumsum(x, dim), tol=Tolerance(scale=4.0))
scan("cumprod", "the inclusive prefix product along dimension `dim` (inputs near 1)",
     "沿维度dim计算包含式前缀积（输入接近1）",
     lambda x, dim=-1: torch.cumprod(x, dim), tol=Tolerance(scale=4.0), scale=0.001)
scan("logcumsumexp", "the running log-sum-exp along dimension `dim`", "沿维度dim计算累积log-sum-exp",
     lambda x, dim=-1: torch.logcumsumexp(x, dim), tol=Tolerance(scale=2.0))
scan("cummax", "the running maximum along `dim` with the int64 index where it was attained",
     "沿维度dim计算累积最大值及其取得位置的int64下标",
     lambda x, dim=-1: tuple(torch.cummax(x, dim)), io=WITH_IDX, outputs=2)
scan("cummin", "the running minimum along `dim` with the int64 index where it was attained",
     "沿维度dim计算累积最小值及其取得位置的int64下标",
     lambda x, dim=-1: tuple(torch.cummin(x, dim)), io=WITH_IDX, outputs=2)

# ---- sorting and selection --------------------------------------------------------------

SORT_POOL = [(1, 1), (1, 7), (3, 33), (17, 100), (64, 257), (7, 1024), (31, 512), (2, 4099), (1000, 31)]


def _distinct_rows(shape, dtype, layout, gen, params):
    # distinct values per row keep the index outputs well defined
    rows, cols = shape
    keys = torch.stack([torch.randperm(cols, generator=gen) for _ in range(rows)]) if rows * cols else \
        torch.zeros(shape)
    x = (keys.double() - cols / 2) / max(cols / 64, 1)
    if layout == "transposed":
        return [x.t().contiguous().to(TORCH_DTYPES[dtype]).t()]
    if layout == "sliced":
        return [torch.cat([x, x], 1).to(TORCH_DTYPES[dtype])[:, ::2]]
    return [x.to(TORCH_DTYPES[dtype])]


def select(name, en, zh, ref, io, outputs=2, params=None, pool=SORT_POOL):
    return define(name, "sort", en, zh, ref, _distinct_rows, pool, io, "tensors", layouts=ALL_LAYOUTS,
                  outputs=outputs, params=params or {}, tolerance=Tolerance(exact=True))


select("sort", "an ascending sort of each row, returning the values and their int64 source indices",
       "对每一行升序排序，返回排序后的值及其原位置的int64下标",
       lambda x, descending=False: tuple(torch.sort(x, dim=-1, descending=descending, stable=True)),
       {"inputs": ["x: [rows, cols]"], "outputs": ["values: [rows, cols]", "indices: [rows, cols] int64"]},
       params={"descending": False})
select("argsort", "the int64 indices that sort each row in ascending order", "返回使每一行升序排列的int64下标",
       lambda x: torch.argsort(x, dim=-1, stable=True),
       {"inputs": ["x: [rows, cols]"], "outputs": ["indices: [rows, cols] int64"]}, outputs=1)
select("topk", "the k largest values of each row in descending order with their int64 indices",
       "求每一行最大的k个值（降序）及其int64下标",
       lambda x, k=8: tuple(torch.topk(x, min(k, x.shape[-1]), -1)),
       {"inputs": ["x: [rows, cols]"], "outputs": ["values: [rows, min(k, cols)]", "indices: [rows, min(k, cols)] int64"]},
       params={"k": 8})


def _mode_inputs(shape, dtype, layout, gen, params):
    x = torch.randint(0, 9, (shape[0], shape[1] * 2 + 1), generator=gen).to(TORCH_DTYPES[dtype])
    return [x[:, 1::2] if layout == "sliced" else x[:, : shape[1]]]


define("mode", "sort", "the most frequent value of each row (the smallest one on ties)",
       "求每一行出现次数最多的值（并列时取最小者）",
       lambda x: torch.mode(x.float(), -1).values.to(x.dtype) if x.dtype != torch.float64 else torch.mode(x, -1).values,
       _mode_inputs, SORT_POOL, {"inputs": ["x: [rows, cols] (small integers)"], "outputs": ["values: [rows]"]},
       "tensors", layouts=("contiguous", "sliced"), tolerance=Tolerance(exact=True))
