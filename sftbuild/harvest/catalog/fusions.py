"""Generated fusion programs in the style of KernelBench level 2, deterministic from a seed.

Contract: `programs(count, seed)` returns `count` KernelBench-format programs (`class Model`,
module-level size constants, `get_inputs()`, `get_init_inputs()`), the same list for the same
(count, seed), and other fusions for another seed. Each is a head (Gemm, Linear, BMM, Conv1d/2d/3d,
ConvTranspose2d, LayerNorm, GroupNorm, InstanceNorm, RMSNorm, a reduction, attention) followed by
1 to 4 epilogues (elementwise activations and arithmetic, bias and scale parameters, softmax,
reductions, pooling). Sizes and dtypes come from sftbuild/ops/fusion_sizes.py.

No two programs of one list share a structure (head and epilogue sequence): they differ in code,
not only in names or constants. Shapes are tracked through the chain, so every program is valid
by construction; a chain whose tensors or head work would exceed the size caps is drawn again.
"""
from __future__ import annotations

import math
import random
import re
from array import array
from typing import NamedTuple

import numpy as np

from sftbuild.harvest.catalog import CATALOGS, Catalog, Program
from sftbuild.ops import fusion_sizes as pools

MAX_NUMEL = 1 << 21  # elements of any tensor in a program
MAX_HEAD_MACS = 1 << 28  # multiply-adds of the head (a GPU runs it in well under a millisecond)
MAX_TRIES = 200  # draws per program before a structure is given up
SHINGLE, MAX_OVERLAP = 5, 0.6  # no two programs share more than 60% of their token 5-grams


class Fusion(NamedTuple):
    name: str
    src: str
    head: str
    epilogues: tuple[str, ...]
    shapes: list  # input shapes
    dtype: str


class _Prog:
    """A program under construction: size constants, init args and lines, forward lines, the shape."""

    def __init__(self, rng: random.Random, dtype: str):
        self.rng, self.dtype = rng, dtype
        self.consts: dict[str, int] = {}
        self.init_args: list[str] = []
        self.init: list[str] = []
        self.fwd: list[str] = []
        self.inputs: list[tuple[str, list[str]]] = []  # (forward arg, size constant names)
        self.shape: tuple = ()
        self.feature = 1  # the dim a bias or scale parameter broadcasts along
        self.macs = 0
        self.params = 0

    def const(self, name: str, value: int, init: bool = False) -> str:
        self.consts[name] = value
        if init:
            self.init_args.append(name)
        return name

    def pick(self, pool):
        return self.rng.choice(pool)

    def knob(self, name: str, value) -> str:
        """A constant the model takes at init, as KernelBench programs do: a module-level value,
        an `__init__` argument kept as `self.<name>`, and an entry of `get_init_inputs()`."""
        base, i = name, 2
        while name in self.consts:
            name, i = f"{base}_{i}", i + 1
        self.consts[name] = value
        self.init_args.append(name)
        self.init.append(f"self.{name} = {name}")
        return f"self.{name}"

    def param(self, shape: tuple, how: str, label: str) -> str:
        """A learned parameter of `shape` (a module-level `<label>_shape`, passed at init)."""
        base, i = f"{label}_shape", 2
        name = base
        while name in self.consts:
            name, i = f"{base}_{i}", i + 1
        self.consts[name] = tuple(shape)
        self.init_args.append(name)
        attr = f"self.{label}{'' if name == base else name[len(base):]}"
        self.init.append(f"{attr} = nn.Parameter({how.format(dims=name)})")
        self.params += 1
        return attr


# ---- heads -----------------------------------------------------------------------------------------

