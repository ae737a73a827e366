"""CUDA harnesses: jinja2 launchers rendered around the unchanged kernel code.

A harness is a .cu file that includes the record's code verbatim as
`kernel.cuh` and exports one C entry point per dtype:

    int sftbuild_launch_<dtype>(void** ptrs, const long long* ints, int n, void* stream)

`ptrs` are device pointers and `ints` integer arguments, in the order a launch
contract (`sftbuild.ops.launch`) defines. The entry returns the CUDA error of
the launch, or -1 when the sizes are outside what the binding supports.

A harness is one file, `templates/<name>.cu.j2`, that opens with a header declaring
what the launcher needs besides its text:

    {#- harness
    contract: rowwise        # the launch contract its C entry reads; `op`: the bound op's own
    defaults: {max_log2: 10} # template values a binding's harness_args override
    limits: {max_cols: 1024} # shapes its launch logic cannot serve (see `fits`)
    -#}

Besides its header's values a template gets: `kernel` (the entry's first kernel), `tparams` (its
template parameters by name), `torch_types`, `params`, `dtypes` and `mentions(name)` (whether the
record's code names `name`: torch releases differ in the helpers their kernels call) and `launcher`
(the record's host launcher, `entry["launcher"]`, for `host_launcher` and `extension_function`).
Templates whose names start with `_` are partials included by the others.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import jinja2
import yaml

from sftbuild.binding import Binding
from sftbuild.ops import launch
from sftbuild.trial import launchers
from sftbuild.ops import fits  # noqa: F401  (trials and pyrun filter pools with it)

CONTRACTS = launch.CONTRACTS  # name -> (inputs, outputs, params) -> (ptrs, ints); what trials call

TEMPLATES = Path(__file__).with_name("templates")
BASE_DEFAULTS = {"ns": "at::native::", "block": 256}  # every harness's template values unless it says otherwise
OP_CONTRACT = "op"  # a header's `contract: op`: the launch contract of the op being checked
HEADER = re.compile(r"\A\{#-?\s*harness[ \t]*\n(.*?)-?#\}", re.S)
TORCH_CTYPES = {"float32": "float", "float16": "c10::Half", "bfloat16": "c10::BFloat16"}
PLAIN_CTYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}


@functools.lru_cache(maxsize=1)
def env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def render(record, check: dict, dtypes: list[str]) -> str:
    """The harness source for one bound record and one check (op + harness args)."""
    binding = record.binding
    harness = check.get("harness") or (binding.harness if binding else None)
    if not harness:
        raise ValueError(f"record {record.id[:12]} has no harness")
    torch_types = "torch" in record.entry.get("include_sets", [])
    ctypes = TORCH_CTYPES if torch_types else PLAIN_CTYPES
    own_args, own_params = (binding.harness_args or {}, binding.params) if binding else ({}, {})
    args = {**get(harness).defaults, **own_args, **(check.get("harness_args") or {})}
    params = {**own_params, **(check.get("params") or {})}
    kernel = record.entry["kernels"][0]
    launcher = record.entry.get("launcher")
    if harness == "host_launcher":  # the probe's mapping, as the launcher's C arguments
        args = {**args, "args": launchers.host_call_args(launcher["params"], args, launcher.get("template") or [])}
    elif harness == "extension_function":  # the probe's arguments, as the function's C++ call
        launcher = launchers.function_of(record)  # its own file's, or another file's calling its launcher
        decls, call, rets = launchers.function_call_args(launcher, args["args"])
        outputs = sum(a.startswith("t:") for r, a in zip(launchers.function_roles(launcher), args["args"])
                      if r["role"] == "out")
        args = {**args, "decls": decls, "call": call, "rets": rets, "n_outputs": outputs}
    return env().get_template(f"{harness}.cu.j2").render(launcher=launcher,
        kernel=kernel, tparams=template_params(record.code, kernel), torch_types=torch_types, params=params,
        dtypes=[(d, ctypes[d]) for d in dtypes], mentions=functools.partial(mentions, record.code), **args)


def mentions(code: str, name: str) -> bool:
    """Whether the record's code names `name` (a helper its kernel calls, defined there or in a header
    it includes), so a template can launch the kernel with the sizes that helper gives, as the
    torch release the record came from does."""
    return re.search(r"(?<![\w.])" + re.escape(name) + r"\b", code) is not None


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


@dataclasses.dataclass(frozen=True)
class Harness:
    """One launcher template and what its header declares."""
    name: str  # templates/<name>.cu.j2
    contract: str  # the launch contract its C entry reads, or OP_CONTRACT
    defaults: dict  # template values, BASE_DEFAULTS included
    limits: dict  # shape constraints of its own launch logic

    def contract_for(self, op_launch: str) -> str:
        return op_launch if self.contract == OP_CONTRACT else self.contract


@functools.lru_cache(maxsize=1)
def harnesses() -> dict[str, Harness]:
    """Every harness template by name, read from the headers; a bad header is an error here."""
    out = {}
    for path in sorted(TEMPLATES.glob("[!_]*.cu.j2")):
        name = path.name.removesuffix(".cu.j2")
        m = HEADER.match(path.read_text())
        if not m:
            raise ValueError(f"harness template {path.name} has no `{{#- harness ... -#}}` header")
        head = yaml.safe_load(m.group(1)) or {}
        unknown = set(head) - {"contract", "defaults", "limits"}
        if unknown or "contract" not in head:
            raise ValueError(f"harness {name}: header needs `contract` and may have defaults, limits "
                             f"(got {sorted(head)})")
        if head["contract"] != OP_CONTRACT:
            launch.get(head["contract"])  # an unknown contract name raises here
        out[name] = Harness(name, head["contract"], {**BASE_DEFAULTS, **(head.get("defaults") or {})},
                            dict(head.get("limits") or {}))
    return out


def get(name: str) -> Harness:
    try:
        return harnesses()[name]
    except KeyError:
        raise KeyError(f"unknown harness {name!r} (templates: {', '.join(harnesses())})") from None


def _limits(name: str | None) -> dict:
    return get(name).limits if name else {}


def checks(binding: Binding) -> list[dict]:
    """The (op, params, harness args) checks a binding asks for: the primary op plus `also`."""
    first = {"op": binding.op, "params": binding.params or None, "harness": binding.harness,
             "harness_args": binding.harness_args, "constraints": binding.constraints}
    # sizes a harness's own launch logic cannot serve come first; the binding's own constraints add to them
    first["constraints"] = {**_limits(first["harness"]), **(first["constraints"] or {})}
    out = [first]
    for extra in binding.also:
        # an `also` op's params replace the first op's (`params: {}` means none), harness args add up
        out.append({"op": extra["op"], "params": extra["params"] if "params" in extra else first["params"],
                    "harness": extra.get("harness") or first["harness"],
                    "harness_args": {**(first["harness_args"] or {}), **(extra.get("harness_args") or {})},
                    "constraints": {**_limits(extra.get("harness")),
                                    **(extra.get("constraints") or first["constraints"])}})
    return out


def contract_for(harness: str, op_launch: str) -> str:
    """The launch contract a check's C entry reads: its harness's own, or the op's (`op_launch`)."""
    return get(harness).contract_for(op_launch) if harness else op_launch
