"""How the harness calls a probed CUDA host launcher or extension function: its parameters' roles and C arguments.

Invariants:
  * A host launcher's parameter is a pointer (an input when `const` or not written, else an output),
    a size, a block size, a flag, a float scalar or a stream (`host_roles`); an extension function's is
    a tensor, a float or int scalar, a flag or an absent optional tensor (`function_roles`).
  * The bind stage's probes (sftbuild.bind.binders.launched, .extension) choose which tensor, dimension
    and value each parameter takes; the harnesses (sftbuild.trial.harness) call the same parameters
    with the same roles, so what was probed is what is validated.
  * An extension function is the record's own launcher taking tensors, else one of another file that
    calls its raw launcher (`function_of`, from harvest's `entry["extensions"]`); probe and harness pick
    it by the same rule, so the function probed is the function validated.
"""
from __future__ import annotations

import re

from sftbuild import parsing
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


def function_head(fn: dict) -> str:
    """The function's own head: the text from the statement before its name to the `{` of its body,
    without a template's parameter list, the namespaces around it or a wrapper's includes."""
    code = parsing.strip_comments(fn.get("wrapper") or fn.get("own") or fn["code"])
    code = re.sub(r"(?m)^[ \t]*#.*$", "", code)
    # its definition's name: the first use followed by a body, not by `;` (a declaration, a call)
    m = next((m for m in re.finditer(rf"\b{re.escape(fn['name'])}\s*\(", code)
              if ";" not in code[m.end():code.find("{", m.end()) % (len(code) + 1)]), None)
    end = code.find("{", m.end()) if m else code.find("{")
    head = code[:end] if end >= 0 else code
    start = max(head.rfind(c, 0, m.start() if m else len(head)) for c in ";{}") + 1
    return re.sub(r"^\s*template\s*<[^<>]*>", "", head[start:]).strip()


def returns(fn: dict) -> tuple[str, int]:
    """The function's return type and how many tensors it returns (0 for void or a non-tensor type)."""
    head = function_head(fn)
    m = re.search(rf"([\w:<>,\s]*?)\b{re.escape(fn['name'])}\s*\(", head)
    ret = " ".join((m.group(1) if m else "").replace("static", "").replace("inline", "").split())
    if re.fullmatch(r"(?:torch|at)::Tensor", ret):
        return ret, 1
    inner = re.fullmatch(r"std::(?:tuple|pair)\s*<(.*)>", ret)
    if inner:
        return ret, len(re.findall(r"(?:torch|at)::Tensor", inner.group(1)))
    if re.fullmatch(r"std::vector\s*<\s*(?:torch|at)::Tensor\s*>", ret):  # as many as each `return {...}` lists
        own = parsing.strip_comments(fn.get("own") or fn["code"])
        sizes = {len(parsing.split_args(own, m.end(), "({[", ")}]") or []) for m in re.finditer(r"\breturn\s*\{", own)}
        return ret, sizes.pop() if len(sizes) == 1 else 0
    return ret, 0


def function_roles(fn: dict, writes: set[str] | None = None) -> list[dict]:
    """One role per parameter: {name, type, role: in|out|float|int|flag|absent|other}. A tensor is an output
    only in a function returning no tensor, where its kernel writes it (`writes`, the binder's data flow through
    `t.data_ptr<T>()`) or, that not known, where its name is an output's. A returned tensor
    adds one `out` role per tensor, named `return:k`, after the parameters."""
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
    ret = returns(fn)[0]
    single, listed = ret.endswith("Tensor"), ret.startswith("std::vector")
    decls, call, rets = [], [], []
    for r, a in zip(found, args):
        kind, _, v = a.partition(":")
        if r["name"].startswith("return:"):
            if kind == "t":
                k = int(r["name"].split(":")[1])
                rets.append(("sftbuild_ret" if single else f"sftbuild_ret[{k}]" if listed else
                             f"std::get<{k}>(sftbuild_ret)", f"sftbuild_t({int(v)})"))
            continue
        if kind in ("t", "scratch"):
            decls.append(f"at::Tensor sftbuild_arg{len(decls)} = "
                         + (f"sftbuild_t({int(v)})" if kind == "t" else "sftbuild_scratch()") + ";")
            call.append(f"sftbuild_arg{len(decls) - 1}")
        else:
            call.append({"float": f"({r['type']}){v}", "int": f"({r['type']}){v}",
                         "flag": "true" if v == "1" else "false", "none": "{}"}[kind])
    return decls, call, rets


