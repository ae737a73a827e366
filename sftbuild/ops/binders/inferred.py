"""Bindings read from a kernel's name and parameter list."""
from __future__ import annotations

import re

from sftbuild.ops.binders import BINDERS, Binder

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
            op = _pick(record.name, UNARY_WORDS if len(ins) == 1 else BINARY_WORDS)
            if op:
                order[ints[0][1]] = "int:0"
                return {"dtypes": dtypes, "params": {}, "op": op, "harness": "generic_launch",
                        "harness_args": {"args": [order[n] for _, n, _, _ in params], "grid": "elements",
                                         "templated": templated}}
        if len(ints) in (2, 3) and len(ins) == 1:
            op = _pick(record.name, ROW_WORDS)
            if op:
                # rows first, then cols, then an optional row stride, in declaration order
                for i, (_, n, _, _) in enumerate(ints):
                    order[n] = f"int:{i}"
                return {"dtypes": dtypes, "params": {"dim": -1}, "op": op, "harness": "generic_launch",
                        "harness_args": {"args": [order[n] for _, n, _, _ in params], "grid": "rows",
                                         "templated": templated, "smem": _smem(record)}}
        return None


def _param(p: str) -> tuple[str, str, bool, bool]:
    """(type, name, is_pointer, is_const) of one parameter declaration."""
    p = re.sub(r"\b(__restrict__|__restrict|restrict)\b", " ", p.split("=")[0])
    names = re.findall(r"[A-Za-z_]\w*", p)
    if not names:
        return "", "", False, False
    words = [w for w in names[:-1] if w != "const"]
    return (words[-1] if words else ""), names[-1], "*" in p, "const" in names[:-1]


def _pick(name: str, words) -> str | None:
    low = name.lower()
    return next((op for frag, op in words if frag in low), None)


def _smem(record) -> str:
    """Dynamic shared memory a row-wise kernel plausibly wants: one accumulator per thread."""
    return "block" if re.search(r"extern\s+__shared__", record.code) else "none"
