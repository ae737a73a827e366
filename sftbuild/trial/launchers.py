"""How the harness calls a probed CUDA host launcher or extension function: its parameters' roles and C arguments.

Invariants:
  * A host launcher's parameter is a pointer (an input when `const` or not written, else an output),
    a size, a block size, a flag, a float scalar or a stream (`host_roles`); an extension function's is
    a tensor, a float or int scalar, a flag or an absent optional tensor (`function_roles`).
  * The bind stage's probes (sftbuild.bind.binders.launched, .extension) choose which tensor, dimension
    and value each parameter takes; the harnesses (sftbuild.trial.harness) call the same parameters
    with the same roles, so what was probed is what is validated.
"""
from __future__ import annotations

import re

from sftbuild.parsing import param_info

STRIDE_TYPES = {"ptrdiff_t", "ssize_t", "intptr_t", "std::ptrdiff_t"}  # integer sizes parsing does not know
BLOCK = re.compile(r"block", re.I)
STREAM_TYPES = {"cudaStream_t"}
OUT_NAMES = re.compile(r"^(out|output|y|dst|res|result)\w*$", re.I)
TENSOR = re.compile(r"^(?:const\s+)?(?:torch|at)::Tensor\s*&?\s*(\w+)$")
OPTIONAL_TENSOR = re.compile(r"^(?:const\s+)?(?:c10|std)::optional\s*<\s*(?:torch|at)::Tensor\s*>\s*&?\s*(\w+)$")
FUNCTION_INT_TYPES = {"int", "int64_t", "long", "int32_t", "unsigned", "size_t", "long long"}
FLOAT_TYPES = {"float", "double"}


def host_roles(params: list[str], writes: set[str] | None = None) -> list[dict]:
    """One role per launcher parameter: {name, type, role: in|out|size|block|flag|float|stream|other}. A
    pointer is an output when `writes` (the launcher's pointers its kernel writes, None when unknown)
    holds it, else when it is not `const`."""
    out = []
    for decl in params:
        words = decl.replace("*", " * ").replace("&", " ").split()
        if words and words[-2:-1] and words[-2] in STREAM_TYPES or (words and words[0] in STREAM_TYPES):
            out.append({"name": words[-1], "type": "cudaStream_t", "role": "stream"})
            continue
        if len(words) >= 2 and [w for w in words[:-1] if w != "const"] == ["bool"]:
            out.append({"name": words[-1], "type": "bool", "role": "flag"})  # tried false, then true
            continue
        p = param_info(decl)
        if p is None and len(words) == 2 and words[0] in STRIDE_TYPES:
            out.append({"name": words[1], "type": words[0], "role": "size"})
        elif p is None:
            out.append({"name": decl.split()[-1] if decl.split() else "", "type": decl, "role": "other"})
        elif p["ptr"]:
            wrote = not p["const"] if writes is None else p["name"] in writes
            out.append({"name": p["name"], "type": p["type"], "role": "out" if wrote else "in"})
        elif p["kind"] == "int":
            out.append({"name": p["name"], "type": p["type"], "role": "block" if BLOCK.search(p["name"]) else "size"})
        else:
            out.append({"name": p["name"], "type": p["type"], "role": "float"})
    return out


def host_call_args(params: list[str], mapping: dict, tparams: list[str] = ()) -> list[str]:
    """The launcher's arguments in C for the `host_launcher` harness: pointers from the `tensors`
    contract's `ptrs` (outputs then inputs) or the harness's scratch buffer, sizes from its `ints`
    (`sftbuild_size`), float scalars as literals, the stream the harness is given. Scratch buffers
    are `scratch_bytes` apart in one allocation of `len(scratch) * scratch_bytes`. The launcher's own
    template parameters (`tparams`) read as the harness's `U` (the dtype's CUDA type)."""
    ptrs, ints, floats = iter(mapping["ptrs"]), iter(mapping["ints"]), iter(mapping["floats"])
    out, slot = [], 0
    for r in host_roles(params):
        if r["role"] in ("in", "out"):
            p = next(ptrs)
            r = {**r, "type": "U" if r["type"] in tparams else r["type"]}
            if p == "scratch":  # each in its own part of the scratch buffer (`scratch_bytes` apart)
                out.append(f"({r['type']}*)((char*)scratch + {slot} * scratch_bytes)")
                slot += 1
            else:
                out.append(f"({r['type']}*)ptrs[{int(p.split(':')[1])}]")
        elif r["role"] in ("size", "block", "flag"):
            kind, *rest = next(ints).split(":")
            code = {"const": 0, "dim": 1, "rows": 2, "numel": 3}[kind]
            a = int(rest[0]) if rest else 0
            b = int(rest[1]) if len(rest) > 1 else 0
            out.append(f"({r['type']})sftbuild_size(ints, n_ints, {code}, {a}, {b})")
        elif r["role"] == "float":
            out.append(f"({r['type']}){float(next(floats))!r}")
        else:
            out.append("stream")
    return out