def _gemm(p: _Prog):
    b, i, o = p.const("batch_size", p.pick(pools.FUSION_BATCH)), "in_features", "out_features"
    p.const(i, p.pick(pools.FUSION_FEATURES), True)
    p.const(o, p.pick(pools.FUSION_FEATURES), True)
    bias = p.rng.random() < 0.8
    p.init.append(f"self.gemm = nn.Linear(in_features, out_features{'' if bias else ', bias=False'})")
    p.inputs.append(("x", [b, i]))
    p.fwd.append("x = self.gemm(x)")
    c = p.consts
    p.shape, p.feature, p.macs = (c[b], c[o]), 1, c[b] * c[i] * c[o]


def _linear3d(p: _Prog):
    b, s = p.const("batch_size", p.pick(pools.FUSION_BATCH[:5])), p.const("seq_len", p.pick(pools.FUSION_SEQ))
    p.const("in_features", p.pick(pools.FUSION_FEATURES), True)
    p.const("out_features", p.pick(pools.FUSION_FEATURES), True)
    p.init.append("self.linear = nn.Linear(in_features, out_features)")
    p.inputs.append(("x", [b, s, "in_features"]))
    p.fwd.append("x = self.linear(x)")
    c = p.consts
    p.shape, p.feature, p.macs = (c[b], c[s], c["out_features"]), 2, c[b] * c[s] * c["in_features"] * c["out_features"]


def _bmm(p: _Prog):
    b = p.const("batch_size", p.pick(pools.FUSION_BATCH[:5]))
    m, k, n = (p.const(x, p.pick(pools.FUSION_SEQ + pools.FUSION_FEATURES[:4])) for x in ("m", "k", "n"))
    p.inputs += [("a", [b, m, k]), ("b", [b, k, n])]
    p.fwd.append(p.pick(["x = torch.bmm(a, b)", "x = torch.matmul(a, b)", "x = a @ b"]))
    c = p.consts
    p.shape, p.feature, p.macs = (c[b], c[m], c[n]), 2, c[b] * c[m] * c[k] * c[n]


