"""Bindings found by probing a CUDA record's extension function: a host function taking tensors.

Invariants:
  * `bind` answers None: only agreement on a GPU makes a binding (plan -> probe -> accept).
  * A function is probed when harvest found one that launches the record's kernel and no other
    (`entry["launcher"]`) and takes `torch::Tensor`/`at::Tensor`; each parameter has a role
    (`roles`): a tensor (an input, or, in a function returning nothing, an output where its kernel
    writes it or its name says so), a float or int scalar (the op's parameter of its name), a flag
    (tried false, then true), an optional tensor (passed absent). A template over more than one type,
    or a parameter of another type, is named in `why_not`.
  * Where the record's launcher is raw, an extension function of another file that calls it (harvest's
    `entry["extensions"]`, a binding `.cpp`) is the entry point: built on the launcher's code and that
    file's includes (`function_of`). A template over one type, or a function inside namespaces, is
    called through a global wrapper (at the dtype of its first tensor, for a template).
  * The module that exposes it (`entry["launcher"]["exposed"]`: the file's PYBIND11_MODULE or
    TORCH_LIBRARY* definition) is evidence; the probe builds a minimal PYBIND11_MODULE of its own
    around the function and the record's code (`sftbuild.validate.extension.build`, once per record),
    so the file's other functions never need to compile.
  * Dtypes: those its AT_DISPATCH_* macro names (float32 always; float16 and bfloat16 where named),
    every float dtype for a project's own dispatch macro (the probe keeps those that agree); a
    function with no dispatch is float-only, and its evidence says so (`dispatch`).
  * The shortlist is the host launcher's (`launched.shortlist`): names, the registry's ranking, data flow.
  * The binding's harness is `extension_function` (`harness_args`: each parameter's value, `call_args`).
"""
from __future__ import annotations

import re

from sftbuild import parsing
from sftbuild.ops.binders import BINDERS, Binder
from sftbuild.ops.binders import launched

PROBE_SECONDS = 240  # the module's build is most of it
TENSOR = re.compile(r"^(?:const\s+)?(?:torch|at)::Tensor\s*&?\s*(\w+)$")
OPTIONAL_TENSOR = re.compile(r"^(?:const\s+)?(?:c10|std)::optional\s*<\s*(?:torch|at)::Tensor\s*>\s*&?\s*(\w+)$")
INT_TYPES = {"int", "int64_t", "long", "int32_t", "unsigned", "size_t", "long long"}
FLOAT_TYPES = {"float", "double"}
RETURNS = re.compile(r"^\s*(?:static\s+|inline\s+)*(.+?)\s*\b(\w+)\s*\($")
DISPATCH = re.compile(r"\b\w*DISPATCH\w*\s*\(")  # AT_DISPATCH_*, and a project's own (VLLM_DISPATCH_FLOATING_TYPES)
SCALAR_ALIASES = {"epsilon": "eps", "variance_epsilon": "eps", "negative_slope": "negative_slope"}
# the host work an extension function may do beside launching its kernel: allocate, check, dispatch
TORCH_ALLOWED = re.compile(r"(?:empty|zeros|ones|full|from_blob|TensorOptions|Device|Tensor|IntArrayRef|Scalar|"
                           r"cuda|detail|getCurrent\w*|OptionalCUDAGuard|DeviceGuard|typeMetaToScalarType|"
                           r"elementSize|toString)\w*$")
TORCH_CALL = re.compile(r"\b(?:at|torch)::((?:\w+::)*\w+)\s*(?:<[^<>();]*>\s*)?\(")
TORCH_METHOD = re.compile(r"\.\s*(sum|mean|matmul|mm|bmm|addmm|softmax|log_softmax|exp|log|tanh|sigmoid|relu|gelu|"
                          r"silu|add|sub|mul|div|pow|sqrt|rsqrt|norm|amax|amin|max|min|cumsum|sort|topk|clamp|abs|"
                          r"neg|where|index_select|gather|scatter|layer_norm|linear|conv\w*|einsum)_?\s*\(")
LIBRARY_CALL = re.compile(r"\b(?:cublas(?!Check\b)\w+|cudnn(?!Check\b)\w+|thrust::\w+|cub::Device\w+::\w+)\s*\(")


