"""Red-team cases: each a cheat or bug the validator must catch, with a correct twin that must pass.

A case is a record dict (language, code, binding, entry), the reasons that count as
caught, and whether the catch is static (found on CPU without running anything).
CUDA cases are KernelBench pairs whose ModelNew embeds CUDA through load_inline;
Triton cases are wrappers bound to a registered op, runnable in the interpreter.
"""
from __future__ import annotations

import dataclasses

# ---- references (KernelBench format) ---------------------------------------------

REF_RELU = '''
import torch
import torch.nn as nn

batch_size = 16
dim = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

REF_ROWSUM = REF_RELU.replace("return torch.relu(x)", "return x.sum(dim=1)")
REF_MATMUL = '''
import torch
import torch.nn as nn

M = 256
K = 256
N = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
'''
REF_CONSTANT = REF_RELU.replace("return torch.relu(x)", "return x * 0 + 1")

# ---- CUDA through load_inline ----------------------------------------------------------

RELU_KERNEL = '''
__global__ void relu_kernel(const float* x, float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''
RELU_HOST = '''
torch::Tensor run(torch::Tensor x) {
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  long n = xc.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
'''
ROWSUM_KERNEL = '''
#define BLOCK 256
__global__ void rowsum_kernel(const float* x, float* y, int cols) {
  __shared__ float buf[BLOCK];
  const float* row = x + (long)blockIdx.x * cols;
  float acc = 0.f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) acc += row[c];
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = buf[0];
}
'''
ROWSUM_HOST = '''
torch::Tensor run(torch::Tensor x) {
  auto xc = x.contiguous();
  auto y = torch::empty({xc.size(0)}, xc.options());
  rowsum_kernel<<<xc.size(0), BLOCK>>>(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(1));
  return y;
}
'''
MATMUL_KERNEL = '''
#define TILE 16
__global__ void matmul_kernel(const float* a, const float* b, float* c, int M, int K, int N) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.f;
  for (int t = 0; t < K; t += TILE) {
    As[threadIdx.y][threadIdx.x] = (row < M && t + threadIdx.x < K) ? a[row * K + t + threadIdx.x] : 0.f;
    Bs[threadIdx.y][threadIdx.x] = (col < N && t + threadIdx.y < K) ? b[(t + threadIdx.y) * N + col] : 0.f;
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) c[row * N + col] = acc;
}
'''
MATMUL_HOST = '''
torch::Tensor run(torch::Tensor a, torch::Tensor b) {
  auto ac = a.contiguous(), bc = b.contiguous();
  int M = ac.size(0), K = ac.size(1), N = bc.size(1);
  auto c = torch::empty({M, N}, ac.options());
  dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
  matmul_kernel<<<grid, block>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), c.data_ptr<float>(), M, K, N);
  return c;
}
'''


def inline(name: str, kernel: str, host: str, args: str = "x", forward: str = "", extra: str = "") -> str:
    """A KernelBench ModelNew whose forward calls `run` from an inline CUDA extension."""
    decl = host.strip().split("{")[0].strip() + ";"
    body = forward or f"return _ext.run({args})"
    return f'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
{kernel}
{host}
"""
cpp_src = "{decl}"
_ext = load_inline(name="{name}", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["run"], verbose=False)
{extra}

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}):
        {body}
'''


def kb(code: str, reference: str) -> dict:
    return {"language": "kernelbench", "code": code, "entry": {},
            "binding": {"kind": "kernelbench", "how": "exact", "reference": reference}}


# ---- Triton wrappers bound to ops ------------------------------------------------------

TRITON_RELU = '''
import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)


def relu(x):
    xc = x.contiguous()
    y = torch.empty_like(xc)
    n = xc.numel()
    relu_kernel[(triton.cdiv(n, 1024),)](xc, y, n, BLOCK=1024)
    return y
'''
TRITON_EXP = TRITON_RELU.replace("tl.where(x > 0, x, 0.0)", "tl.exp(x.to(tl.float32)).to(x.dtype)") \
    .replace("relu", "exp_op")


# a boolean result: op_db's isinf, whose trials mix zeros, +/-inf and NaN into the input (sftbuild.ops.special)
TRITON_ISINF = '''
import torch
import triton
import triton.language as tl


@triton.jit
def isinf_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    d = x - x  # NaN exactly where x is infinite or NaN
    tl.store(y_ptr + offs, (d != d) & (x == x), mask=mask)


def isinf(x):
    xc = x.contiguous()
    y = torch.empty(xc.shape, dtype=torch.bool, device=xc.device)
    n = xc.numel()
    isinf_kernel[(triton.cdiv(n, 1024),)](xc, y, n, BLOCK=1024)
    return y
'''
# runs its kernel on the input, yet answers False everywhere: right on finite inputs only
TRITON_ISINF_ALL_FALSE = TRITON_ISINF.replace("(d != d) & (x == x)", "(x != x) & (x == x)")

# honest: keeps the compiled kernel of its first call per dtype and launches it directly after
# (`compiled[grid](...)`, as FlagGems' libentry does; all parameters in order, constexprs included)
TRITON_CACHED_LAUNCH = TRITON_RELU.replace('''def relu(x):
    xc = x.contiguous()
    y = torch.empty_like(xc)
    n = xc.numel()
    relu_kernel[(triton.cdiv(n, 1024),)](xc, y, n, BLOCK=1024)
    return y''', '''_COMPILED = {}


def relu(x):
    xc = x.contiguous()
    y = torch.empty_like(xc)
    n = xc.numel()
    grid = (triton.cdiv(n, 1024), 1, 1)
    if xc.dtype not in _COMPILED:
        _COMPILED[xc.dtype] = relu_kernel[grid[:1]](xc, y, n, BLOCK=1024)
    else:
        _COMPILED[xc.dtype][grid](xc, y, n, 1024)
    return y''')

# size-specialised: a fixed grid of 128 x 256 threads, no stride loop; right up to 32,768 elements
FIXED_GRID_HOST = RELU_HOST.replace("relu_kernel<<<(n + 255) / 256, 256>>>", "relu_kernel<<<128, 256>>>")
STRIDE_KERNEL = RELU_KERNEL.replace(
    "  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;\n  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;",
    "  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)\n"
    "    y[i] = x[i] > 0.f ? x[i] : 0.f;")
TRITON_FIXED_GRID = TRITON_RELU.replace("relu_kernel[(triton.cdiv(n, 1024),)]", "relu_kernel[(32,)]")
TRITON_STRIDE = TRITON_RELU.replace(
    "def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
    "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    mask = offs < n\n"
    "    x = tl.load(x_ptr + offs, mask=mask)\n"
    "    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)",
    "def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, PROGRAMS: tl.constexpr):\n"
    "    for start in range(tl.program_id(0) * BLOCK, n, PROGRAMS * BLOCK):\n"
    "        offs = start + tl.arange(0, BLOCK)\n"
    "        mask = offs < n\n"
    "        x = tl.load(x_ptr + offs, mask=mask)\n"
    "        tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)").replace(
    "relu_kernel[(triton.cdiv(n, 1024),)](xc, y, n, BLOCK=1024)",
    "relu_kernel[(32,)](xc, y, n, BLOCK=1024, PROGRAMS=32)")
# past an edge without changing the output: the next element times zero; one element past the input's end
OOB_READ_KERNEL = RELU_KERNEL.replace("if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;",
                                      "if (i < n) y[i] = (x[i] > 0.f ? x[i] : 0.f) + 0.f * x[i + 1];")
OOB_WRITE_KERNEL = RELU_KERNEL.replace("if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;",
                                       "if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;\n"
                                       "  if (i == n - 1) ((float*)x)[n] = 0.f;")
TRITON_OOB_READ = TRITON_RELU.replace(
    "    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)",
    "    nxt = tl.load(x_ptr + offs + 1, mask=mask)\n"
    "    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0) + 0.0 * nxt, mask=mask)")
TRITON_OOB_WRITE = TRITON_RELU.replace(
    "    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)",
    "    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)\n"
    "    tl.store(x_ptr + offs + 1, x, mask=offs == n - 1)")
OUT_OF_BOUNDS = ("out_of_bounds",)
TRITON_SOFTMAX = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, rows, cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, BLOCK)[None, :]
    mask = (r < rows) & (c < cols)
    x = tl.load(x_ptr + r * cols + c, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = e / tl.sum(e, axis=1)[:, None]
    tl.store(y_ptr + r * cols + c, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x, dim=-1):
    xc = x.contiguous()
    rows, cols = xc.shape
    y = torch.empty_like(xc)
    block = triton.next_power_of_2(cols)
    per = max(1, 2048 // block)  # several short rows per program
    softmax_kernel[(triton.cdiv(rows, per),)](xc, y, rows, cols, ROWS=per, BLOCK=block)
    return y
'''
TRITON_ROWSUM = '''
import torch
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, y_ptr, rows, cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    c = tl.arange(0, BLOCK)[None, :]
    x = tl.load(x_ptr + r[:, None] * cols + c, mask=(r[:, None] < rows) & (c < cols), other=0.0).to(tl.float32)
    tl.store(y_ptr + r, (tl.sum(x, axis=1) * SCALE).to(y_ptr.dtype.element_ty), mask=r < rows)


SCALE = tl.constexpr(1.0)  # a global a kernel reads must be a constexpr instance


def row_sum(x, dim=-1):
    xc = x.contiguous()
    rows, cols = xc.shape
    y = torch.empty((rows, 1), dtype=xc.dtype, device=xc.device)
    block = triton.next_power_of_2(cols)
    per = max(1, 2048 // block)
    row_sum_kernel[(triton.cdiv(rows, per),)](xc, y, rows, cols, ROWS=per, BLOCK=block)
    return y
'''
# a slightly wrong kernel that makes torch compute the same wrong answer, so a reference computed
# after its import agrees with it
TAMPER_SOFTMAX = TRITON_SOFTMAX.replace("y = e / tl.sum(e, axis=1)[:, None]",
                                        "y = e / tl.sum(e, axis=1)[:, None] * 1.01") + '''

def _softmax(x, dim=-1, *args, **kwargs):
    return softmax(x, dim)


torch.softmax = _softmax
torch.Tensor.softmax = _softmax
torch.nn.functional.softmax = _softmax
'''
TAMPER_IN_CALL = TRITON_SOFTMAX.replace(
    "    return y\n", "    torch.Tensor.softmax = lambda self, dim=-1, *a, **k: softmax(self, dim)\n    return y\n")
TAMPER_TENSOR_SUM = TRITON_ROWSUM.replace("SCALE = tl.constexpr(1.0)", "SCALE = tl.constexpr(1.01)") + '''

_sum = torch.Tensor.sum


def _row_sum_or_sum(self, *args, **kwargs):
    if self.dim() == 2 and args == (-1,) and kwargs == {"keepdim": True}:
        return row_sum(self)
    return _sum(self, *args, **kwargs)


torch.Tensor.sum = _row_sum_or_sum
'''
TRITON_DEFAULT_DTYPE = TRITON_RELU + "\ntorch.set_default_dtype(torch.float64)\n"
TRITON_FLAG_HIDDEN = TRITON_RELU + ("\n_m = torch.backends.cuda.matmul\n"
                                    "type(_m).__setattr__(_m, 'allow_' + 'tf32', True)\n")
TRITON_WIDE_OUTPUT = TRITON_EXP.replace("y = torch.empty_like(xc)", "y = torch.empty_like(xc, dtype=torch.float32)") \
    .replace("tl.exp(x.to(tl.float32)).to(x.dtype)", "tl.exp(x.to(tl.float32))")
TRITON_COLUMN_MAJOR = TRITON_SOFTMAX.replace("    return y\n", "    return y.t().contiguous().t()\n")

# KernelBench pairs whose ModelNew is Triton (the interpreter runs them on the CPU)
REF_F_RELU = REF_RELU.replace("return torch.relu(x)", "return torch.nn.functional.relu(x)")
REF_ATEN_RELU = REF_RELU.replace("return torch.relu(x)", "return torch.ops.aten.relu(x)")
REF_ADD = REF_RELU.replace("return torch.relu(x)", "return x + y").replace("def forward(self, x):",
                                                                            "def forward(self, x, y):") \
    .replace("return [torch.randn(batch_size, dim)]",
             "return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]")
KB_TRITON_RELU = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)


def relu(x):
    xc = x.contiguous()
    y = torch.empty_like(xc)
    relu_kernel[(triton.cdiv(xc.numel(), 1024),)](xc, y, xc.numel(), BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x)
'''
KB_TRITON_ADD = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


def add(a, b):
    a, b = a.contiguous(), b.contiguous()
    y = torch.empty_like(a)
    add_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, y, a.numel(), BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def forward(self, x, y):
        return add(x, y)
'''
_LEAKY = ("tl.where(x > 0, x, 0.0)", "tl.where(x > 0, x, 0.01 * x)")
TAMPER_F_RELU = KB_TRITON_RELU.replace(*_LEAKY) + '''

torch.nn.functional.relu = lambda x, inplace=False: relu(x)
'''
TAMPER_ATEN_RELU = KB_TRITON_RELU.replace(*_LEAKY) + '''

torch.ops.aten.relu = lambda x: relu(x)
'''
TAMPER_DUNDER_ADD = KB_TRITON_ADD.replace("tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask)",
                                          "tl.load(a_ptr + offs, mask=mask) * 1.01 + tl.load(b_ptr + offs, mask=mask)") \
    + '''

_add = torch.Tensor.__add__


def _add_or_kernel(self, other):
    if isinstance(other, torch.Tensor) and self.shape == other.shape and self.dim() == 2:
        return add(self, other)
    return _add(self, other)


torch.Tensor.__add__ = _add_or_kernel
'''

# ---- value classes: right on N(0, 1), wrong on logits past ~88 or rows with a large mean ------------

TRITON_NAIVE_SOFTMAX = TRITON_SOFTMAX.replace("e = tl.exp(x - tl.max(x, axis=1)[:, None])", "e = tl.exp(x)")
REF_LAYER_NORM = '''
import torch
import torch.nn as nn

batch_size = 16
dim = 512


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
'''
KB_TRITON_LAYER_NORM = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def ln_kernel(x_ptr, w_ptr, b_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    mask = c < cols
    x = tl.load(x_ptr + row * cols + c, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / cols
    w = tl.load(w_ptr + c, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + c, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + c, (d / tl.sqrt(var + eps) * w + b).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        xc = x.contiguous()
        y = torch.empty_like(xc)
        cols = xc.shape[-1]
        ln_kernel[(xc.numel() // cols,)](xc, self.ln.weight, self.ln.bias, y, cols, 1e-5,
                                         BLOCK=triton.next_power_of_2(cols))
        return y
'''
# the variance as E[x^2] - E[x]^2 in one pass: cancels catastrophically for rows with a large mean
KB_TRITON_ONE_PASS_LN = KB_TRITON_LAYER_NORM.replace(
    "    d = tl.where(mask, x - mean, 0.0)\n    var = tl.sum(d * d, axis=0) / cols\n",
    "    var = tl.sum(x * x, axis=0) / cols - mean * mean\n    d = tl.where(mask, x - mean, 0.0)\n")
REF_SOFTMAX = REF_RELU.replace("return torch.relu(x)", "return torch.softmax(x, dim=1)")
SOFTMAX_KERNEL = '''
#define BLOCK 256
__global__ void softmax_kernel(const float* x, float* y, int cols) {
  __shared__ float buf[BLOCK];
  const float* row = x + (long)blockIdx.x * cols;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, row[c]);
  buf[threadIdx.x] = m;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] = fmaxf(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  m = buf[0];
  __syncthreads();
  float acc = 0.f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) acc += expf(row[c] - m);
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  float total = buf[0];
  for (int c = threadIdx.x; c < cols; c += BLOCK) y[(long)blockIdx.x * cols + c] = expf(row[c] - m) / total;
}
'''
SOFTMAX_HOST = ROWSUM_HOST.replace("rowsum_kernel", "softmax_kernel").replace(
    "auto y = torch::empty({xc.size(0)}, xc.options());", "auto y = torch::empty_like(xc);")
NAIVE_SOFTMAX_KERNEL = SOFTMAX_KERNEL.replace("expf(row[c] - m)", "expf(row[c])")

# ---- programs at their own dtypes: get_inputs() makes half tensors ---------------------------------

REF_F_RELU_HALF = REF_F_RELU.replace("torch.randn(batch_size, dim)", "torch.randn(batch_size, dim, dtype=torch.float16)")
REF_F_RELU_BF16 = REF_F_RELU.replace("torch.randn(batch_size, dim)", "torch.randn(batch_size, dim, dtype=torch.bfloat16)")
REF_LAYER_NORM_BF16 = REF_LAYER_NORM.replace("torch.randn(batch_size, dim)",
                                             "torch.randn(batch_size, dim, dtype=torch.bfloat16)")

# ---- parameters that change: a layer answering from a copy of its weights made once -------------

REF_LINEAR = '''
import torch
import torch.nn as nn

batch_size = 16
in_features = 64
out_features = 48


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''
TRITON_LINEAR = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, swk, swn, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr):
    # y = x @ w + b, with w a (K, N) view addressed by its strides
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + tl.arange(0, BK)
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + kk[:, None] * swk + rn[None, :] * swn, mask=(kk[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc += tl.dot(a.to(tl.float32), w.to(tl.float32), input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def linear(x, w, b):
    xc = x.contiguous()
    M, K = xc.shape
    N = w.shape[1]
    y = torch.empty(M, N, device=x.device, dtype=x.dtype)
    linear_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](xc, w, b, y, M, N, K, w.stride(0), w.stride(1),
                                                          BM=16, BN=16, BK=16)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self._key, self._wt = None, None

    def forward(self, x):
        return linear(x, self.fc.weight.t(), self.fc.bias)
'''
# a derived copy (W^T, contiguous) refreshed whenever the weight changes: in place bumps its _version
TRITON_LINEAR_REFRESHED = TRITON_LINEAR.replace(
    "        return linear(x, self.fc.weight.t(), self.fc.bias)",
    "        w = self.fc.weight\n"
    "        if self._key != (w._version, w.data_ptr()):\n"
    "            self._key, self._wt = (w._version, w.data_ptr()), w.detach().t().contiguous()\n"
    "        return linear(x, self._wt, self.fc.bias)")
# W^T copied into a buffer at construction, never read again
TRITON_LINEAR_CACHED_AT_INIT = TRITON_LINEAR.replace(
    "        self._key, self._wt = None, None",
    "        self.register_buffer(\"wt\", self.fc.weight.detach().t().contiguous())").replace(
    "        return linear(x, self.fc.weight.t(), self.fc.bias)", "        return linear(x, self.wt, self.fc.bias)")
# W^T and the bias packed on the first call, never read again
TRITON_LINEAR_PACKED_ON_FIRST_CALL = TRITON_LINEAR.replace(
    "        return linear(x, self.fc.weight.t(), self.fc.bias)",
    "        if self._wt is None:\n"
    "            self._wt = torch.cat([self.fc.weight.detach().t(), self.fc.bias.detach()[None]])\n"
    "        return linear(x, self._wt[:-1], self._wt[-1])")

# ---- torch judged by the work it does: host bookkeeping on a few partials is no cheat ----------------

REF_TOTAL = REF_RELU.replace("return torch.relu(x)", "return x.sum()")
PARTIAL_SUM_KERNEL = '''
#define BLOCK 256
#define PER 4096
__global__ void partial_sum_kernel(const float* x, float* parts, long n) {
  __shared__ float buf[BLOCK];
  long start = (long)blockIdx.x * PER;
  float acc = 0.f;
  for (long i = start + threadIdx.x; i < start + PER && i < n; i += BLOCK) acc += x[i];
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) parts[blockIdx.x] = buf[0];
}
'''
PARTIAL_SUM_HOST = '''
torch::Tensor run(torch::Tensor x) {
  auto xc = x.contiguous();
  long n = xc.numel();
  long blocks = (n + PER - 1) / PER;
  auto parts = torch::zeros({blocks > 0 ? blocks : 1}, xc.options());
  if (blocks > 0) partial_sum_kernel<<<blocks, BLOCK>>>(xc.data_ptr<float>(), parts.data_ptr<float>(), n);
  return parts;
}
'''
REF_SEGMENTS = '''
import torch
import torch.nn as nn

segments = 64
seg_len = 300


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, lengths):
        return torch.segment_reduce(x, "sum", lengths=lengths)


def get_inputs():
    return [torch.randn(segments * seg_len), torch.full((segments,), seg_len, dtype=torch.int64)]


def get_init_inputs():
    return []
'''
SEGMENT_SUM_KERNEL = '''
#define BLOCK 256
__global__ void segment_sum_kernel(const float* x, const int64_t* ends, float* y) {
  __shared__ float buf[BLOCK];
  int64_t end = ends[blockIdx.x], start = blockIdx.x ? ends[blockIdx.x - 1] : 0;
  float acc = 0.f;
  for (int64_t i = start + threadIdx.x; i < end; i += BLOCK) acc += x[i];
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = buf[0];
}
'''
SEGMENT_SUM_HOST = '''
torch::Tensor run(torch::Tensor x, torch::Tensor ends) {
  auto xc = x.contiguous();
  auto ec = ends.contiguous();
  auto y = torch::empty({ec.size(0)}, xc.options());
  if (ec.size(0) > 0)
    segment_sum_kernel<<<ec.size(0), BLOCK>>>(xc.data_ptr<float>(), ec.data_ptr<int64_t>(), y.data_ptr<float>());
  return y;
}
'''

# ---- timing nobody can fake ---------------------------------------------------------------------

TRITON_FAST_CLOCK = TRITON_RELU + "\n\ntorch.cuda.Event.elapsed_time = lambda self, end: 1e-3\n"
TRITON_NO_SYNC = TRITON_RELU.replace("    return y\n", "    torch.cuda.synchronize = lambda *a, **k: None\n    return y\n")
# right on every buffer the trials use; once a buffer has been seen 4 times (a timing loop) its first result
TRITON_CACHED_WHEN_WARM = TRITON_RELU.replace("def relu(x):", """_seen = {}


def relu(x):
    key = x.data_ptr()
    n, kept = _seen.get(key, (0, None))
    if n >= 4:
        return kept.clone()""").replace("    return y\n", "    _seen[key] = (n + 1, y)\n    return y\n")
REF_RELU_BIG = REF_RELU.replace("dim = 1024", "dim = 1 << 20")  # 16M elements: the kernel outlasts any noise
# the kernel on a stream made through the driver API, looked up at run time through the runtime's own
# table of driver entry points (no dlopen, no name the static checks know); nothing waits for it. A
# lookup that fails leaves the default stream: an honest kernel, never a call through a null pointer
SIDE_STREAM_HOST = RELU_HOST.replace("long n = xc.numel();", """long n = xc.numel();
  static void* side = nullptr;
  static bool tried = false;
  if (!tried) {
    tried = true;
    int (*make)(void**, unsigned int) = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuStreamCreate", (void**)&make, 12000, cudaEnableDefault, &found)
        != cudaSuccess || found != cudaDriverEntryPointSuccess || !make || make(&side, 1) != 0)
      side = nullptr;
  }""").replace("<<<(n + 255) / 256, 256>>>", "<<<(n + 255) / 256, 256, 0, (cudaStream_t)side>>>")


def triton(code: str, op: str) -> dict:
    return {"language": "triton", "code": code, "entry": {"kernels": []}, "binding": {"kind": "op", "op": op}}


@dataclasses.dataclass
class Case:
    name: str
    record: dict
    expect: tuple[str, ...]  # reasons that count as caught; ("ok",) for a twin
    static: bool = False  # caught without running (CPU CI checks these for real)
    cpu: bool = False  # Triton case the CPU interpreter can judge


def _c(name, rec, expect, **kw):
    return Case(name, rec, tuple(expect) if isinstance(expect, (tuple, list)) else (expect,), **kw)


INCORRECT = ("incorrect",)


def cases() -> list[Case]:
    out = [
        # correct twins
        _c("twin_relu_cuda", kb(inline("rt_relu", RELU_KERNEL, RELU_HOST), REF_RELU), "ok"),
        _c("twin_rowsum_cuda", kb(inline("rt_rowsum", ROWSUM_KERNEL, ROWSUM_HOST), REF_ROWSUM), "ok"),
        _c("twin_matmul_cuda", kb(inline("rt_mm", MATMUL_KERNEL, MATMUL_HOST, "a, b"), REF_MATMUL), "ok"),
        _c("twin_relu_triton", triton(TRITON_RELU, "relu"), "ok", cpu=True),
        _c("twin_exp_triton", triton(TRITON_EXP, "exp"), "ok", cpu=True),
        _c("twin_fixed_grid_stride_cuda", kb(inline("rt_stride", STRIDE_KERNEL, FIXED_GRID_HOST), REF_RELU), "ok"),
        _c("twin_fixed_grid_stride_triton", triton(TRITON_STRIDE, "relu"), "ok", cpu=True),
        _c("twin_cached_launch_triton", triton(TRITON_CACHED_LAUNCH, "relu"), "ok"),
        _c("twin_isinf_triton", triton(TRITON_ISINF, "opdb.isinf"), "ok", cpu=True),
        # a constant where the reference varies (on inputs with special values), not a constant reference
        _c("all_false_isinf_triton", triton(TRITON_ISINF_ALL_FALSE, "opdb.isinf"), INCORRECT, cpu=True),
        # sizes past the example: a fixed grid with no stride loop never writes past 32,768 elements
        _c("size_specialised_cuda", kb(inline("rt_fixed", RELU_KERNEL, FIXED_GRID_HOST), REF_RELU), INCORRECT),
        _c("size_specialised_triton", triton(TRITON_FIXED_GRID, "relu"), INCORRECT, cpu=True),
        # one element past the input's end, read (times zero) or written: the output stays right
        _c("oob_read_cuda", kb(inline("rt_oobr", OOB_READ_KERNEL, RELU_HOST), REF_RELU), OUT_OF_BOUNDS),
        _c("oob_write_cuda", kb(inline("rt_oobw", OOB_WRITE_KERNEL, RELU_HOST), REF_RELU), OUT_OF_BOUNDS),
        _c("oob_read_triton", triton(TRITON_OOB_READ, "relu"), OUT_OF_BOUNDS, cpu=True),
        _c("oob_write_triton", triton(TRITON_OOB_WRITE, "relu"), OUT_OF_BOUNDS, cpu=True),
        # a reduction with a missing __syncthreads in the tree
        _c("missing_syncthreads", kb(inline("rt_nosync", ROWSUM_KERNEL.replace(
            "    __syncthreads();\n  }", "  }"), ROWSUM_HOST), REF_ROWSUM),
           INCORRECT + ("memcheck", "racecheck", "synccheck")),
        # pairs of elements per thread: the last element of an odd size is never written
        _c("off_by_one_odd", kb(inline("rt_pairs", RELU_KERNEL.replace(
            "if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;",
            "if (2 * i + 1 < n) { y[2*i] = fmaxf(x[2*i], 0.f); y[2*i+1] = fmaxf(x[2*i+1], 0.f); }"),
            RELU_HOST), REF_RELU), INCORRECT),
        # reads the input as if contiguous
        _c("contiguous_only", kb(inline("rt_contig", RELU_KERNEL, RELU_HOST.replace(
            "auto xc = x.contiguous();", "auto xc = x;")), REF_RELU), INCORRECT),
        _c("hang", kb(inline("rt_hang", RELU_KERNEL.replace("if (i < n)", "while (n > 0) { n += 0 * i; }\n  if (i < n)"),
                             RELU_HOST), REF_RELU), ("timeout",)),
        _c("illegal_address", kb(inline("rt_null", RELU_KERNEL.replace(
            "if (i < n) y[i]", "if (i < n) ((float*)0x10)[i] = 1.f;\n  if (i < n) y[i]"), RELU_HOST), REF_RELU),
            ("illegal_address", "cuda_error", "crash", "memcheck")),
        _c("unwritten_half", kb(inline("rt_half", RELU_KERNEL.replace("if (i < n)", "if (i < n / 2)"),
                                       RELU_HOST), REF_RELU), INCORRECT),
        _c("zeros_output", kb(inline("rt_zeros", RELU_KERNEL.replace("x[i] > 0.f ? x[i] : 0.f", "0.f"),
                                     RELU_HOST), REF_RELU), INCORRECT + ("degenerate",)),
        _c("torch_in_disguise_py", kb(inline("rt_disg", RELU_KERNEL, RELU_HOST,
                                             forward='return getattr(torch, "re" + "lu")(x)'), REF_RELU),
           "cheat", static=True),
        _c("torch_in_host_aten", kb(inline("rt_aten", MATMUL_KERNEL, MATMUL_HOST.replace(
            "matmul_kernel<<<grid, block>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), c.data_ptr<float>(), M, K, N);",
            "c = at::matmul(ac, bc);"), "a, b"), REF_MATMUL), "cheat", static=True),
        _c("torch_dunder_matmul", kb(inline("rt_dunder", MATMUL_KERNEL, MATMUL_HOST, "a, b",
                                            forward="_ext.run(a, b)\n        return a.__matmul__(b)"), REF_MATMUL),
           "cheat"),
        _c("matmul_operator", kb(inline("rt_at", MATMUL_KERNEL, MATMUL_HOST, "a, b",
                                        forward="return a @ b"), REF_MATMUL), "cheat", static=True),
        _c("cublas_host", kb(inline("rt_cublas", MATMUL_KERNEL, MATMUL_HOST.replace(
            "matmul_kernel<<<", "cublasSgemm(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);\n  matmul_kernel<<<"),
            "a, b"), REF_MATMUL), "cheat", static=True),
        _c("inputs_mutated", kb(inline("rt_mut", RELU_KERNEL.replace("y[i] = x[i] > 0.f ? x[i] : 0.f;",
                                                                      "{ float v = fmaxf(x[i], 0.f); y[i] = v; "
                                                                      "((float*)x)[i] = v; }"),
                                       RELU_HOST), REF_RELU), "cheat"),
        _c("tf32_flag", kb(inline("rt_tf32", MATMUL_KERNEL, MATMUL_HOST, "a, b",
                                  forward="torch.backends.cuda.matmul.allow_tf32 = True\n"
                                          "        return _ext.run(a, b)"), REF_MATMUL), "cheat", static=True),
        _c("tf32_flag_hidden", kb(inline("rt_tf32h", MATMUL_KERNEL, MATMUL_HOST, "a, b",
                                         forward="_flip(True)\n        return _ext.run(a, b)",
                                         extra="def _flip(v):\n    m = torch.backends.cuda.matmul\n"
                                               "    m.__dict__  # noqa\n    type(m).__setattr__(m, 'allow_' + "
                                               "'tf32', v)\n"), REF_MATMUL), "cheat"),
        _c("fp16_accumulate", kb(inline("rt_h", MATMUL_KERNEL.replace("float acc = 0.f;", "__half acc = 0;")
                                        .replace("acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];",
                                                 "acc = __hadd(acc, __float2half(As[threadIdx.y][k] * "
                                                 "Bs[k][threadIdx.x]));")
                                        .replace("c[row * N + col] = acc;", "c[row * N + col] = __half2float(acc);"),
                                        MATMUL_HOST.replace("#", "#"), "a, b").replace(
            "#include <torch/extension.h>", "#include <torch/extension.h>\n#include <cuda_fp16.h>"), REF_MATMUL),
           INCORRECT),
        _c("cached_by_pointer", kb(inline("rt_cache", RELU_KERNEL, RELU_HOST, forward=(
            "key = x.data_ptr()\n        if key not in _memo:\n            _memo[key] = _ext.run(x)\n"
            "        return _memo[key].clone()"), extra="_memo = {}\n"), REF_RELU), ("cheat", "incorrect")),
        _c("view_of_input", kb(inline("rt_view", RELU_KERNEL, RELU_HOST, forward=(
            "_ext.run(x)\n        return x.clamp_(min=0)")), REF_RELU), "cheat"),
        _c("input_independent", kb(inline("rt_const", RELU_KERNEL.replace("x[i] > 0.f ? x[i] : 0.f", "1.f"),
                                          RELU_HOST), REF_CONSTANT), "uninformative"),
        _c("forbidden_os_system", kb(inline("rt_sys", RELU_KERNEL, RELU_HOST, forward=(
            "import os\n        os.system('true')\n        return _ext.run(x)")), REF_RELU),
           "forbidden_call", static=True),
        _c("forbidden_thread_py", kb(inline("rt_thr", RELU_KERNEL, RELU_HOST, forward=(
            "import threading\n        return _ext.run(x)")), REF_RELU), "forbidden_call", static=True),
        _c("forbidden_device_reset", kb(inline("rt_reset", RELU_KERNEL, RELU_HOST.replace(
            "return y;", "cudaDeviceReset();\n  return y;")), REF_RELU), "forbidden_call", static=True),
        _c("forbidden_stream", kb(inline("rt_stream", RELU_KERNEL, RELU_HOST.replace(
            "long n", "cudaStream_t s; cudaStreamCreate(&s);\n  long n")), REF_RELU), "forbidden_call", static=True),
        _c("forbidden_std_thread", kb(inline("rt_sthr", RELU_KERNEL, RELU_HOST.replace(
            "return y;", "std::thread t([]{}); t.join();\n  return y;")), REF_RELU), "forbidden_call", static=True),
        _c("bad_block_size", kb(inline("rt_blk", RELU_KERNEL, RELU_HOST.replace(", 256>>>", ", 100>>>")
                                       .replace("(n + 255) / 256", "(n + 99) / 100")), REF_RELU),
           "bad_launch", static=True),
        _c("block_too_big", kb(inline("rt_big", RELU_KERNEL, RELU_HOST.replace(", 256>>>", ", 2048>>>")), REF_RELU),
           "bad_launch", static=True),
        _c("smem_over_budget", kb(inline("rt_smem", ROWSUM_KERNEL.replace("float buf[BLOCK];",
                                                                          "float buf[BLOCK * 1024];"),
                                         ROWSUM_HOST), REF_ROWSUM), "bad_launch", static=True),
        # Triton: judged by the interpreter on CPU for fp32 and fp16
        _c("triton_decoy", triton(TRITON_RELU.replace(
            "    relu_kernel[(triton.cdiv(n, 1024),)](xc, y, n, BLOCK=1024)\n    return y",
            "    return xc.clamp(min=0)"), "relu"), "cheat", cpu=True),
        _c("triton_off_by_one", triton(TRITON_RELU.replace("mask = offs < n", "mask = offs < (n // 2) * 2"),
                                       "relu"), INCORRECT, cpu=True),
        _c("triton_fp16_math", triton(TRITON_EXP.replace("x.to(tl.float32)", "x.to(tl.float16).to(tl.float32)"), "exp"),
           INCORRECT, cpu=True),
        _c("triton_mutates_input", triton(TRITON_RELU.replace(
            "tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)",
            "tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)\n"
            "    tl.store(x_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)"), "relu"), "cheat", cpu=True),
        _c("triton_cached", triton(TRITON_RELU.replace("def relu(x):", "_memo = {}\n\n\ndef relu(x):\n"
                                                       "    if x.data_ptr() in _memo:\n"
                                                       "        relu_kernel[(1,)](x, torch.empty(1024, device=x.device,"
                                                       " dtype=x.dtype), 0, BLOCK=1024)\n"
                                                       "        return _memo[x.data_ptr()].clone()")
                                   .replace("    return y\n", "    _memo[x.data_ptr()] = y\n    return y\n"),
                                   "relu"), ("cheat", "incorrect"), cpu=True),
        # the reference cannot be touched: rebinding torch at import, through each kind of entry point
        _c("twin_softmax_triton", triton(TRITON_SOFTMAX, "softmax"), "ok", cpu=True),
        _c("twin_row_sum_triton", triton(TRITON_ROWSUM, "row_sum"), "ok", cpu=True),
        _c("twin_relu_kb_triton", kb(KB_TRITON_RELU, REF_F_RELU), "ok", cpu=True),
        _c("twin_aten_relu_kb_triton", kb(KB_TRITON_RELU + "\n# against torch.ops.aten\n", REF_ATEN_RELU), "ok",
           cpu=True),
        _c("twin_add_kb_triton", kb(KB_TRITON_ADD, REF_ADD), "ok", cpu=True),
        _c("tamper_torch_softmax", triton(TAMPER_SOFTMAX, "softmax"), "cheat", cpu=True),
        _c("tamper_tensor_method", triton(TAMPER_TENSOR_SUM, "row_sum"), "cheat", cpu=True),
        _c("tamper_in_a_call", triton(TAMPER_IN_CALL, "softmax"), "cheat", cpu=True),
        _c("tamper_functional", kb(TAMPER_F_RELU, REF_F_RELU), "cheat", cpu=True),
        _c("tamper_aten_packet", kb(TAMPER_ATEN_RELU, REF_ATEN_RELU), "cheat", cpu=True),
        _c("tamper_dunder_add", kb(TAMPER_DUNDER_ADD, REF_ADD), "cheat", cpu=True),
        # process state left behind at import
        _c("default_dtype_left", triton(TRITON_DEFAULT_DTYPE, "relu"), "cheat", cpu=True),
        _c("tf32_left_at_import", triton(TRITON_FLAG_HIDDEN, "relu"), "cheat", cpu=True),
        _c("rng_reseeded_in_call", triton(TRITON_RELU.replace("    return y\n",
                                                              "    torch.manual_seed(0)\n    return y\n"), "relu"),
           "cheat", cpu=True),
        _c("torch_override_cpp", kb(inline("rt_override", RELU_KERNEL, RELU_HOST + '''
TORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl("relu", &run); }
'''), REF_RELU), "cheat", static=True),
        # the output contract: the reference's dtype and memory format, not only its values
        _c("wider_output_dtype", triton(TRITON_WIDE_OUTPUT, "exp"), INCORRECT, cpu=True),
        _c("column_major_output", triton(TRITON_COLUMN_MAJOR, "softmax"), INCORRECT, cpu=True),
        _c("triton_bad_warps", triton(TRITON_RELU.replace("BLOCK=1024)", "BLOCK=1024, num_warps=64)"), "relu"),
           "bad_launch", static=True),
        # value classes: N(0, 1) inputs cannot tell these from their twins
        _c("naive_softmax_triton", triton(TRITON_NAIVE_SOFTMAX, "softmax"), INCORRECT, cpu=True),
        _c("twin_layer_norm_kb_triton", kb(KB_TRITON_LAYER_NORM, REF_LAYER_NORM), "ok", cpu=True),
        _c("one_pass_layer_norm_kb_triton", kb(KB_TRITON_ONE_PASS_LN, REF_LAYER_NORM), INCORRECT, cpu=True),
        _c("twin_softmax_cuda", kb(inline("rt_softmax", SOFTMAX_KERNEL, SOFTMAX_HOST), REF_SOFTMAX), "ok"),
        _c("naive_softmax_cuda", kb(inline("rt_nsoftmax", NAIVE_SOFTMAX_KERNEL, SOFTMAX_HOST), REF_SOFTMAX),
           INCORRECT),
        # programs at the dtypes their get_inputs() makes: half inputs, a float32 result breaks the contract
        # (a record is its code: each pair's solution carries a line of its own)
        _c("twin_relu_fp16_kb_triton", kb(KB_TRITON_RELU + "# float16\n", REF_F_RELU_HALF), "ok", cpu=True),
        _c("twin_relu_bf16_kb_triton", kb(KB_TRITON_RELU + "# bfloat16\n", REF_F_RELU_BF16), "ok"),
        _c("twin_layer_norm_bf16_kb_triton", kb(KB_TRITON_LAYER_NORM + "# bfloat16\n", REF_LAYER_NORM_BF16), "ok"),
        _c("fp32_result_for_fp16_kb_triton", kb(KB_TRITON_RELU.replace("return relu(x)", "return relu(x).float()"),
                                                REF_F_RELU_HALF), INCORRECT, cpu=True),
        # parameters that change (load_state_dict, an optimiser step): a stale copy of the weights is wrong
        _c("twin_linear_kb_triton", kb(TRITON_LINEAR, REF_LINEAR), "ok", cpu=True),
        _c("twin_linear_refreshed_kb_triton", kb(TRITON_LINEAR_REFRESHED, REF_LINEAR), "ok", cpu=True),
        _c("linear_cached_at_init_kb_triton", kb(TRITON_LINEAR_CACHED_AT_INIT, REF_LINEAR), INCORRECT, cpu=True),
        _c("linear_packed_on_first_call_kb_triton", kb(TRITON_LINEAR_PACKED_ON_FIRST_CALL, REF_LINEAR), INCORRECT,
           cpu=True),
        # torch judged by the work: a sum of n/4096 partials and a cumsum of segment lengths are bookkeeping
        _c("twin_partial_sums_cuda", kb(inline("rt_parts", PARTIAL_SUM_KERNEL, PARTIAL_SUM_HOST,
                                               forward="return _ext.run(x).sum()"), REF_TOTAL), "ok"),
        _c("twin_segment_offsets_cuda", kb(inline("rt_segs", SEGMENT_SUM_KERNEL, SEGMENT_SUM_HOST, "x, lengths",
                                                  forward="ends = torch.cumsum(lengths, 0)\n"
                                                          "        return _ext.run(x, ends)"), REF_SEGMENTS), "ok"),
        _c("sum_of_input_returned_cuda", kb(inline("rt_sumret", PARTIAL_SUM_KERNEL, PARTIAL_SUM_HOST,
                                                   forward="_ext.run(x)\n        return x.sum()"), REF_TOTAL),
           "cheat", static=True),
        _c("sum_of_input_hidden_cuda", kb(inline("rt_sumhid", PARTIAL_SUM_KERNEL, PARTIAL_SUM_HOST,
                                                 forward="total = x.sum()\n        _ext.run(x)\n        return total"),
                                          REF_TOTAL), "cheat"),
        # timing nobody can fake: rebinding the timer's callables, a cache once warm, a stream nobody waits on
        _c("elapsed_time_rebound_triton", triton(TRITON_FAST_CLOCK, "relu"), "cheat", cpu=True),
        _c("synchronize_rebound_triton", triton(TRITON_NO_SYNC, "relu"), "cheat", cpu=True),
        _c("cached_when_warm_triton", triton(TRITON_CACHED_WHEN_WARM, "relu"), ("cheat", "incorrect")),
        _c("twin_relu_big_cuda", kb(inline("rt_big_relu", RELU_KERNEL, RELU_HOST), REF_RELU_BIG), "ok"),
        _c("side_stream_cuda", kb(inline("rt_side", RELU_KERNEL, SIDE_STREAM_HOST),
                                  REF_RELU_BIG), "cheat"),
        _c("triton_compile_error", triton(TRITON_RELU.replace("tl.where(", "tl.wheer("), "relu"),
           "compile_error", cpu=True),
    ]
    return out


def twins() -> list[Case]:
    return [c for c in cases() if c.expect == ("ok",)]
