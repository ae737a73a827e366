"""Parsers the stages share, built once per process.

`cuda_parser()` is the tree-sitter CUDA parser: harvest extracts kernels with it and
describe reads features from its trees. `cuda_language()` is its grammar, for queries.
`param_info(decl)` reads one C/CUDA parameter declaration: harvest reads kernel, launcher and
CPU-function signatures with it, and binders read the records' kernel parameters.
`params(fn)`, `default_hints(tree)` and `is_jit(fn)` read Python functions from their syntax trees,
never running them: harvest reads entry points with them, and the probe's binder a package's defaults.
"""
from __future__ import annotations

import ast
import functools
import re

import tree_sitter as ts
import tree_sitter_cuda


@functools.lru_cache(maxsize=1)
def cuda_language() -> ts.Language:
    return ts.Language(tree_sitter_cuda.language())


@functools.lru_cache(maxsize=1)
def cuda_parser() -> ts.Parser:
    return ts.Parser(cuda_language())


INT_WORDS = {"int", "long", "size_t", "unsigned", "int64_t", "int32_t", "uint32_t", "uint64_t", "short"}
FLOAT_WORDS = {"float", "double"}


def param_info(decl: str) -> dict | None:
    """{type, name, ptr, const, kind: ptr|int|float} of one parameter declaration, None when unreadable."""
    decl = re.sub(r"\b(__restrict__|__restrict|restrict)\b", " ", decl.split("=")[0])
    if "&" in decl or "[" in decl or "(" in decl or decl.count("*") > 1:
        return None
    words = re.findall(r"[A-Za-z_]\w*", decl)
    if len(words) < 2:
        return None
    name, types = words[-1], [w for w in words[:-1] if w not in ("const", "volatile", "signed")]
    if not types:
        return None
    ptr = "*" in decl
    base = " ".join(types)
    const = "const" in words[:-1] and (not ptr or decl.find("const") < decl.find("*"))
    if ptr:
        kind = "ptr"
    elif set(types) <= INT_WORDS:
        kind = "int"
    elif set(types) <= FLOAT_WORDS:
        kind = "float"
    else:
        return None
    return {"type": base, "name": name, "ptr": ptr, "const": const, "kind": kind}


def literal(node, depth: int = 0, budget: list | None = None):
    """The value of a Python literal expression, read from its AST alone (never evaluated): numbers,
    strings, bytes, booleans, None, and tuples, lists, sets and dicts of them, with a unary sign.
    Nesting deeper than 16, more than 10,000 elements or a constant over 100,000 characters raise
    ValueError, as does anything else (a call, a name, an operator): hostile defaults cost nothing."""
    import ast

    budget = [10_000] if budget is None else budget
    budget[0] -= 1
    if depth > 16 or budget[0] < 0:
        raise ValueError("literal too large")
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, (str, bytes)) and len(v) > 100_000 or isinstance(v, int) and v.bit_length() > 4096:
            raise ValueError("literal too large")
        return v
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and \
            isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float, complex):
        v = literal(node.operand, depth + 1, budget)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [literal(e, depth + 1, budget) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else set(items) if isinstance(node, ast.Set) else items
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {literal(k, depth + 1, budget): literal(v, depth + 1, budget) for k, v in zip(node.keys, node.values)}
    raise ValueError("not a literal")


# ---- Python signatures: what harvest and the probe's binder read of a Triton package's functions ----

def decorator_names(fn) -> list[str]:
    """The dotted names a function's decorators call or are (`triton.jit`, `triton.autotune`)."""
    out = []
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        out.append(ast.unparse(target))
    return out


def is_jit(fn) -> bool:
    """Decorated by anything named `jit`, whatever it resolves to (see `Languages` for Triton's)."""
    return isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        n.split(".")[-1] == "jit" for n in decorator_names(fn))


def aliases(tree: ast.Module, names: set[str]) -> dict[str, str]:
    """Module-level names bound to one of `names` (`exp__kernel = exp_`, kept before a wrapper of the
    same name replaces the kernel's): {alias: name}, chains followed."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            target = out.get(node.value.id, node.value.id if node.value.id in names else None)
            if target:
                out.update({t.id: target for t in node.targets if isinstance(t, ast.Name) and t.id != target})
    return out


def default_hints(tree: ast.AST) -> dict:
    """Literal defaults the whole file declares, by parameter name (`casting_mode="llama"` on an
    autograd Function): the values a wrapper without defaults is usually called with."""
    out: dict = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and not is_jit(fn):
            for p in params(fn):
                if p["has_default"] and not isinstance(p["default"], dict) and p["kind"] in ("pos", "kwonly"):
                    out.setdefault(p["name"], p["default"])
    return out


def params(fn, drop_first: bool = False) -> list[dict]:
    """A function's parameters in order: name, literal default (or its source), annotation, kind."""
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    out = []
    for arg, d in zip(pos, defaults):
        out.append(param_of(arg, d, "pos"))
    if a.vararg:
        out.append({**param_of(a.vararg, None, "var"), "has_default": True})
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append(param_of(arg, d, "kwonly"))
    if a.kwarg:
        out.append({**param_of(a.kwarg, None, "varkw"), "has_default": True})
    return out[1:] if drop_first and out else out


def param_of(arg: ast.arg, default, kind: str) -> dict:
    value = None
    if default is not None:
        try:  # read from the AST, never evaluated: the default is the harvested file's text
            value = literal(default)
        except (ValueError, TypeError):
            value = {"source": ast.unparse(default)}  # not a literal: the callee's own default applies
    return {"name": arg.arg, "default": value, "has_default": default is not None,
            "annotation": ast.unparse(arg.annotation) if arg.annotation is not None else None, "kind": kind}
