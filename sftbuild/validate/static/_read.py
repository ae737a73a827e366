"""Reading code without running it: dotted names, import aliases, constant integers.

Shared by the static checks of this folder (comments and kernels: sftbuild.parsing.kernel_view);
the leading underscore keeps the registry from taking it for a check.
"""
from __future__ import annotations

import ast
import re


def dotted(node: ast.AST) -> str:
    """`torch.nn.functional.relu` for an attribute chain, '' for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def is_jit(f: ast.FunctionDef) -> bool:
    return any("jit" in dotted(d.func if isinstance(d, ast.Call) else d) or
               "autotune" in dotted(d.func if isinstance(d, ast.Call) else d) for d in f.decorator_list)


def aliases(tree: ast.AST) -> dict[str, str]:
    """Import aliases, so `import torch.nn.functional as F` makes `F.relu` read as the full name."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def called_names(node: ast.AST, aside: set[int] = frozenset()) -> set[str]:
    """The plain names called anywhere under `node` (`f(...)`, not `obj.f(...)`), but by calls whose
    ids are in `aside`."""
    return {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and id(n) not in aside}


def launched_name(node: ast.AST) -> str | None:
    """The name a call launches or calls: `k` for `k[grid](...)` and for `k(...)`; None otherwise."""
    if not isinstance(node, ast.Call):
        return None
    target = node.func.value if isinstance(node.func, ast.Subscript) else node.func
    return target.id if isinstance(target, ast.Name) else None


def full_name(node: ast.AST, aliases: dict[str, str]) -> str:
    name = dotted(node)
    head, _, rest = name.partition(".")
    if head in aliases:
        return aliases[head] + ("." + rest if rest else "")
    return name


def const_int(expr: str, defines: dict[str, int]) -> int | None:
    """Evaluate a small integer expression of literals and known macros; None when unknown."""
    expr = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", expr.strip())
    expr = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: str(defines[m.group(0)]) if m.group(0) in defines else m.group(0), expr)
    if not re.fullmatch(r"[\d\s+\-*/()<>]+", expr):
        return None
    try:
        return int(eval(expr.replace("/", "//"), {"__builtins__": {}}))  # digits and operators only
    except Exception:
        return None


def defines(code: str) -> dict[str, int]:
    """Integer macros and constants (`#define N 256`, `constexpr int N = 256;`) in CUDA C++ text."""
    out: dict[str, int] = {}
    for m in re.finditer(r"(?:#define\s+(\w+)\s+([^\n]+)|(?:constexpr|const)\s+(?:static\s+)?(?:unsigned\s+)?"
                         r"(?:int|long|size_t|int64_t|int32_t|unsigned)\s+(\w+)\s*=\s*([^;]+);)", code):
        name, val = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        v = const_int(val, out)
        if v is not None:
            out[name] = v
    return out


def host_only(code: str) -> str:
    """Drop __global__/__device__ function bodies, whose `.x` etc. are not tensor methods."""
    out, i = [], 0
    for m in re.finditer(r"__(?:global|device)__[^{;]*\{", code):
        if m.start() < i:
            continue
        out.append(code[i:m.start()])
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        i = j
    out.append(code[i:])
    return "".join(out)