# the host work an extension function may do beside launching its kernel: allocate, check, dispatch
TORCH_ALLOWED = re.compile(r"(?:empty|zeros|ones|full|from_blob|TensorOptions|Device|Tensor|IntArrayRef|Scalar|"
                           r"cuda|detail|getCurrent\w*|OptionalCUDAGuard|DeviceGuard|typeMetaToScalarType|"
                           r"elementSize|toString)\w*$")
TORCH_CALL = re.compile(r"\b(?:at|torch)::((?:\w+::)*\w+)\s*(?:<[^<>();]*>\s*)?\(")
TORCH_METHOD = re.compile(r"\.\s*(sum|mean|matmul|mm|bmm|addmm|softmax|log_softmax|exp|log|tanh|sigmoid|relu|gelu|"
                          r"silu|add|sub|mul|div|pow|sqrt|rsqrt|norm|amax|amin|max|min|cumsum|sort|topk|clamp|abs|"
                          r"neg|where|index_select|gather|scatter|layer_norm|linear|conv\w*|einsum)_?\s*\(")
LIBRARY_CALL = re.compile(r"\b(?:cublas(?!Check\b)\w+|cudnn(?!Check\b)\w+|thrust::\w+|cub::Device\w+::\w+)\s*\(")
DTYPE_OF = {"float": "float32", "__half": "float16", "__nv_bfloat16": "bfloat16"}
SCALAR_TYPES = {"float": "at::kFloat", "__half": "at::kHalf", "__nv_bfloat16": "at::kBFloat16"}
WORD = re.compile(r"\w+")




def function_of(record) -> dict | None:
    """The extension function the record's kernel is launched through, callable by its `name`: its own
    file's (`entry["launcher"]` taking tensors), else the first probeable one of another file that calls
    its raw launcher (`entry["extensions"]`), whose `code` then holds that launcher, the function's file's
    includes and the function (`own`: the function alone). A template over one type is called through a
    wrapper dispatching on its first tensor's dtype (`wrapper`; `wraps`, `dtypes`)."""
    entry = record.entry or {}
    launcher = entry.get("launcher")
    if launcher and takes_tensors(launcher):
        fn = {**launcher, "own": launcher["code"]}
    else:
        fns = [f for f in entry.get("extensions") or () if takes_tensors(f)]
        fn = next((f for f in fns if not unprobeable({**f, "own": f["code"]})), fns[0] if fns else None)
        if fn is None:
            return None
        fn = {**fn, "own": fn["code"], "code": "\n".join([(launcher or {}).get("code", ""), *fn.get("includes", ()),
                                                          fn["code"]])}
    if len(fn.get("template") or ()) == 1 or fn.get("qualified"):
        code = record.code + fn["code"]  # half where the code or its headers name it, bfloat16 where the code does
        half = re.search(r"\b__half\b|cuda_fp16", code + "".join((entry.get("headers") or {}).values()))
        types = ["float"] + ["__half"] * bool(half) + ["__nv_bfloat16"] * bool(re.search(r"\b__nv_bfloat16\b", code))
        if fn.get("path") and launcher and not launcher.get("template"):  # a raw launcher of fixed types (one
            named = set(WORD.findall(" ".join(launcher.get("params") or ())))  # overload of several) takes those only
            types = [t for t in types if t in named or (t == "__half" and "half" in named)] or types
        return wrapper(fn, types)
    return fn


