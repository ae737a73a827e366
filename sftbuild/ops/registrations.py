"""A package's own table of the ATen ops it implements, read by AST: the op a function is registered for.

Packages that replace ATen ops with their own kernels (FlagGems, for one) name the op exactly where
they register the function: a table of `("add.Tensor", add)` pairs, or `lib.impl("add.Tensor", add,
"CUDA")` calls on a `torch.library.Library`. `registered(tree)` reads every .py file under `tree`
with `ast` only (harvested code is never imported here) and returns {function name: [ATen op names]}.
A table counts when it holds at least `MIN_PAIRS` such pairs, so a stray `("x", y)` tuple does not.

`candidates(aten_name, known)` turns an ATen op name into the registry's op names that compute it: the
hand-written op of that name, torch's op_db entries of that name (`opdb.<name>`, its variants,
`opdb.nn.functional.<name>`, `opdb.special.<name>`, `opdb.linalg.<name>`), leading underscores
and a `native_` prefix dropped (`_softmax` -> softmax, `native_layer_norm` -> layer_norm), and torch's
own aliases followed (`arctanh` -> atanh).
In-place (`add_`) and `out=` overloads get none: their result is an input the call overwrites,
which validation's inputs-unchanged check rejects. The probe still decides: a registration names
the op to try first, it does not make a binding.
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

from sftbuild.ops.package_refs import python_files

ATEN = re.compile(r"^(aten::)?(?P<base>_{0,2}[a-z][a-z0-9_]*)(\.(?P<overload>[A-Za-z0-9_]+))?$")
PAIR_TEXT = re.compile(r"""\(\s*["'][a-z_][\w.:]*["']\s*,\s*[A-Za-z_]""")
MIN_PAIRS = 3
SKIP_DIRS = {"__pycache__", ".git", "node_modules", "build", "dist", "tests", "test"}
NAMESPACES = ("", "nn.functional.", "special.", "linalg.", "fft.")


def registered(tree: str | Path) -> dict[str, list[str]]:
    """{function name: [ATen op names, in file order]} from the registration tables under `tree`."""
    return {k: list(v) for k, v in _registered(str(Path(tree).resolve())).items()}


@lru_cache(maxsize=8)
def _registered(tree: str) -> dict[str, tuple[str, ...]]:
    found: dict[str, list[str]] = {}
    root = Path(tree)
    if not root.is_dir():
        return {}
    for rel, path in python_files(root, SKIP_DIRS):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
            if len(PAIR_TEXT.findall(text)) < MIN_PAIRS and ".impl(" not in text:
                continue
            mod = ast.parse(text, filename=str(path))
        except (SyntaxError, ValueError, OSError, RecursionError):
            continue
        for func, aten in pairs(mod):
            if aten not in found.setdefault(func, []):
                found[func].append(aten)
    return {k: tuple(v) for k, v in found.items()}


def pairs(mod: ast.AST) -> list[tuple[str, str]]:
    """(function name, ATen op name) for each registration in a parsed module."""
    out: list[tuple[str, str]] = []
    for node in ast.walk(mod):
        if isinstance(node, (ast.Tuple, ast.List)):
            found = [p for p in (_pair(e) for e in node.elts) if p]
            if len(found) >= MIN_PAIRS:
                out += found
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "impl" \
                and len(node.args) >= 2:
            name, fn = _aten(node.args[0]), _func(node.args[1])
            if name and fn:
                out.append((fn, name))
    return out


def _pair(e) -> tuple[str, str] | None:
    if isinstance(e, ast.Tuple) and len(e.elts) >= 2:
        name, fn = _aten(e.elts[0]), _func(e.elts[1])
        if name and fn:
            return fn, name
    return None


def _aten(node) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and ATEN.match(node.value):
        return node.value.removeprefix("aten::")
    return None


def _func(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def candidates(aten: str, known, aliases: dict | None = None) -> list[str]:
    """The op names in `known` (a container of registry op names) that compute ATen op `aten`;
    `aliases` maps torch's other names for an op to op_db's (`arctanh` -> `atanh`, opdb.aliases)."""
    m = ATEN.match(aten)
    if not m:
        return []
    base, overload = m.group("base"), m.group("overload") or ""
    if (base.endswith("_") and not base.endswith("__")) or overload == "out" or overload.endswith("_out"):
        return []
    out: list[str] = []
    names = [base, base.lstrip("_"), base.lstrip("_").removeprefix("native_")]
    names += [aliases[n] for n in names if n in (aliases or ())]
    for name in dict.fromkeys(names):
        wanted = [name] + [f"opdb.{ns}{name}" for ns in NAMESPACES] + \
            [f"opdb.torch.ops.aten.{base}.{overload or 'default'}"]
        for w in wanted:
            if w in known and w not in out:
                out.append(w)
        for k in sorted(k for k in known if k.startswith(f"opdb.{name}.")):  # op_db variants
            if k not in out:
                out.append(k)
    return out