@BINDERS.register
class ExtensionFunction(Binder):
    """Build the record's extension function into a module, call it on each shortlisted op's inputs
    and keep the op its outputs match over >= 3 shapes and every dtype it dispatches on."""
    name = "extension_function"
    version = 1
    order = 86
    languages = ("cuda",)
    task_fn = "sftbuild.validate.extension_probe:probe"

    def why_not(self, record) -> str:
        fn = function_of(record)
        if not fn:
            return "no host function taking tensors launches this kernel alone"
        return unprobeable(fn) or ""

    def cause(self, record) -> str:
        return "no_entry_point" if self.why_not(record) else "no_op_matched"  # else no op fits the data flow

    def plan(self, record, seconds: float = PROBE_SECONDS) -> dict | None:
        fn = function_of(record)
        if record.language != "cuda" or not fn or unprobeable(fn):
            return None
        found = roles(fn, record)
        candidates = launched.shortlist(record, found)
        if not candidates:
            return None
        entry = record.entry
        return {"id": record.id, "code": record.code, "function": fn["name"], "declaration": declaration(fn),
                "source": fn["code"], "roles": found, "returns": returns(fn)[1], "shortlist": candidates,
                "dtypes": fn.get("dtypes") or dtypes_of(record.code + fn["code"]),
                "dispatch": dispatch(record.code + fn["code"]) if not fn.get("wraps") else "its template's instances",
                "exposed": fn.get("exposed"), "shapes": 3, "time_limit": seconds,
                "headers": entry.get("headers") or {}, "include_dirs": entry.get("include_dirs") or []}

    def accept(self, record, result) -> dict | None:
        if not isinstance(result, dict) or not result.get("binding"):
            return None
        ev = result.get("evidence") or {}
        return {**result["binding"], "how": "probed",
                "evidence": {k: ev.get(k) for k in ("shapes", "dtypes", "worst_error", "candidates_tried",
                                                    "candidates_rejected", "dispatch", "exposed", "seconds")
                             if ev.get(k) is not None}}


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
    names = [_plain(p).split()[-1] for p in params]
    ret = returns(fn)[0] or "void"
    name, call, callee = f"sftbuild_{fn['name']}", ", ".join(names), "::" + (fn.get("qualified") or fn["name"])
    if fn.get("template"):
        first = next(n for p, n in zip(params, names) if TENSOR.match(_plain(p)))
        cases = "".join(f"    case {SCALAR_TYPES[ct]}: return {callee}<{ct}>({call});\n" for ct in types[1:])
        body = f"  switch ({first}.scalar_type()) {{\n{cases}    default: return {callee}<{types[0]}>({call});\n  }}\n"
    else:
        body = f"  return {callee}({call});\n"
    code = f"\n{ret} {name}({', '.join(params)}) {{\n{body}}}\n"
    dtypes = [launched.DTYPES[t][0] for t in types] if fn.get("template") else None
    return {**{k: v for k, v in fn.items() if k != "template"}, "name": name, "params": params, "wraps": fn["name"],
            "code": fn["code"] + code, "wrapper": code, **({"dtypes": dtypes} if dtypes else {})}


SCALAR_TYPES = {"float": "at::kFloat", "__half": "at::kHalf", "__nv_bfloat16": "at::kBFloat16"}
WORD = re.compile(r"\w+")


def takes_tensors(fn: dict) -> bool:
    return any(TENSOR.match(_plain(p)) for p in fn.get("params") or ())


def _plain(decl: str) -> str:
    """A parameter declaration without its default value and with spaces made single."""
    return " ".join(decl.split("=")[0].replace("&", " & ").split()).replace(" & ", "& ").replace(" &", "&")


def _head(fn: dict) -> str:
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
    head = _head(fn)
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


def roles(fn: dict, record=None) -> list[dict]:
    """One role per parameter: {name, type, role: in|out|float|int|flag|absent|other}. A tensor is an output
    only in a function returning no tensor, where its kernel writes it (`launched.written`'s data flow
    through `t.data_ptr<T>()`) or, that not known, where its name is an output's. A returned tensor
    adds one `out` role per tensor, named `return:k`, after the parameters."""
    n_ret = returns(fn)[1]
    writes = None
    if record is not None and not n_ret and not fn.get("path"):  # another file's function: its tensors name no pointer
        try:
            writes = launched.written(_as_raw(record))
        except (KeyError, TypeError):
            writes = None
    out = []
    for decl in fn.get("params") or ():
        plain = _plain(decl)
        m = TENSOR.match(plain)
        words = plain.replace("&", " ").split()
        name = words[-1] if words else ""
        base = " ".join(w for w in words[:-1] if w != "const")
        if m:
            wrote = not n_ret and (name in writes if writes else bool(launched.OUT_NAMES.match(name)))
            out.append({"name": name, "type": "Tensor", "role": "out" if wrote else "in"})
        elif base in FLOAT_TYPES:
            out.append({"name": name, "type": base, "role": "float"})
        elif base in INT_TYPES:
            out.append({"name": name, "type": base, "role": "int"})
        elif base == "bool":
            out.append({"name": name, "type": base, "role": "flag"})
        elif OPTIONAL_TENSOR.match(plain):  # probed without it: the function's path for an absent tensor
            out.append({"name": name, "type": "optional", "role": "absent"})
        else:
            out.append({"name": name, "type": plain, "role": "other"})
    return out + [{"name": f"return:{k}", "type": "Tensor", "role": "out"} for k in range(n_ret)]


