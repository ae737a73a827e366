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
    return env().get_template(f"{harness}.cu.j2").render(
        kernel=record.entry["kernels"][0], torch_types=torch_types,
        dtypes=[(d, ctypes[d]) for d in dtypes], **args)


def _defaults(harness: str) -> dict:
    return {"persistent_softmax": {"max_log2": 10, "is_log_softmax": "false"}}.get(harness, {})


def checks(binding: dict) -> list[dict]:
    """The (op, params, harness args) checks a binding asks for: the primary op plus `also`."""
    first = {k: binding.get(k) for k in ("op", "params", "harness", "harness_args", "constraints")}
    out = [first]
    for extra in binding.get("also") or []:
        out.append({"op": extra["op"], "params": extra.get("params") or first["params"],
                    "harness": extra.get("harness") or first["harness"],
                    "harness_args": {**(first["harness_args"] or {}), **(extra.get("harness_args") or {})},
                    "constraints": extra.get("constraints") or first["constraints"]})
    return out


# ---- launch contracts: how tensors become (ptrs, ints) -------------------------

def rowwise(inputs, outputs):
    """y[rows, cols] = f(x[rows, cols]); rows are `stride` elements apart."""
    x, y = inputs[0], outputs[0]
    return [y.data_ptr(), x.data_ptr()], [x.shape[0], x.shape[1], x.stride(0)]


def unary(inputs, outputs):
    """y[n] = f(x[n]) over contiguous memory."""
    x, y = inputs[0], outputs[0]
    return [y.data_ptr(), x.data_ptr()], [x.numel()]


CONTRACTS = {"rowwise": rowwise, "unary": unary}
HARNESS_CONTRACT = {"persistent_softmax": "rowwise"}


def contract_for(harness: str, op_launch: str) -> str:
    return HARNESS_CONTRACT.get(harness, op_launch)
