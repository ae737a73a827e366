"""Which parameters a kernel writes: its outputs are the pointers the code stores through.

Read from the code's text or syntax tree, never run. A pointer the kernel writes is an
output; everything else (const pointers, non-const pointers only read, scalars) is an input.

CUDA: stores `p[i] = v`, `*p = v`, `*(p + i) = v`, compound assignments and increments,
`p->f = v`, atomics and store intrinsics (`atomicAdd(&p[i], v)`, `__stcs(p + i, v)`),
`memcpy`/`memset` into it, and any of these through a pointer derived from the parameter
(`float4* q = reinterpret_cast<float4*>(p)`). A non-const pointer handed bare to another
function counts as written: that function may store through it.

Triton: `tl.store` and `tl.atomic_*` whose pointer's base (the additive terms of the
pointer expression, followed through local assignments and `tl.make_block_ptr(base=...)`)
is the parameter; offsets and strides (products) are not bases.
"""
from __future__ import annotations

import ast
import re

from sftbuild.parsing import kernel_view

ASSIGN_OP = r"(?:=(?!=)|[+\-*/%&|^]=|<<=|>>=|\+\+|--)"
ASSIGN = re.compile(r"(?<![=!<>+\-*/%&|^])=(?!=)")  # a plain assignment, not ==, <=, +=
MAX_CODE = 200_000  # characters of a kernel read; the rest is not looked at
SPAN = 2_000  # how far a subscript or argument list is followed
READ_ONLY_CALLS = {"__ldg", "__ldca", "__ldcg", "__ldcs", "__ldlu", "__ldcv", "min", "max", "sizeof", "static_cast",
                   "reinterpret_cast", "const_cast", "if", "for", "while", "switch", "return", "float4", "make_float4"}


def roles(language: str, code: str, kernel: str, params: list[str]) -> tuple[list[str], list[str]]:
    """(reads, writes): parameter names in declaration order; empty when the code cannot be read."""
    names = [param_name(p) for p in params]
    read = {"cuda": lambda: _cuda_writes(code, kernel, params), "triton": lambda: _triton_writes(code, kernel)}
    try:
        written = read[language]() if language in read else set()
    except RecursionError:  # an expression nested past Python's limit: say nothing about writes
        written = set()
    meta = {param_name(p) for p in params if language == "triton" and _meta_param(p)}
    return [n for n in names if n not in written and n not in meta], [n for n in names if n in written]


def _meta_param(param: str) -> bool:
    """A Triton compile-time parameter (`tl.constexpr`, or a block size such as XBLOCK): no data read."""
    return "constexpr" in param or bool(re.fullmatch(r"[A-Z0-9_]*BLOCK[A-Z0-9_]*", param_name(param)))


def param_name(param: str) -> str:
    names = re.findall(r"[A-Za-z_]\w*", param.split("=")[0].split("[")[0])
    return names[-1] if names else param


# ---- CUDA ----------------------------------------------------------------------------

def _body(code: str, kernel: str) -> str:
    """The kernel's body (between its definition's braces), else the whole code; comments removed,
    string literals emptied."""
    view = kernel_view(code)
    k = view.kernel(kernel)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', (k.body if k else view.text)[:MAX_CODE])


def _data_const(decl: str) -> bool:
    """`const T*` or `T const*`: the pointed-to data is const (a `T* const` pointer is not)."""
    star = decl.rfind("*")
    return star >= 0 and "const" in re.findall(r"\w+", decl[:star])


def _cuda_writes(code: str, kernel: str, params: list[str]) -> set[str]:
    body = _body(code, kernel)
    pointers = {param_name(p): p for p in params if ("*" in p or "[" in p) and not _data_const(p)}
    written = set()
    for name in pointers:
        aliases = _aliases(body, name)
        if any(_stores(body, a) for a in aliases):
            written.add(name)
    return written


def _aliases(body: str, name: str) -> set[str]:
    """`name` and the non-const pointers assigned from it, to a fixed point (one pass per statement,
    linear in the code: it is untrusted and may be built to make a regex backtrack)."""
    assigns = []
    for stmt in re.split(r"[;{}]", body):
        eq = ASSIGN.search(stmt)
        lhs = eq and re.search(r"([A-Za-z_]\w*)\s*$", stmt[:eq.start()])
        if lhs:
            typ = stmt[:lhs.start()].split("(")[-1]
            assigns.append((typ, lhs.group(1), set(re.findall(r"[A-Za-z_]\w*", stmt[eq.end():]))))
    found = {name}
    for _ in range(4):
        grew = False
        for typ, lhs, rhs in assigns:
            if lhs in found or _data_const(typ if "*" in typ else typ + "*"):
                continue
            if rhs & found and ("*" in typ or "auto" in typ or not typ.strip()):
                found.add(lhs)
                grew = True
        if not grew:
            break
    return found


