"""Bindings read from a kernel's name and parameter list, checked against its code.

A name picks a family, never a variant: where an op has variants the code tells apart, the
code decides (`_variant`): a GELU computed with `tanh` is `gelu_tanh`, with `erf` it is `gelu`,
with neither it stays unbound; a softmax whose code masks (a causal / triangular loop bound,
`mask`, `causal`, a -inf written under an index comparison) is not the plain row softmax and
stays unbound, as does a row kernel whose third integer is not a stride (B, T, NH: 4-D).
A file's own CPU reference (binder `file_reference`, tried first) settles what it can.
"""
from __future__ import annotations

import re

from sftbuild.bind.binders import BINDERS, Binder
from sftbuild.parsing import kernel_view, param_info

UNARY_WORDS = [  # name fragment -> op; longer fragments first so "leaky_relu" wins over "relu"
    ("leaky_relu", "leaky_relu"), ("gelu_tanh", "gelu_tanh"), ("hardswish", "hardswish"),
    ("hardsigmoid", "hardsigmoid"), ("softplus", "softplus"), ("sigmoid", "sigmoid"), ("rsqrt", "rsqrt"),
    ("gelu", "gelu"), ("silu", "silu"), ("swish", "silu"), ("relu", "relu"), ("tanh", "tanh"), ("mish", "mish"),
    ("sqrt", "sqrt"), ("exp", "exp"), ("log", "log"), ("abs", "abs"), ("neg", "neg"), ("square", "square"),
    ("reciprocal", "reciprocal"), ("sin", "sin"), ("cos", "cos"), ("erf", "erf"),
]
BINARY_WORDS = [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "div"), ("max", "maximum"),
                ("min", "minimum")]
ROW_WORDS = [("log_softmax", "log_softmax"), ("logsoftmax", "log_softmax"), ("softmax", "softmax"),
             ("sum", "row_sum")]
SCALAR_TYPES = {"float": ["float32"], "__half": ["float16"], "half": ["float16"], "__nv_bfloat16": ["bfloat16"],
                "T": ["float32", "float16", "bfloat16"], "scalar_t": ["float32", "float16", "bfloat16"]}
INT_TYPES = ("int", "int64_t", "long", "size_t", "unsigned", "uint32_t")


@BINDERS.register
class Inferred(Binder):
    """Read from the kernel's name and parameters: elementwise unary / binary (`out, in[, in2], n`) and
    row-wise softmax, log-softmax and row sums (`out, in, rows, cols[, stride]`), launched by generic_launch."""
    name = "inferred"
    version = 2  # the shared kernel view: string literals kept whole, a declaration is not a definition
    order = 50

    def bind(self, record) -> dict | None:
        params = [_param(p) for p in record.entry.get("params") or []]
        if not params or any(not n for _, n, _, _ in params):
            return None
        ptrs = [p for p in params if p[2]]
        ints = [p for p in params if not p[2] and p[0] in INT_TYPES]
        if len(ptrs) + len(ints) != len(params) or not ptrs:
            return None
        outs = [p for p in ptrs if not p[3]]
        ins = [p for p in ptrs if p[3]]
        if len(outs) != 1 or len({p[0] for p in ptrs}) != 1:
            return None
        dtypes = SCALAR_TYPES.get(ptrs[0][0])
        if not dtypes:
            return None
        order = {outs[0][1]: "ptr:0", **{p[1]: f"ptr:{i + 1}" for i, p in enumerate(ins)}}
        templated = bool(record.entry.get("template"))
        if len(ints) == 1 and len(ins) in (1, 2):
            op = _variant(_pick(record.name, UNARY_WORDS if len(ins) == 1 else BINARY_WORDS), record, params)
            if op:
                order[ints[0][1]] = "int:0"
                return {"dtypes": dtypes, "params": {}, "op": op, "harness": "generic_launch",
                        "harness_args": {"args": [order[n] for _, n, _, _ in params], "grid": "elements",
                                         "templated": templated}}
        if len(ints) in (2, 3) and len(ins) == 1:
            op = _variant(_pick(record.name, ROW_WORDS), record, params)
            if len(ints) == 3 and not STRIDE_NAME.search(ints[2][1]):
                op = None  # (B, T, NH) and the like: not rows, cols, stride
            if op:
                # rows first, then cols, then an optional row stride, in declaration order
                for i, (_, n, _, _) in enumerate(ints):
                    order[n] = f"int:{i}"
                return {"dtypes": dtypes, "params": {"dim": -1}, "op": op, "harness": "generic_launch",
                        "harness_args": {"args": [order[n] for _, n, _, _ in params], "grid": "rows",
                                         "templated": templated, "smem": _smem(record)}}
        return None


STRIDE_NAME = re.compile(r"stride|^ld|pitch", re.I)
MASKED = re.compile(r"\b(?:causal|mask\w*|tril|triu)\b", re.I)
MASK_WRITE = re.compile(r"\b\w+\s*[<>]=?\s*\w+\s*\)?\s*[?{]?\s*[^;{}]*?-\s*(?:INFINITY|FLT_MAX|inf\w*)\b")


def _variant(op: str | None, record, params) -> str | None:
    """The op the code computes among the variants a name cannot tell apart, or None when unsure."""
    if op is None:
        return None
    code = _body(record)
    if op in ("gelu", "gelu_tanh"):
        tanh = bool(re.search(r"\btanh[f]?\s*\(|\b__tanhf\s*\(|\btanh_approx", code))
        erf = bool(re.search(r"\berf[f]?\s*\(|\bnormcdf[f]?\s*\(|M_SQRT1_2", code))
        return None if tanh == erf else "gelu_tanh" if tanh else "gelu"
    if op in ("softmax", "log_softmax"):
        names = {n for _, n, _, _ in params}
        triangular = any(b not in names and not b.isdigit() and b != "blockDim"
                         for b in re.findall(r"for\s*\([^;]*;\s*\w+\s*<=\s*(\w+)", code))
        if MASKED.search(code) or triangular or MASK_WRITE.search(re.sub(r"=\s*-\s*INFINITY\s*;", "", code)):
            return None
    return op


def _body(record) -> str:
    """The kernel's own definition, without comments (the closure's other units say nothing of it)."""
    view = kernel_view(record.code)
    k = view.kernel(record.name)
    return k.definition if k else view.text


def _param(decl: str) -> tuple[str, str, bool, bool]:
    """(type, name, is_pointer, is_const) of one parameter declaration; no name when unreadable."""
    p = param_info(decl)
    return (p["type"].split()[-1], p["name"], p["ptr"], p["const"]) if p else ("", "", False, False)


def _pick(name: str, words) -> str | None:
    low = name.lower()
    return next((op for frag, op in words if frag in low), None)


def _smem(record) -> str:
    """Dynamic shared memory a row-wise kernel plausibly wants: one accumulator per thread."""
    return "block" if re.search(r"extern\s+__shared__", record.code) else "none"
