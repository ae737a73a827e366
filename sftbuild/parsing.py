"""Parsers the stages share, built once per process.

`cuda_parser()` is the tree-sitter CUDA parser: harvest extracts kernels with it and
describe reads features from its trees. `cuda_language()` is its grammar, for queries.
`param_info(decl)` reads one C/CUDA parameter declaration: harvest reads kernel, launcher and
CPU-function signatures with it, and binders read the records' kernel parameters.
"""
from __future__ import annotations

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
