"""Extract `@triton.jit` kernels from Python with `ast`.

For each kernel we keep, in file order: the imports it and its wrappers use,
the module-level constants and helpers they reach by name (other jit functions,
constexpr globals, plain Python helpers), the kernel with its decorators
(`@triton.autotune`, `@triton.heuristics` included), and the wrappers that
launch it (`kernel[grid](...)`). A class whose method launches it is kept whole.
"""
from __future__ import annotations

import ast
import dataclasses


@dataclasses.dataclass
class TritonKernel:
    name: str
    code: str
    lines: tuple[int, int]
    params: list[str]
    imports: list[str]
    needs: list[str]  # names imported from modules that may not exist standalone (relative imports)
    launch_sites: list[dict]
    autotune: bool
    heuristics: bool
    helpers: list[str]


@dataclasses.dataclass
class _Stmt:
    node: ast.stmt
    defines: set[str]
    uses: set[str]
    start: int  # 1-based, decorators included
    end: int


def _decorator_names(fn) -> list[str]:
    out = []
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        out.append(ast.unparse(target))
    return out


def is_jit(fn) -> bool:
    return isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        n.split(".")[-1] == "jit" for n in _decorator_names(fn))


def _names(node) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            base = n
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name):
                out.add(base.id)
    return out


def _stmt(node) -> _Stmt:
    defines: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        defines.add(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for a in node.names:
            defines.add((a.asname or a.name).split(".")[0])
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            defines |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return _Stmt(node, defines, _names(node) - defines, start, node.end_lineno)


def _launches(node, kname: str) -> list[int]:
    """Lines where `kname[grid](...)` (or `kname.run(...)`) is called inside node."""
    lines = []
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Subscript) and isinstance(f.value, ast.Name) and f.value.id == kname:
                lines.append(n.lineno)
            elif isinstance(f, ast.Attribute) and f.attr == "run" and isinstance(f.value, ast.Name) \
                    and f.value.id == kname:
                lines.append(n.lineno)
    return lines


def extract_kernels(src: str) -> tuple[list[TritonKernel], list[dict]]:
    """Kernels in a Python file, and every other jit function with a reason (raises SyntaxError)."""
    tree = ast.parse(src)
    lines = src.splitlines()
    stmts = [_stmt(n) for n in tree.body if not _is_main_guard(n)]
    by_name: dict[str, list[int]] = {}
    for i, s in enumerate(stmts):
        for name in s.defines:
            by_name.setdefault(name, []).append(i)

    jit_names = {s.node.name for s in stmts if is_jit(s.node)}
    # a jit function only called from other jit functions is a device helper: it is part of
    # every kernel that calls it, not a kernel of its own
    called = {n for s in stmts if is_jit(s.node) for n in _called(s.node) if n != s.node.name} & jit_names
    launched = {n for s in stmts if not is_jit(s.node) for n in jit_names if _launches(s.node, n)}
    kernels, others = [], []
    for i, s in enumerate(stmts):
        if not is_jit(s.node):
            continue
        kname = s.node.name
        if kname in called and kname not in launched:
            others.append({"line": s.start, "reason": "device_helper", "detail": kname})
            continue
        wrappers = [j for j, w in enumerate(stmts) if j != i and not is_jit(w.node) and _launches(w.node, kname)]
        need = _closure([i, *wrappers], stmts, by_name)
        chosen = [stmts[j] for j in sorted(need)]
        code = "\n\n".join("\n".join(lines[c.start - 1:c.end]) for c in chosen) + "\n"
        imports = [ast.unparse(c.node) for c in chosen if isinstance(c.node, (ast.Import, ast.ImportFrom))]
        needs = sorted({a.asname or a.name for c in chosen if isinstance(c.node, ast.ImportFrom) and c.node.level
                        for a in c.node.names})
        decos = _decorator_names(s.node)
        kernels.append(TritonKernel(
            name=kname, code=code, lines=(s.start, s.end),
            params=[a.arg for a in s.node.args.args],
            imports=imports, needs=needs,
            launch_sites=[{"function": stmts[j].node.name if hasattr(stmts[j].node, "name") else "",
                           "lines": [stmts[j].start, stmts[j].end], "line": ln}
                          for j in wrappers for ln in _launches(stmts[j].node, kname)],
            autotune=any(d.split(".")[-1] == "autotune" for d in decos),
            heuristics=any(d.split(".")[-1] == "heuristics" for d in decos),
            helpers=sorted(stmts[j].node.name for j in need if j != i and is_jit(stmts[j].node)),
        ))
    top = {id(s.node) for s in stmts}
    for n in ast.walk(tree):
        if is_jit(n) and id(n) not in top:
            others.append({"line": n.lineno, "reason": "nested_definition", "detail": n.name})
    return kernels, others


def _called(fn) -> set[str]:
    return {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def _is_main_guard(node) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)


def _closure(start: list[int], stmts: list[_Stmt], by_name) -> set[int]:
    need, todo = set(start), list(start)
    while todo:
        s = stmts[todo.pop()]
        for name in s.uses:
            for j in by_name.get(name, ()):
                if j not in need:
                    need.add(j)
                    todo.append(j)
    return need


def count_jit(src: str) -> int:
    """Every jit-decorated function in a file, nested or not (for recall accounting)."""
    return sum(1 for n in ast.walk(ast.parse(src)) if is_jit(n))