def plain(decl: str) -> str:
    """A parameter declaration without its default value and with spaces made single."""
    return " ".join(decl.split("=")[0].replace("&", " & ").split()).replace(" & ", "& ").replace(" &", "&")


def returns(fn: dict) -> tuple[str, int]:
    """The function's return type and how many tensors it returns (0 for void or a non-tensor type)."""
    head = fn["code"][:fn["code"].find("{")] if "{" in fn["code"] else fn["code"]
    m = re.search(rf"([\w:<>,\s]*?)\b{re.escape(fn['name'])}\s*\(", head)
    ret = " ".join((m.group(1) if m else "").replace("static", "").replace("inline", "").split())
    if re.fullmatch(r"(?:torch|at)::Tensor", ret):
        return ret, 1
    inner = re.fullmatch(r"std::(?:tuple|pair)\s*<(.*)>", ret)
    if inner:
        return ret, len(re.findall(r"(?:torch|at)::Tensor", inner.group(1)))
    return ret, 0


def function_roles(fn: dict, writes: set[str] | None = None) -> list[dict]:
    """One role per parameter: {name, type, role: in|out|float|int|flag|absent|other}. A tensor is an output
    only in a function returning no tensor, where its kernel writes it (`writes`, the binder's data flow)
    or, that not known, where its name is an output's. A returned tensor adds one `out` role per tensor,
    named `return:k`, after the parameters."""
    n_ret = returns(fn)[1]
    out = []
    for decl in fn.get("params") or ():
        bare = plain(decl)
        m = TENSOR.match(bare)
        words = bare.replace("&", " ").split()
        name = words[-1] if words else ""
        base = " ".join(w for w in words[:-1] if w != "const")
        if m:
            wrote = not n_ret and (name in writes if writes else bool(OUT_NAMES.match(name)))
            out.append({"name": name, "type": "Tensor", "role": "out" if wrote else "in"})
        elif base in FLOAT_TYPES:
            out.append({"name": name, "type": base, "role": "float"})
        elif base in FUNCTION_INT_TYPES:
            out.append({"name": name, "type": base, "role": "int"})
        elif base == "bool":
            out.append({"name": name, "type": base, "role": "flag"})
        elif OPTIONAL_TENSOR.match(bare):  # probed without it: the function's path for an absent tensor
            out.append({"name": name, "type": "optional", "role": "absent"})
        else:
            out.append({"name": name, "type": bare, "role": "other"})
    return out + [{"name": f"return:{k}", "type": "Tensor", "role": "out"} for k in range(n_ret)]


def function_call_args(fn: dict, args: list[str]) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """For the `extension_function` harness: declarations of the tensor arguments (tensor k is
    `sftbuild_t(k)`, a scratch output `sftbuild_scratch()`; locals, so a `Tensor&` parameter binds),
    the call's arguments, and (returned value, tensor) pairs, each result to copy into its output."""
    found = function_roles(fn)
    single = returns(fn)[0].endswith("Tensor")
    decls, call, rets = [], [], []
    for r, a in zip(found, args):
        kind, _, v = a.partition(":")
        if r["name"].startswith("return:"):
            if kind == "t":
                k = int(r["name"].split(":")[1])
                rets.append(("sftbuild_ret" if single else f"std::get<{k}>(sftbuild_ret)", f"sftbuild_t({int(v)})"))
            continue
        if kind in ("t", "scratch"):
            decls.append(f"at::Tensor sftbuild_arg{len(decls)} = "
                         + (f"sftbuild_t({int(v)})" if kind == "t" else "sftbuild_scratch()") + ";")
            call.append(f"sftbuild_arg{len(decls) - 1}")
        else:
            call.append({"float": f"({r['type']}){v}", "int": f"({r['type']}){v}",
                         "flag": "true" if v == "1" else "false", "none": "{}"}[kind])
    return decls, call, rets