def _conv(dims: int, transpose: bool = False):
    def head(p: _Prog):
        b = p.const("batch_size", p.pick(pools.FUSION_BATCH[:4] if dims == 3 else pools.FUSION_BATCH[:6]))
        ci = p.const("in_channels", p.pick(pools.FUSION_CHANNELS), True)
        co = p.const("out_channels", p.pick(pools.FUSION_CHANNELS[1:]), True)
        k = p.const("kernel_size", p.pick([1, 3, 5] if dims < 3 else [1, 3]), True)
        stride, pad = p.pick([1, 1, 2]), p.pick([0, p.consts[k] // 2])
        names = ["depth", "height", "width"][3 - dims:] if dims > 1 else ["length"]
        sizes = [p.const(nm, p.pick(pools.FUSION_SPATIAL if dims > 1 else pools.FUSION_SEQ)) for nm in names]
        if dims == 3:
            for nm in names:
                p.consts[nm] = min(p.consts[nm], 16)
        cls = f"nn.ConvTranspose{dims}d" if transpose else f"nn.Conv{dims}d"
        extra = (f", stride={stride}" if stride != 1 else "") + (f", padding={pad}" if pad else "")
        p.init.append(f"self.conv = {cls}(in_channels, out_channels, kernel_size{extra})")
        p.inputs.append(("x", [b, ci, *sizes]))
        p.fwd.append("x = self.conv(x)")
        kk = p.consts[k]
        out = [((p.consts[s] - 1) * stride - 2 * pad + kk) if transpose else
               ((p.consts[s] + 2 * pad - kk) // stride + 1) for s in sizes]
        if min(out) < 1:
            raise _Redraw
        p.shape, p.feature = (p.consts[b], p.consts[co], *out), 1
        p.macs = p.consts[b] * p.consts[ci] * p.consts[co] * kk ** dims * math.prod(out if not transpose else
                                                                                    [p.consts[s] for s in sizes])
    return head


def _norm(kind: str):
    def head(p: _Prog):
        b = p.const("batch_size", p.pick(pools.FUSION_BATCH))
        if kind in ("LayerNorm", "RMSNorm"):
            s = p.const("seq_len", p.pick(pools.FUSION_SEQ))
            d = p.const("hidden", p.pick(pools.FUSION_FEATURES), True)
            eps = p.pick([1e-5, 1e-6])
            p.init.append(f"self.norm = nn.{kind}(hidden, eps={eps})")
            p.inputs.append(("x", [b, s, d]))
            p.shape, p.feature = (p.consts[b], p.consts[s], p.consts[d]), 2
        else:
            c = p.const("channels", p.pick([8, 16, 32, 48, 64]), True)
            h, w = (p.const(n, p.pick(pools.FUSION_SPATIAL)) for n in ("height", "width"))
            if kind == "GroupNorm":
                g = p.const("num_groups", p.pick([g for g in (2, 4, 8) if p.consts[c] % g == 0]), True)
                p.init.append(f"self.norm = nn.GroupNorm({g}, channels)")
            else:
                p.init.append(f"self.norm = nn.InstanceNorm2d(channels{', affine=True' if p.rng.random() < .5 else ''})")
            p.inputs.append(("x", [b, c, h, w]))
            p.shape, p.feature = (p.consts[b], p.consts[c], p.consts[h], p.consts[w]), 1
        p.fwd.append("x = self.norm(x)")
        p.macs = math.prod(p.shape) * 4
    return head


def _reduce_head(p: _Prog):
    b, r, c = (p.const(n, p.pick(pool)) for n, pool in (("batch_size", pools.FUSION_BATCH),
                                                         ("rows", pools.FUSION_SEQ), ("cols", pools.FUSION_FEATURES)))
    fn = p.pick(["sum", "mean", "amax", "amin", "logsumexp"])
    d = p.pick([1, 2])
    p.inputs.append(("x", [b, r, c]))
    p.fwd.append(f"x = torch.{fn}(x, dim={d}, keepdim=True)")
    shape = [p.consts[b], p.consts[r], p.consts[c]]
    shape[d] = 1
    p.shape, p.feature, p.macs = tuple(shape), 2 if d == 1 else 1, p.consts[b] * p.consts[r] * p.consts[c]
    return fn.capitalize()


def _attention(manual: bool):
    def head(p: _Prog):
        b, h = p.const("batch_size", p.pick(pools.FUSION_BATCH[:4])), p.const("heads", p.pick([1, 2, 4, 8]))
        s, d = p.const("seq_len", p.pick(pools.FUSION_SEQ)), p.const("head_dim", p.pick(pools.FUSION_HEAD_DIM))
        p.inputs += [(n, [b, h, s, d]) for n in ("q", "k", "v")]
        scale = round(1 / math.sqrt(p.consts[d]), 4)
        if manual:
            p.fwd += [f"x = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * {scale}, dim=-1)",
                      "x = torch.matmul(x, v)"]
        else:  # causal, written out: F.scaled_dot_product_attention would be a library kernel, not Triton
            p.fwd += [f"x = torch.matmul(q, k.transpose(-2, -1)) * {scale}",
                      "keep = torch.ones(x.shape[-2], x.shape[-1], dtype=torch.bool, device=x.device).tril()",
                      "x = torch.matmul(torch.softmax(x.masked_fill(~keep, float('-inf')), dim=-1), v)"]
        c = p.consts
        p.shape, p.feature, p.macs = (c[b], c[h], c[s], c[d]), 1, 2 * c[b] * c[h] * c[s] * c[s] * c[d]
    return head


HEADS = {"Gemm": _gemm, "Linear": _linear3d, "BMM": _bmm, "Conv2d": _conv(2), "Conv1d": _conv(1),
         "Conv3d": _conv(3), "ConvTranspose2d": _conv(2, True), "LayerNorm": _norm("LayerNorm"),
         "RMSNorm": _norm("RMSNorm"), "GroupNorm": _norm("GroupNorm"), "InstanceNorm": _norm("InstanceNorm"),
         "Reduce": _reduce_head, "CausalAttention": _attention(False), "Attention": _attention(True)}


class _Redraw(Exception):
    """This draw breaks a size cap or a shape rule: draw again."""


# ---- epilogues ---------------------------------------------------------------------------------------
# Each returns its forward line and may add parameters; reductions also change `p.shape`.

def _knob_line(tmpl: str, knob: str, values):
    return lambda p: tmpl.format(c=p.knob(knob, p.pick(values)))


def _clamp(fn: str, lo: str, hi: str, knobs: tuple[str, str], pairs):
    def line(p: _Prog) -> str:
        a, b = p.pick(pairs)
        return f"x = {fn}(x, {lo}={p.knob(knobs[0], a)}, {hi}={p.knob(knobs[1], b)})"
    return line


ELEMENTWISE = {
    "ReLU": lambda p: "x = torch.relu(x)",
    "GELU": lambda p: p.pick(["x = F.gelu(x)", "x = torch.nn.functional.gelu(x)"]),
    "GELUTanh": lambda p: "x = F.gelu(x, approximate='tanh')",
    "SiLU": lambda p: "x = F.silu(x)",
    "Swish": lambda p: "x = x * torch.sigmoid(x)",
    "Sigmoid": lambda p: "x = torch.sigmoid(x)",
    "Tanh": lambda p: "x = torch.tanh(x)",
    "HardSwish": lambda p: "x = F.hardswish(x)",
    "HardSigmoid": lambda p: "x = F.hardsigmoid(x)",
    "LeakyReLU": _knob_line("x = F.leaky_relu(x, negative_slope={c})", "negative_slope", [0.01, 0.02, 0.05, 0.1, 0.2]),
    "ELU": _knob_line("x = F.elu(x, alpha={c})", "alpha", [0.5, 1.0, 1.5]),
    "Softplus": lambda p: "x = F.softplus(x)",
    "Mish": lambda p: "x = F.mish(x)",
    "Clamp": _clamp("torch.clamp", "min", "max", ("clamp_min", "clamp_max"), [(-1.0, 1.0), (-0.5, 0.5), (0.0, 6.0), (-2.0, 2.0)]),
    "Hardtanh": _clamp("F.hardtanh", "min_val", "max_val", ("hardtanh_min", "hardtanh_max"), [(-1.0, 1.0), (-0.25, 0.75)]),
    "Scale": _knob_line("x = x * {c}", "scaling_factor", [0.5, 0.125, 1.5, 2.0, 0.1, 0.75]),
    "AddConst": _knob_line("x = x + {c}", "add_value", [0.5, 1.0, 3.0, -0.25]),
    "Subtract": _knob_line("x = x - {c}", "subtract_value", [0.5, 0.2, 1.0]),
    "Divide": _knob_line("x = x / {c}", "divisor", [2.0, 3.0, 8.0, 1.414]),
    "Square": lambda p: "x = x * x",
    "Abs": lambda p: "x = torch.abs(x)",
    "ResidualAdd": lambda p: p.pick(["x = x + x.detach() * 0.5", "x = x + torch.tanh(x)"]),
    "BiasAdd": lambda p: f"x = x + {p.param(_bcast(p), 'torch.randn({dims}) * 0.02', 'bias')}",
    "ScaleParam": lambda p: f"x = x * {p.param(_bcast(p), 'torch.ones({dims}) + 0.1 * torch.randn({dims})', 'scale')}",
    "Softmax": lambda p: f"x = torch.softmax(x, dim={_dim(p)})",
    "LogSoftmax": lambda p: f"x = torch.log_softmax(x, dim={_dim(p)})",
    # half precision: an eps that float16 can hold, so an all-zero row stays 0 (1e-12 underflows: 0/0)
    "Normalize": lambda p: f"x = F.normalize(x, dim={_dim(p)}{'' if p.dtype == 'float32' else ', eps=1e-4'})",
}


def _bcast(p: _Prog) -> tuple:
    """A parameter shape that broadcasts along the feature dim of the current tensor."""
    f = min(p.feature, len(p.shape) - 1)
    return (p.shape[f],) + (1,) * (len(p.shape) - 1 - f)


def _dim(p: _Prog) -> int:
    return p.pick([d for d in range(1, len(p.shape)) if p.shape[d] > 1] or [len(p.shape) - 1])


def _reduction(p: _Prog) -> tuple[str, str]:
    dims = [d for d in range(1, len(p.shape)) if p.shape[d] > 1]
    if not dims:
        raise _Redraw
    d, keep = p.pick(dims), p.rng.random() < 0.6
    fn = p.pick(["sum", "mean", "amax", "amin", "logsumexp"])
    shape = list(p.shape)
    if keep:
        shape[d] = 1
    else:
        del shape[d]
        if p.feature >= d:
            p.feature = max(1, p.feature - 1)
    p.shape = tuple(shape)
    return {"amax": "Max", "amin": "Min", "logsumexp": "LogSumExp"}.get(fn, fn.capitalize()), \
        f"x = torch.{fn}(x, dim={d}{', keepdim=True' if keep else ''})"


def _pool(p: _Prog) -> tuple[str, str]:
    n = len(p.shape) - 2
    if n not in (1, 2, 3) or min(p.shape[2:]) < 2:
        raise _Redraw
    # torch has no CPU avg_pool3d for half precision: a reference must run on the CPU too
    kind = p.pick(["MaxPool", "GlobalAvgPool"] + (["AvgPool"] if n < 3 or p.dtype == "float32" else []))
    if kind == "GlobalAvgPool":
        dims = tuple(range(2, len(p.shape)))
        p.shape = p.shape[:2] + (1,) * n
        return kind, f"x = torch.mean(x, dim={dims}, keepdim=True)"
    fn = "max_pool" if kind == "MaxPool" else "avg_pool"
    k = p.pick([k for k in (2, 3, 4) if k <= min(p.shape[2:])])
    p.shape = p.shape[:2] + tuple(s // k for s in p.shape[2:])
    return kind, f"x = F.{fn}{n}d(x, kernel_size={p.knob('pool_kernel_size', k)})"


def _epilogue(p: _Prog) -> str:
    r = p.rng.random()
    if r < 0.22:
        name, line = _reduction(p)
    elif r < 0.3:
        name, line = _pool(p)
    else:
        name = p.pick(sorted(ELEMENTWISE))
        line = ELEMENTWISE[name](p)
    p.fwd.append(line)
    if math.prod(p.shape) > MAX_NUMEL:
        raise _Redraw
    return name


# ---- rendering --------------------------------------------------------------------------------------

def _render(p: _Prog, name: str, doc: str) -> str:
    cast = "" if p.dtype == "float32" else f".to(torch.{p.dtype})"
    init = p.init + ([f"self.to(torch.{p.dtype})"] if cast and p.init else [])
    body = "\n        ".join(init)
    consts = "\n".join(f"{k} = {v}" for k, v in p.consts.items())
    ins = ", ".join(f"torch.randn({', '.join(map(str, dims))}){cast}" for _, dims in p.inputs)
    return (f"import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
            f"class Model(nn.Module):\n    \"\"\"{doc}\"\"\"\n\n"
            f"    def __init__(self{''.join(', ' + a for a in p.init_args)}):\n"
            f"        super().__init__()\n" + (f"        {body}\n" if body else "") +
            f"\n    def forward(self, {', '.join(n for n, _ in p.inputs)}):\n        " +
            "\n        ".join(p.fwd) + "\n        return x\n\n\n" + consts + "\n\n\n"
            f"def get_inputs():\n    return [{ins}]\n\n\n"
            f"def get_init_inputs():\n    return [{', '.join(p.init_args)}]\n")


def _draw(rng: random.Random) -> tuple[str, tuple, _Prog]:
    for _ in range(MAX_TRIES):
        p = _Prog(rng, rng.choice(pools.FUSION_DTYPES))
        head = rng.choice(sorted(HEADS))
        try:
            tag = HEADS[head](p)
            head_tag = f"{head}{tag}" if tag else head
            if p.macs > MAX_HEAD_MACS or math.prod(p.shape) > MAX_NUMEL or any(
                    math.prod(p.consts[d] if isinstance(d, str) else d for d in dims) > MAX_NUMEL
                    for _, dims in p.inputs):
                raise _Redraw
            epis = tuple(_epilogue(p) for _ in range(rng.choice([1, 2, 2, 3, 3, 3, 4, 4])))
        except _Redraw:
            continue
        return head_tag, epis, p
    raise RuntimeError("no valid fusion drawn")  # the pools always admit one; a bug otherwise


_TOKEN = re.compile(r"\w+|[^\w\s]", re.A)
_DOC = re.compile(r'"""[\s\S]*?"""')


def shingles(src: str, n: int = SHINGLE) -> set[str]:
    """Token n-grams of a program's code (its docstring left out)."""
    toks = _TOKEN.findall(_DOC.sub(" ", src))
    return {" ".join(toks[i:i + n]) for i in range(max(1, len(toks) - n + 1))}


class _Overlaps:
    """The programs kept so far, as an inverted index of their n-grams: whether a new one is a near copy."""

    def __init__(self):
        self.postings: dict[str, array] = {}
        self.sizes = array("i")

    def near_copy(self, sh: set[str]) -> bool:
        lists = [self.postings[g] for g in sh if g in self.postings]
        if not lists:
            return False
        shared = np.bincount(np.concatenate([np.frombuffer(a, np.int32) for a in lists]),
                             minlength=len(self.sizes))
        union = np.frombuffer(self.sizes, np.int32) + len(sh) - shared
        return bool((shared > MAX_OVERLAP * union).any())

    def add(self, sh: set[str]) -> None:
        i = len(self.sizes)
        self.sizes.append(len(sh))
        for g in sh:
            self.postings.setdefault(g, array("i")).append(i)


def programs(count: int, seed: int = 0) -> list[Fusion]:
    """`count` fusion programs of distinct structure, deterministic from `seed`. A draw whose
    code shares more than MAX_OVERLAP of its token 5-grams (Jaccard) with a program already
    drawn is drawn again, so the list holds no near copies."""
    rng = random.Random(f"sftbuild-fusions-{seed}")
    out, seen, kept = [], set(), _Overlaps()
    misses = 0
    while len(out) < count and misses < 50 * count + 1000:
        head, epis, p = _draw(rng)
        if (head, epis) in seen:
            misses += 1
            continue
        label = "_".join((head,) + epis)
        doc = f"{head}, then " + ", then ".join(epis) + "."
        src = _render(p, label, doc)
        sh = shingles(src)
        if kept.near_copy(sh):
            misses += 1
            continue
        seen.add((head, epis))
        kept.add(sh)
        shapes = [[p.consts[d] if isinstance(d, str) else d for d in dims] for _, dims in p.inputs]
        out.append(Fusion(f"fusion.s{seed}.{len(out):04d}.{label}", src, head, epis, shapes, p.dtype))
    return out


@CATALOGS.register
class Fusions(Catalog):
    """Generated KernelBench level-2 style fusions: a head (matmul, conv, norm, reduction, attention) and
    1 to 4 epilogues, sizes and dtypes from pools, deterministic from the seed (any number)."""

    name = "fusions"
    version = 1
    order = 30
    fixed = False

    def programs(self, count: int, seed: int) -> list[Program]:
        return [Program(f.name, f.src, catalog="fusions",
                        meta={"family": "_".join((f.head,) + f.epilogues), "shapes": f.shapes, "dtypes": [f.dtype]})
                for f in programs(count, seed)]