def _stores(body: str, n: str) -> bool:
    w = re.escape(n)
    for n, m in enumerate(re.finditer(r"\b" + w + r"\s*\[", body)):  # n[...] (balanced) then an assignment
        if n >= 500:
            break
        depth, i, stop = 1, m.end(), min(len(body), m.end() + SPAN)
        while i < stop and depth:
            depth += {"[": 1, "]": -1}.get(body[i], 0)
            i += 1
        if re.match(r"\s*(?:\[[^\]]*\]\s*)*(?:\.\s*\w+\s*)*" + ASSIGN_OP, body[i:i + SPAN]):
            return True
        if re.search(r"(?:\+\+|--)\s*$", body[:m.start()]):
            return True
    patterns = [
        r"\*\s*" + w + r"\s*" + ASSIGN_OP,  # *n = v
        r"\*\s*\(\s*" + w + r"\b[^;()]*(?:\([^;()]*\)[^;()]*)*\)\s*" + ASSIGN_OP,  # *(n + i) = v
        r"\b" + w + r"\s*->\s*\w+\s*" + ASSIGN_OP,  # n->f = v
        r"\b(?:atomic\w*|__st\w*|red\w*|\w*[Ss]tore\w*|memcpy\w*|memset\w*)\s*\(\s*[&(]*\s*" + w + r"\b",
    ]
    if any(re.search(p, body) for p in patterns):
        return True
    # handed bare (or offset) to another function, which may store through it
    arg = re.compile(r"[(,]\s*\(?\s*" + w + r"\s*(?=[+\-,)])")  # `f(p, ..)`, `f(p + i * n, ..)`
    for n, m in enumerate(arg.finditer(body)):
        if n >= 200:
            break
        callee = _callee(body, m.start())
        if callee and callee not in READ_ONLY_CALLS and not callee.startswith("__ld"):
            return True
    return False


def _callee(body: str, pos: int) -> str | None:
    """The name of the call whose argument list holds position `pos` (a `(` or `,`), if any."""
    depth, i = 0, pos
    while i >= max(0, pos - SPAN):
        ch = body[i]
        if ch in ")]}":
            depth += 1
        elif ch in "([{":
            if depth == 0:
                if ch != "(":
                    return None
                name = re.search(r"([A-Za-z_][\w:]*)\s*(?:<[^;<>]{0,200}>)?\s*$", body[max(0, i - 300):i])
                return name.group(1) if name else None
            depth -= 1
        elif ch == ";":
            return None
        i -= 1
    return None


def function_params(code: str, name: str) -> list[str] | None:
    """The parameter names of Python function `name` in `code`; None when it is not defined there."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name), None)
    return [a.arg for a in fn.args.args] if fn else None


def launcher(code: str) -> str | None:
    """The top-level Python function that launches a `@triton.jit` kernel (`kernel[grid](...)`),
    public ones first: the wrapper validation calls when the record names none."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    jits = {f.name for f in tree.body if isinstance(f, ast.FunctionDef)
            and any("jit" in ast.unparse(d) or "autotune" in ast.unparse(d) for d in f.decorator_list)}
    found = [f.name for f in tree.body if isinstance(f, ast.FunctionDef) and f.name not in jits and any(
        isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in jits for n in ast.walk(f))]
    return next((n for n in found if not n.startswith("_")), found[0] if found else None)


# ---- Triton --------------------------------------------------------------------------

def _triton_writes(code: str, kernel: str) -> set[str]:
    """The parameters of `kernel` it stores through, following calls into the module's own
    functions (a kernel often stores in a `@triton.jit` helper it hands the pointer to)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    fns = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    if kernel not in fns:
        return set()
    written: dict[str, set[str]] = {name: set() for name in fns}
    for _ in range(16):  # helpers calling helpers: a few rounds reach a fixed point
        changed = False
        for name, fn in fns.items():
            now = _stores_in(fn, fns, written)
            if now != written[name]:
                written[name], changed = now, True
        if not changed:
            break
    return written[kernel]


def _stores_in(fn: ast.FunctionDef, fns: dict, written: dict) -> set[str]:
    params = {a.arg for a in fn.args.args}
    assigned: dict[str, list[ast.AST]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    assigned.setdefault(t.id, []).append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name) and node.value:
            assigned.setdefault(node.target.id, []).append(node.value)
    # which parameters each local's value derives from, as a pointer base: a fixed point over the
    # assignments, so chains and cycles of any length cost linear passes, never exponential recursion
    origin: dict[str, set[str]] = {p: {p} for p in params if p not in assigned}

    def bases(expr) -> set[str]:
        if isinstance(expr, ast.Name):
            return origin.get(expr.id, set())
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
            return bases(expr.left) | bases(expr.right)
        if isinstance(expr, ast.Subscript):
            return bases(expr.value)
        if isinstance(expr, ast.Call):
            base = next((k.value for k in expr.keywords if k.arg == "base"), None)
            if base is None and _dotted(expr.func).endswith(("make_block_ptr", "advance")) and expr.args:
                base = expr.args[0]
            return bases(base) if base is not None else set()
        return set()

    users: dict[str, set[str]] = {}  # name -> the locals whose values mention it
    for name, values in assigned.items():
        for v in values:
            for n in ast.walk(v):
                if isinstance(n, ast.Name):
                    users.setdefault(n.id, set()).add(name)
    todo = list(assigned)
    while todo:  # a worklist: a local's set only grows (at most once per parameter)
        name = todo.pop()
        new = ({name} & params).union(*(bases(v) for v in assigned[name]))
        if not new <= origin.get(name, set()):
            origin[name] = origin.get(name, set()) | new
            todo.extend(users.get(name, ()))

    out = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name.endswith(".store") or ".atomic_" in name:
            ptr = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "pointer"), None)
            if ptr is not None:
                out |= bases(ptr)
        elif name in fns and written.get(name):  # a helper of this module that stores through its parameters
            callee = [a.arg for a in fns[name].args.args]
            out |= set().union(*(bases(a) for i, a in enumerate(node.args)
                                 if i < len(callee) and callee[i] in written[name]))
            out |= set().union(*(bases(k.value) for k in node.keywords if k.arg in written[name]))
    return out & params


def _dotted(node) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ""
