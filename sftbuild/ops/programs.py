"""Reference programs (a KernelBench `Model` source, an Inductor graph's program): what they declare.

Invariants:
  * A program is harvested code: it is read from its syntax tree here, never run.
  * `declared_dtypes(reference)` is the float dtypes its `get_inputs()` makes tensors in, float32 (torch's
    default) where it names none; describe, validate's pipeline and the trials read the same answer.
"""
from __future__ import annotations

import ast

FLOAT_DTYPES = {"float32": "float32", "float": "float32", "float16": "float16", "half": "float16",
                "bfloat16": "bfloat16"}


def declared_dtypes(reference: str) -> list[str]:
    """The float dtypes a reference program's `get_inputs()` makes its tensors in, read from its source
    (never run: the program is harvested code): `dtype=torch.X`, `.to(torch.X)`, `.half()`,
    `.bfloat16()`, `.float()`, through a module-level name (`DTYPE = torch.float16`) too; float32,
    torch's default, where it names none. In the order they first appear."""
    try:
        tree = ast.parse(reference)
    except SyntaxError:
        return ["float32"]
    names = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
             if isinstance(t, ast.Name)}
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
    found: list[str] = []
    for node in ast.walk(fn) if fn else ():
        for expr in _dtype_exprs(node):
            d = _float_dtype(names.get(expr.id, expr) if isinstance(expr, ast.Name) else expr)
            if d and d not in found:
                found.append(d)
    return found or ["float32"]


def _dtype_exprs(node) -> list:
    """The expressions naming a dtype at one node: a `dtype=` keyword, `.to(X)`'s argument, or the
    method itself (`.half()`) as a bare attribute."""
    if not isinstance(node, ast.Call):
        return []
    out = [k.value for k in node.keywords if k.arg == "dtype"]
    if isinstance(node.func, ast.Attribute):
        if node.func.attr == "to":
            out += node.args[:1]
        elif node.func.attr in ("half", "bfloat16", "float") and not node.args:
            out.append(node.func)
    return out


def _float_dtype(expr) -> str | None:
    """float32 / float16 / bfloat16 for `torch.float16`, `torch.half`, a method `.half`; else None."""
    name = expr.attr if isinstance(expr, ast.Attribute) else None
    return FLOAT_DTYPES.get(name or "")
