"""Elementwise ops: unary activations and math, binary and broadcast ops, fused epilogues."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from sftbuild.ops import Tolerance
from sftbuild.ops.values import GENERIC
from sftbuild.ops.pools import ALL_LAYOUTS, FLAT_POOL, ROW_POOL, define, rand, unary, uniform

SATURATING = ("saturating",) + GENERIC  # exp near overflow, tanh and sigmoid flat
POSITIVE = ("positive_wide",) + GENERIC  # many decades of positive inputs
PERIODIC = ("small",)  # past a few periods the argument's own rounding decides the value

unary("relu", "ReLU, max(x, 0), elementwise", "逐元素计算ReLU，即max(x, 0)", torch.relu)
unary("gelu", "GELU with the exact erf formulation, elementwise", "逐元素计算GELU（erf精确形式）",
      lambda x: F.gelu(x))
unary("gelu_tanh", "GELU with the tanh approximation, elementwise", "逐元素计算GELU（tanh近似形式）",
      lambda x: F.gelu(x, approximate="tanh"))
unary("silu", "SiLU, x * sigmoid(x), elementwise", "逐元素计算SiLU，即x * sigmoid(x)", F.silu)
unary("sigmoid", "the logistic sigmoid 1 / (1 + exp(-x)), elementwise", "逐元素计算sigmoid函数1 / (1 + exp(-x))",
      torch.sigmoid, values=SATURATING)
unary("tanh", "the hyperbolic tangent, elementwise", "逐元素计算双曲正切tanh", torch.tanh, values=SATURATING)
unary("exp", "exp(x), elementwise", "逐元素计算exp(x)", torch.exp, scale=2.0, values=SATURATING)
unary("log", "the natural logarithm of positive inputs, elementwise", "对正数输入逐元素计算自然对数",
      torch.log, lo=0.05, hi=20.0, values=POSITIVE)
unary("sqrt", "the square root of non-negative inputs, elementwise", "对非负输入逐元素计算平方根",
      torch.sqrt, lo=0.0, hi=50.0, values=POSITIVE)
unary("rsqrt", "the reciprocal square root 1 / sqrt(x) of positive inputs", "对正数输入逐元素计算1 / sqrt(x)",
      torch.rsqrt, lo=0.05, hi=50.0, values=POSITIVE)
unary("abs", "the absolute value, elementwise", "逐元素计算绝对值", torch.abs)
unary("neg", "the negation -x, elementwise", "逐元素取负", torch.neg)
unary("square", "x * x, elementwise", "逐元素计算平方x * x", torch.square)
unary("reciprocal", "1 / x for inputs away from zero", "对远离零的输入逐元素计算倒数1 / x",
      torch.reciprocal, lo=0.25, hi=8.0)
unary("softplus", "softplus, log(1 + exp(x)), elementwise", "逐元素计算softplus，即log(1 + exp(x))", F.softplus)
unary("leaky_relu", "leaky ReLU with negative slope 0.01", "逐元素计算负斜率为0.01的Leaky ReLU",
      lambda x: F.leaky_relu(x, 0.01))
unary("elu", "ELU with alpha 1, elementwise", "逐元素计算alpha为1的ELU", F.elu)
unary("hardswish", "hard-swish, x * relu6(x + 3) / 6, elementwise", "逐元素计算hard-swish，即x * relu6(x + 3) / 6",
      F.hardswish)
unary("hardsigmoid", "hard-sigmoid, relu6(x + 3) / 6, elementwise", "逐元素计算hard-sigmoid，即relu6(x + 3) / 6",
      F.hardsigmoid)
unary("mish", "Mish, x * tanh(softplus(x)), elementwise", "逐元素计算Mish，即x * tanh(softplus(x))", F.mish)
unary("sin", "sin(x), elementwise", "逐元素计算sin(x)", torch.sin, scale=2.0, values=PERIODIC)
unary("cos", "cos(x), elementwise", "逐元素计算cos(x)", torch.cos, scale=2.0, values=PERIODIC)
unary("erf", "the error function erf(x), elementwise", "逐元素计算误差函数erf(x)", torch.erf, scale=1.5)
unary("log1p", "log(1 + x) for x > -1, elementwise", "对x > -1逐元素计算log(1 + x)", torch.log1p, lo=-0.9, hi=10.0)


def _binary_inputs(shape, dtype, layout, gen, params):
    return [rand(shape, dtype, layout, gen, 2.0), rand(shape, dtype, "contiguous", gen, 2.0)]


def binary(name, en, zh, ref, inputs=_binary_inputs, tol=None):
    return define(name, "binary", en, zh, ref, inputs, FLAT_POOL,
                  {"inputs": ["a: [n]", "b: [n]"], "outputs": ["y: [n]"]}, "binary",
                  layouts=("contiguous", "sliced"), tolerance=tol or Tolerance())


binary("add", "a + b, elementwise", "逐元素计算a + b", torch.add)
binary("sub", "a - b, elementwise", "逐元素计算a - b", torch.sub)
binary("mul", "a * b, elementwise", "逐元素计算a * b", torch.mul)
binary("div", "a / b with b away from zero, elementwise", "逐元素计算a / b（b远离零）", torch.div,
       inputs=lambda shape, dtype, layout, gen, params: [rand(shape, dtype, layout, gen, 2.0),
                                                          uniform(shape, dtype, gen, 0.5, 4.0)])
binary("maximum", "max(a, b), elementwise", "逐元素取max(a, b)", torch.maximum)
binary("minimum", "min(a, b), elementwise", "逐元素取min(a, b)", torch.minimum)


def _row_vec_inputs(shape, dtype, layout, gen, params):
    return [rand(shape, dtype, layout, gen, 2.0), rand(shape[-1:], dtype, "contiguous", gen, 1.0)]


def broadcast(name, family, en, zh, ref, tol=None):
    return define(name, family, en, zh, ref, _row_vec_inputs, ROW_POOL,
                  {"inputs": ["x: [rows, cols]", "b: [cols]"], "outputs": ["y: [rows, cols]"]},
                  "tensors", layouts=ALL_LAYOUTS, tolerance=tol or Tolerance())


broadcast("add_bias", "broadcast", "x + b with the vector b broadcast over the rows of x",
          "将向量b按行广播后与x相加，即x + b", lambda x, b: x + b)
broadcast("mul_broadcast", "broadcast", "x * b with the vector b broadcast over the rows of x",
          "将向量b按行广播后与x逐元素相乘", lambda x, b: x * b)
broadcast("bias_relu", "fused", "a fused epilogue: relu(x + b) with b broadcast over rows",
          "融合epilogue：按行广播加偏置后做ReLU，即relu(x + b)", lambda x, b: torch.relu(x + b))
broadcast("bias_gelu", "fused", "a fused epilogue: gelu(x + b) (erf form) with b broadcast over rows",
          "融合epilogue：按行广播加偏置后做GELU（erf形式），即gelu(x + b)", lambda x, b: F.gelu(x + b))
broadcast("bias_silu", "fused", "a fused epilogue: silu(x + b) with b broadcast over rows",
          "融合epilogue：按行广播加偏置后做SiLU，即silu(x + b)", lambda x, b: F.silu(x + b))
define("where", "binary", "where(mask, a, b): a where the mask is true, else b",
       "按掩码选择：mask为真取a，否则取b",
       lambda m, a, b: torch.where(m, a, b),
       lambda shape, dtype, layout, gen, params: [torch.rand(*shape, generator=gen) > 0.5,
                                                  rand(shape, dtype, layout, gen), rand(shape, dtype, "contiguous", gen)],
       FLAT_POOL, {"inputs": ["mask: [n] bool", "a: [n]", "b: [n]"], "outputs": ["y: [n]"]}, "tensors",
       layouts=("contiguous", "sliced"))
define("element_mul", "broadcast", "x * g with g a scalar held in a 0-d tensor (a loss gradient scaling the logits' "
       "gradient in place, as a fused cross-entropy's backward does)",
       "x * g，g为0维张量中的标量（如融合交叉熵反向中以损失梯度原地缩放logits梯度）",
       lambda x, g: x * g,
       lambda shape, dtype, layout, gen, params: [rand(shape, dtype, layout, gen),
                                                  uniform((1,), dtype, gen, 0.25, 2.0).reshape(())],
       ROW_POOL, {"inputs": ["x: [rows, cols]", "g: [] (0-d)"], "outputs": ["y: [rows, cols]"]}, "tensors",
       layouts=ALL_LAYOUTS)