def wrapper(fn: dict, types: list[str]) -> dict:
    """`fn` with a function of the global namespace calling it appended, as that function: a template
    over one type at the dtype of its first tensor, among `types` (C types: float, __half,
    __nv_bfloat16; the first for any other dtype), a function inside namespaces by its qualified name."""
    params = [re.sub(r"\s*=[^,]*$", "", p) for p in fn["params"]]
    names = [plain(p).split()[-1] for p in params]
    ret = returns(fn)[0] or "void"
    name, call, callee = f"sftbuild_{fn['name']}", ", ".join(names), "::" + (fn.get("qualified") or fn["name"])
    if fn.get("template"):
        first = next(n for p, n in zip(params, names) if TENSOR.match(plain(p)))
        cases = "".join(f"    case {SCALAR_TYPES[ct]}: return {callee}<{ct}>({call});\n" for ct in types[1:])
        body = f"  switch ({first}.scalar_type()) {{\n{cases}    default: return {callee}<{types[0]}>({call});\n  }}\n"
    else:
        body = f"  return {callee}({call});\n"
    code = f"\n{ret} {name}({', '.join(params)}) {{\n{body}}}\n"
    dtypes = [DTYPE_OF[t] for t in types] if fn.get("template") else None
    return {**{k: v for k, v in fn.items() if k != "template"}, "name": name, "params": params, "wraps": fn["name"],
            "code": fn["code"] + code, "wrapper": code, **({"dtypes": dtypes} if dtypes else {})}


def takes_tensors(fn: dict) -> bool:
    return any(TENSOR.match(plain(p)) for p in fn.get("params") or ())


def unprobeable(fn: dict) -> str | None:
    """Why an extension function cannot be called on generated tensors, or None."""
    found = function_roles(fn)
    other = [r for r in found if r["role"] == "other"]
    if other:
        return f"extension function {fn['name']} takes a parameter with no role: {other[0]['type']}"
    if len(fn.get("template") or ()) > 1 or not fn.get("template") and not fn.get("wraps") and re.search(
            rf"template\s*<[^>]*>\s*[\w:<>\s*&]*\b{re.escape(fn['name'])}\s*\(", fn.get("own") or fn["code"]):
        return f"extension function {fn['name']} is a template over more than one type, or over values"
    if not any(r["role"] == "out" for r in found):
        return f"extension function {fn['name']} returns no tensor and writes none it is given"
    work = torch_work(fn)
    if work:
        return f"extension function {fn['name']} computes with {work} beside its kernel: not probed"
    return None


def torch_work(fn: dict) -> str | None:
    """The first torch op, tensor arithmetic or library call the function computes with besides
    launching its kernel (what would make a match torch's work, not the kernel's), or None."""
    own = parsing.strip_comments(fn.get("own") or fn["code"])  # the function alone, not the launcher it calls
    code = re.sub(r"\"(?:\\.|[^\"\\])*\"", " ", own)  # nor string literals
    for m in TORCH_CALL.finditer(code):
        if not TORCH_ALLOWED.match(m.group(1).split("::")[-1]) and not m.group(1).startswith(("cuda::", "detail::")):
            return f"{m.group(0).rstrip('( ')}"
    m = TORCH_METHOD.search(code) or LIBRARY_CALL.search(code)
    if m:
        return m.group(0).rstrip("( ")
    tensors = {r["name"] for r in function_roles(fn) if r["type"] == "Tensor" and not r["name"].startswith("return:")}
    tensors |= set(re.findall(r"\b(?:auto|(?:torch|at)::Tensor)\s*&?\s*(\w+)\s*=\s*(?:torch|at)::", code))
    alt = "|".join(map(re.escape, sorted(tensors)))
    m = alt and re.search(rf"(?<![.\w])(?:{alt})\s*[-+*/](?![=>-])|[-+*/]\s*(?:{alt})\b(?!\s*[.\[(])", code)
    return f"tensor arithmetic ({m.group(0).strip()})" if m else None
