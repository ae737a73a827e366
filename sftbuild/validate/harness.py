"""CUDA harnesses: jinja2 launchers rendered around the unchanged kernel code.

A harness is a .cu file that includes the record's code verbatim as
`kernel.cuh` and exports one C entry point per dtype:

    int sftbuild_launch_<dtype>(void** ptrs, const long long* ints, int n, void* stream)

`ptrs` are device pointers and `ints` integer arguments, in the order the op's
launch contract defines (see CONTRACTS). The entry returns the CUDA error of
the launch, or -1 when the sizes are outside what the binding supports.
"""
from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).with_name("templates")
TORCH_CTYPES = {"float32": "float", "float16": "c10::Half", "bfloat16": "c10::BFloat16"}
PLAIN_CTYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}


@functools.lru_cache(maxsize=1)
def env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def render(record, check: dict, dtypes: list[str]) -> str:
    """The harness source for one bound record and one check (op + harness args)."""
    binding = record.binding or {}
    harness = check.get("harness") or binding.get("harness")
    if not harness:
        raise ValueError(f"record {record.id[:12]} has no harness")
    torch_types = "torch" in record.entry.get("include_sets", [])
    ctypes = TORCH_CTYPES if torch_types else PLAIN_CTYPES
    args = {**_defaults(harness), **(binding.get("harness_args") or {}), **(check.get("harness_args") or {})}
    params = {**(binding.get("params") or {}), **(check.get("params") or {})}
    kernel = record.entry["kernels"][0]
    return env().get_template(f"{harness}.cu.j2").render(
        kernel=kernel, tparams=template_params(record.code, kernel), torch_types=torch_types, params=params,
        dtypes=[(d, ctypes[d]) for d in dtypes], **args)


def template_params(code: str, kernel: str) -> list[str]:
    """Names of the kernel's template parameters, so a harness can pass them by name
    (torch releases add and remove parameters, e.g. the ROCm warp-size one)."""
    m = re.search(r"__global__[^;{(]*?\b" + re.escape(kernel) + r"\s*\(", code)
    if not m:
        return []
    start = code.rfind("template", 0, m.start())
    if start < 0 or code[start:m.start()].count(";") or code[start:m.start()].count("}"):
        return []
    i = code.index("<", start)
    depth, j = 0, i
    while j < len(code):
        depth += {"<": 1, ">": -1}.get(code[j], 0)
        if depth == 0:
            break
        j += 1
    names, depth, cur = [], 0, ""
    for ch in code[i + 1:j] + ",":
        if ch == "," and depth == 0:
            decl = cur.split("=")[0].strip()
            word = re.findall(r"[A-Za-z_]\w*", decl)
            if word:
                names.append(word[-1])
            cur = ""
            continue
        depth += {"<": 1, ">": -1, "(": 1, ")": -1}.get(ch, 0)
        cur += ch
    return names


def _defaults(harness: str) -> dict:
    base = {"ns": "at::native::", "block": 256}
    return {**base, **{"persistent_softmax": {"max_log2": 10, "is_log_softmax": "false", "ns": ""},
                       "aten_softmax_backward": {"max_log2": 10, "is_log_softmax": "false", "ns": ""},
                       }.get(harness, {})}


def fits(shape, cons: dict, max_numel: int | None = None) -> bool:
    """Whether a shape from an op's pool satisfies a binding's constraints (and a size cap)."""
    n = math.prod(shape)
    if (max_numel and n > max_numel) or ("max_numel" in cons and n > cons["max_numel"]):
        return False
    if "max_cols" in cons and shape[-1] > cons["max_cols"]:
        return False
    # {axis: size}: dims the harness fixes (keys may come back from JSON as strings)
    return all(int(a) < len(shape) and shape[int(a)] == n for a, n in (cons.get("dims") or {}).items())


# sizes a harness's own launch logic cannot serve, whatever the binding says
HARNESS_LIMITS = {"persistent_softmax": {"max_cols": 1024}, "aten_softmax_backward": {"max_cols": 1024},
                  "aten_batch_norm_cl": {"dims": {2: 1}}}


def checks(binding: dict) -> list[dict]:
    """The (op, params, harness args) checks a binding asks for: the primary op plus `also`."""
    first = {k: binding.get(k) for k in ("op", "params", "harness", "harness_args", "constraints")}
    first["constraints"] = {**HARNESS_LIMITS.get(first["harness"] or "", {}), **(first["constraints"] or {})}
    out = [first]
    for extra in binding.get("also") or []:
        # an `also` op's params replace the first op's (`params: {}` means none), harness args add up
        out.append({"op": extra["op"], "params": extra["params"] if "params" in extra else first["params"],
                    "harness": extra.get("harness") or first["harness"],
                    "harness_args": {**(first["harness_args"] or {}), **(extra.get("harness_args") or {})},
                    "constraints": {**HARNESS_LIMITS.get(extra.get("harness") or "", {}),
                                    **(extra.get("constraints") or first["constraints"])}})
    return out


# ---- launch contracts: how tensors become (ptrs, ints) -------------------------

def rowwise(inputs, outputs, params=None):
    """y[rows, cols] = f(x[rows, cols]); rows are `stride` elements apart."""
    x, y = inputs[0], outputs[0]
    return [y.data_ptr(), x.data_ptr()], [x.shape[0], x.shape[1], x.stride(0)]


def unary(inputs, outputs, params=None):
    """y[n] = f(x[n]) over contiguous memory."""
    x, y = inputs[0], outputs[0]
    return [y.data_ptr(), x.data_ptr()], [x.numel()]


def tensors(inputs, outputs, params=None):
    """The generic contract: ptrs = outputs then inputs; ints = (ndim, *shape) of each, in the same order.
    Every tensor is contiguous; an op that updates inputs in place lists them as outputs too."""
    ts = list(outputs) + list(inputs)
    ints = []
    for t in ts:
        ints += [t.dim(), *t.shape]
    return [t.data_ptr() for t in ts], ints


def binary(inputs, outputs, params=None):
    """z[n] = f(a[n], b[n]) over contiguous memory."""
    return [outputs[0].data_ptr(), inputs[0].data_ptr(), inputs[1].data_ptr()], [inputs[0].numel()]


def rowwise_backward(inputs, outputs, params=None):
    """dx[rows, cols] = f(dy, y); rows are `stride` elements apart."""
    dy, y = inputs[0], inputs[1]
    return [outputs[0].data_ptr(), dy.data_ptr(), y.data_ptr()], [dy.shape[0], dy.shape[1], dy.stride(0)]


CONTRACTS = {"rowwise": rowwise, "unary": unary, "binary": binary, "rowwise_backward": rowwise_backward,
             "tensors": tensors}
# harnesses whose C entry reads the generic layout, whatever the op's own launch contract is
HARNESS_CONTRACT = {"persistent_softmax": "rowwise", "aten_softmax_backward": "rowwise_backward"}


def contract_for(harness: str, op_launch: str) -> str:
    if harness in HARNESS_CONTRACT:
        return HARNESS_CONTRACT[harness]
    return op_launch if op_launch in CONTRACTS else "tensors"

