"""Read a KernelBench solution's load_inline arguments without running it.

Most solutions pass module-level string constants; those are resolved here so the
extension is built in the CPU pool. Anything computed at run time returns None and
the GPU worker builds it through the same cache instead.
"""
from __future__ import annotations

import ast

from sftbuild.parsing import literal

ARGS = ("name", "cpp_sources", "cuda_sources", "functions")


def extract(code: str) -> dict | None:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                consts[node.targets[0].id] = _value(node.value, consts)
            except ValueError:
                pass
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("load_inline")]
    if len(calls) != 1:
        return None
    call = calls[0]
    args = dict(zip(ARGS, call.args))
    args.update({k.arg: k.value for k in call.keywords if k.arg})
    out = {}
    try:
        for key in ARGS + ("extra_cuda_cflags", "extra_cflags"):
            if key in args:
                out[key] = _value(args[key], consts)
    except ValueError:
        return None
    if "name" not in out or "cpp_sources" not in out:
        return None
    return out


def _value(node, consts):
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, consts) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _value(node.left, consts) + _value(node.right, consts)
    try:
        return literal(node)
    except Exception:
        raise ValueError("not a constant") from None