def _as_raw(record):
    """The record with each `t.data_ptr<T>()` in its launcher read as the pointer `t`, so the host
    launcher's data flow (`launched.written`) names the tensors the kernel writes."""
    import dataclasses

    fn = record.entry["launcher"]
    code = re.sub(r"\b(\w+)\s*\.\s*(?:data_ptr|data|mutable_data_ptr|const_data_ptr)\s*(?:<[^<>()]*>)?\s*\(\s*\)",
                  r"\1", fn["code"])
    params = [f"float* {p['name']}" if p["type"] == "Tensor" else "int x" for p in
              [{"type": "Tensor" if TENSOR.match(_plain(d)) else "", "name": _plain(d).split()[-1]}
               for d in fn["params"]]]
    return dataclasses.replace(record, entry={**record.entry, "launcher": {**fn, "code": code, "params": params}})


def unprobeable(fn: dict) -> str | None:
    """Why an extension function cannot be called on generated tensors, or None."""
    found = roles(fn)
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
    tensors = {r["name"] for r in roles(fn) if r["type"] == "Tensor" and not r["name"].startswith("return:")}
    tensors |= set(re.findall(r"\b(?:auto|(?:torch|at)::Tensor)\s*&?\s*(\w+)\s*=\s*(?:torch|at)::", code))
    alt = "|".join(map(re.escape, sorted(tensors)))
    m = alt and re.search(rf"(?<![.\w])(?:{alt})\s*[-+*/](?![=>-])|[-+*/]\s*(?:{alt})\b(?!\s*[.\[(])", code)
    return f"tensor arithmetic ({m.group(0).strip()})" if m else None


def dispatch(code: str) -> str:
    """The dispatch macro the code dispatches with, or 'float only: no AT_DISPATCH' where none."""
    m = DISPATCH.search(code)
    return m.group(0).rstrip("( ") if m else "float only: no AT_DISPATCH"


def dtypes_of(code: str) -> list[str]:
    """float32, and float16/bfloat16 where the code's dtype dispatch names them; each of them for a
    dispatch macro of the project's own, defined out of sight (the probe keeps the dtypes that agree)."""
    m = DISPATCH.search(code)
    if not m:
        return ["float32"]
    if not m.group(0).startswith("AT_DISPATCH"):
        return ["float32", "float16", "bfloat16"]
    out = ["float32"]
    if re.search(r"AT_DISPATCH_\w*HALF|\bHalf\b", code):
        out.append("float16")
    if re.search(r"AT_DISPATCH_\w*BFLOAT16|\bBFloat16\b", code):
        out.append("bfloat16")
    return out


def declaration(fn: dict) -> str:
    """The function's declaration (its head, default values dropped), for the module's translation unit."""
    head = _head(fn)
    head = re.sub(r"\s*=\s*[^,()]+(?=[,)])", "", head)  # defaults belong to the definition's unit
    return re.sub(r"^\s*(?:static|inline)\s+", "", " ".join(head.split())) + ";"


def scalar(name: str, params: dict):
    """The op's parameter a scalar argument named `name` takes (`epsilon` takes `eps`), or None."""
    for key in (name, SCALAR_ALIASES.get(name.lower(), ""), name.lower()):
        if key in params:
            return params[key]
    return None


def arguments(found: list[dict], inputs: list[dict], n_outputs: int, params: dict):
    """Ways to call the function with an op's tensors, best named first: lists, one per parameter, of
    "t:k" (the op's k-th tensor, outputs then inputs, the `tensors` contract's order), "float:v",
    "int:v" or "flag:0|1"; then "return:k" slots say which output each returned tensor is."""
    import itertools

    ins = [r for r in found if r["role"] == "in"]
    outs = [r for r in found if r["role"] == "out"]
    if len(ins) != len(inputs) or len(outs) < n_outputs:
        return
    scalars = []
    for r in found:
        if r["role"] in ("float", "int"):
            v = scalar(r["name"], params)
            if v is None:
                return
            scalars.append([f"{r['role']}:{float(v) if r['role'] == 'float' else int(v)!r}"])
        elif r["role"] == "flag":
            scalars.append(["flag:0", "flag:1"])
        elif r["role"] == "absent":
            scalars.append(["none:"])
    out_order = sorted(range(len(outs)), key=lambda i: (not launched.OUT_NAMES.match(outs[i]["name"]), i))
    out_of = {id(outs[i]): f"t:{n}" if n < n_outputs else "scratch" for n, i in enumerate(out_order)}
    for perm in launched._input_orders(ins, inputs):
        in_of = {id(r): f"t:{n_outputs + j}" for r, j in zip(ins, perm)}
        for values in itertools.product(*scalars):
            it = iter(values)
            yield [in_of[id(r)] if r["role"] == "in" else out_of[id(r)] if r["role"] == "out" else next(it)
                   for r in found]


def call_args(fn: dict, args: list[str]) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """For the `extension_function` harness: declarations of the tensor arguments (tensor k is
    `sftbuild_t(k)`, a scratch output `sftbuild_scratch()`; locals, so a `Tensor&` parameter binds),
    the call's arguments, and (returned value, tensor) pairs, each result to copy into its output."""
    found = roles(fn)
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
