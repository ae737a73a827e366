"""Extract `@triton.jit` kernels from Python with `ast`.

Which functions are Triton kernels is decided by `Languages`: each decorator is resolved through
the file's imports (`from triton import jit`, `import triton.language as tl`, `from cutlass import
cute`, `from triton.experimental import gluon`, module-level aliases). A `jit` that resolves into
`triton` (outside `triton.experimental`) is Triton. Kernels of other Python DSLs (CuTe DSL, Gluon,
TileLang, numba.cuda, cupy, Helion, Warp, cuTile, TVM, jax, ...) and CUDA source in Python strings
(cupy `RawKernel`, pycuda `SourceModule`) are never Triton: they are listed with reason
`unsupported_dsl` and the DSL named. A `jit` from elsewhere (a package's own re-export) counts as
Triton only when the function's body uses `triton.language`.

For each kernel we keep, in file order: the imports it and its wrappers use,
the module-level constants and helpers they reach by name (other jit functions,
constexpr globals, plain Python helpers), the kernel with its decorators
(`@triton.autotune`, `@triton.heuristics` included), and the wrappers that
launch it (`kernel[grid](...)`, or a plain call when a decorator makes the kernel
callable). A class whose method launches it is kept whole.

A backward kernel's record also keeps the autograd Function whose backward launches it
(`backward_functions`). A kernel that only another module of its package launches
(`from .kernels import _k` then `_k[grid](...)`) gets that module's launcher appended by the
harvest stage: `foreign_launchers(src, rel)` lists a file's launchers of imported kernels, with
their relative imports made absolute, and `attach_launchers(code, launchers)` joins them.

`entry_points(code)` reads the emitted code (never imports it) and lists the
callables that launch its kernels, directly or through same-code helpers:

    {"qualname": "swiglu_forward" | "Cls.apply" | "Cls", "kind": "function" | "autograd" | "module",
     "params": [{"name", "default", "has_default", "annotation", "kind", "hint"?}], "init": [...] (modules),
     "launches": [kernel names], "role": "forward" | "backward",
     "backward": {"launches": [...]} (autograd: what its backward launches)}
"""
from __future__ import annotations

import ast
import dataclasses
import re

from sftbuild.parsing import decorator_names as _decorator_names
from sftbuild.parsing import aliases, default_hints, is_jit, literal, walk
from sftbuild.parsing import params as _params


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
    entry_points: list[dict] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Stmt:
    node: ast.stmt
    defines: set[str]
    uses: set[str]
    start: int  # 1-based, decorators included
    end: int


# module prefix -> DSL name, most specific first; a decorator resolving here is never Triton
DSLS = [("triton.experimental.gluon", "gluon"), ("triton.experimental", "triton_experimental"),
        ("cutlass", "cute_dsl"), ("tilelang", "tilelang"), ("tvm", "tvm"), ("numba", "numba_cuda"),
        ("cupyx", "cupy"), ("cupy", "cupy"), ("helion", "helion"), ("warp", "warp"), ("cuda.tile", "cutile"),
        ("pycuda", "pycuda"), ("jax", "jax"), ("taichi", "taichi"), ("mlx", "mlx")]
KERNEL_WORDS = {"jit", "kernel", "prim_func", "fuse", "rawkernel"}  # what a kernel decorator is called
SOURCE_CALLS = {"RawKernel", "RawModule", "ElementwiseKernel", "ReductionKernel", "SourceModule"}  # CUDA in strings
# what an unimported name means in snippets that use the usual aliases
USUAL = {"tl": "triton.language", "triton": "triton", "gluon": "triton.experimental.gluon", "cute": "cutlass.cute",
         "tilelang": "tilelang", "wp": "warp", "helion": "helion", "cp": "cupy", "ct": "cuda.tile"}
HINTS = (b"jit", b"kernel", b"prim_func", b"fuse", b"RawKernel", b"RawModule", b"SourceModule")


def may_define_kernels(data: bytes) -> bool:
    """A cheap test: can this Python file hold a kernel of any DSL (is it worth parsing)?"""
    return any(h in data for h in HINTS)


class Languages:
    """The language of each kernel-decorated function of one module, read through its imports."""

    def __init__(self, tree: ast.Module):
        self.names: dict[str, str] = {}
        self._kinds: dict[int, tuple[str, str] | None] = {}
        for node in walk(tree):  # breadth first: module-level imports bind first
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.names.setdefault(a.asname or a.name.split(".")[0], a.name if a.asname
                                          else a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                mod = "." * node.level + (node.module or "")
                for a in node.names:
                    if a.name != "*":
                        self.names.setdefault(a.asname or a.name, mod + ("" if mod.endswith(".") else ".") + a.name)
        for node in tree.body:  # `jit = triton.jit`, `tl = triton.language`
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute)):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id not in self.names:
                        self.names[t.id] = self.qualify(ast.unparse(node.value))

    def qualify(self, dotted: str) -> str:
        root, dot, rest = dotted.partition(".")
        return (self.names.get(root) or USUAL.get(root, root)) + dot + rest

    def of(self, fn) -> str | None:
        """"triton", another DSL's name, or None when `fn` is not a kernel definition at all."""
        kind = self.kind(fn)
        return kind[0] if kind else None

    def kind(self, fn) -> tuple[str, str] | None:
        """(language, the decorator as written) of a kernel definition, else None."""
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        if id(fn) not in self._kinds:
            self._kinds[id(fn)] = self._kind(fn)
        return self._kinds[id(fn)]

    def _kind(self, fn) -> tuple[str, str] | None:
        written = _decorator_names(fn)
        qualified = [self.qualify(d) for d in written]
        for d, q in zip(written, qualified):
            dsl = _dsl(q)
            if dsl and q.rsplit(".", 1)[-1] in KERNEL_WORDS:
                return dsl, d
        for d, q in zip(written, qualified):
            if q.rsplit(".", 1)[-1] != "jit":
                continue
            if q.startswith("triton.") or self._uses_triton(fn):
                return "triton", d
            return (q.split(".")[0] if "." in q and not q.startswith(".") else f"unresolved {q}"), d
        return None

    def is_triton(self, fn) -> bool:
        return self.of(fn) == "triton"

    def _uses_triton(self, fn) -> bool:
        body = ast.Module(body=list(fn.body), type_ignores=[])
        return any(self.qualify(n) == "triton.language" or self.qualify(n).startswith("triton.language.")
                   for n in _names(body))

    def sources(self, tree: ast.Module) -> list[tuple[ast.Call, str]]:
        """Calls that compile CUDA source held in a Python string (cupy RawKernel, pycuda SourceModule)."""
        out = []
        for n in walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute)):
                q = self.qualify(ast.unparse(n.func))
                if q.rsplit(".", 1)[-1] in SOURCE_CALLS and _dsl(q):
                    out.append((n, _dsl(q)))
        return out


def _dsl(qualified: str) -> str | None:
    for prefix, name in DSLS:
        if qualified == prefix or qualified.startswith(prefix + "."):
            return name
    return None


def _names(node) -> set[str]:
    out = set()
    for n in walk(node):
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
            defines |= {n.id for n in walk(t) if isinstance(n, ast.Name)}
    elif isinstance(node, (ast.If, ast.Try, ast.With)):
        # a guarded import or definition (`try: from triton.language.extra.libdevice import tanh`)
        for child in _block_statements(node):
            defines |= _stmt(child).defines
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return _Stmt(node, defines, _names(node) - defines, start, node.end_lineno)


def _block_statements(node) -> list[ast.stmt]:
    """The statements of an if/try/with block, nested blocks included, functions not entered."""
    out = []
    for field in ("body", "orelse", "finalbody", "handlers"):
        for child in getattr(node, field, []) or []:
            if isinstance(child, ast.ExceptHandler):
                out += _block_statements(child)
            elif isinstance(child, (ast.If, ast.Try, ast.With)):
                out += _block_statements(child)
            else:
                out.append(child)
    return out


def _launches(node, kname: str) -> list[int]:
    """Lines where `kname[grid](...)` (or `kname.run(...)`) is called inside node."""
    return _launch_lines(node).get(kname, [])


def _launch_lines(node) -> dict[str, list[int]]:
    """Per name, the lines where `name[grid](...)`, `name.run(...)` or `name(...)` is called inside
    node: one walk of the node, kept on it, serves every kernel name asked about (a file with many
    kernels and functions asked the same walk once per pair)."""
    got = getattr(node, "_sftbuild_launch_lines", None)
    if got is not None:
        return got
    got = {}
    local = _local_aliases(node)
    for n in walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Subscript) and isinstance(f.value, ast.Name):
                name = f.value.id
            elif isinstance(f, ast.Attribute) and f.attr == "run" and isinstance(f.value, ast.Name):
                name = f.value.id
            elif isinstance(f, ast.Name):  # a decorator made it callable (pointwise_dynamic)
                name = f.id
            else:
                continue
            for each in {name} | local.get(name, set()):
                got.setdefault(each, []).append(n.lineno)
    node._sftbuild_launch_lines = got
    return got


def _local_aliases(node) -> dict[str, set[str]]:
    """Names a function binds to a kernel chosen at run time (`fn = k64 if BT == 64 else k32`,
    `dq = k.fn if varlen else k`), each to the names it may hold: launching `fn[grid]` launches them."""
    out: dict[str, set[str]] = {}
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return out
    for n in walk(node):
        if isinstance(n, ast.Assign):
            held = _chosen(n.value)
            for t in n.targets:
                if isinstance(t, ast.Name) and held - {t.id}:
                    out.setdefault(t.id, set()).update(held - {t.id})
    return out


def _chosen(value) -> set[str]:
    """The plain names an expression may evaluate to: `k`, `k.fn`, either side of `a if c else b`."""
    if isinstance(value, ast.Name):
        return {value.id}
    if isinstance(value, ast.Attribute) and value.attr == "fn":
        return _chosen(value.value)  # the JITFunction under an autotuner or heuristics
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        return {ast.unparse(value)}  # a kernel read from its module (`m.f`)
    if isinstance(value, ast.IfExp):
        return _chosen(value.body) | _chosen(value.orelse)
    return set()


def _statements(tree: ast.Module) -> tuple[list, dict[str, list[int]]]:
    """The module's top-level statements (its main guard left out) and, per name, the statements
    that define it."""
    stmts = [_stmt(n) for n in tree.body if not _is_main_guard(n)]
    by_name: dict[str, list[int]] = {}
    for i, s in enumerate(stmts):
        for name in s.defines:
            by_name.setdefault(name, []).append(i)
    return stmts, by_name


def extract_kernels(src: str) -> tuple[list[TritonKernel], list[dict]]:
    """Kernels in a Python file, and every other jit function with a reason (raises SyntaxError)."""
    tree = ast.parse(src)
    langs = Languages(tree)
    is_jit = langs.is_triton  # in here, "jit" is Triton's only: other DSLs are listed as unsupported_dsl
    lines = src.splitlines()
    stmts, by_name = _statements(tree)

    jit_names = {s.node.name for s in stmts if is_jit(s.node)}
    hints = default_hints(tree)
    # a jit function only called from other jit functions is a device helper: it is part of
    # every kernel that calls it, not a kernel of its own
    called = {n for s in stmts if is_jit(s.node) for n in _called(s.node) if n != s.node.name} & jit_names
    alias = aliases(tree, jit_names)  # `exp__kernel = exp_`: a launch of the alias launches the kernel
    names_of = {k: {k} | {a for a, t in alias.items() if t == k} for k in jit_names}
    launched = {n for s in stmts if not is_jit(s.node) for n in jit_names
                if any(_launches(s.node, a) for a in names_of[n])}
    # `from __future__ import annotations` decides how the kept code's annotations evaluate
    future = {j for j, st in enumerate(stmts) if isinstance(st.node, ast.ImportFrom) and st.node.module == "__future__"}
    kernels, others = [], []
    for i, s in enumerate(stmts):
        if not is_jit(s.node):
            _other_dsl(langs, s.node, s.start, others)
            continue
        kname = s.node.name
        if kname in called and kname not in launched:
            others.append({"line": s.start, "reason": "device_helper", "detail": kname})
            continue
        wrappers = [j for j, w in enumerate(stmts) if j != i and not is_jit(w.node)
                    and any(_launches(w.node, a) for a in names_of[kname])]
        functions = backward_functions(stmts, kname, is_jit) + callers(stmts, wrappers, is_jit)
        need = _closure([i, *wrappers, *functions], stmts, by_name) | future
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
                          for j in wrappers for a in sorted(names_of[kname]) for ln in _launches(stmts[j].node, a)],
            autotune=any(d.split(".")[-1] == "autotune" for d in decos),
            heuristics=any(d.split(".")[-1] == "heuristics" for d in decos),
            helpers=sorted(stmts[j].node.name for j in need if j != i and is_jit(stmts[j].node)),
            entry_points=entry_points(code, hints),
        ))
    top = {id(s.node) for s in stmts}
    for n in walk(tree):
        if is_jit(n) and id(n) not in top:
            others.append({"line": n.lineno, "reason": "nested_definition", "detail": n.name})
        elif id(n) not in top:
            _other_dsl(langs, n, getattr(n, "lineno", 0), others)
    for call, dsl in langs.sources(tree):
        others.append({"line": call.lineno, "reason": "unsupported_dsl",
                       "detail": f"{dsl}: CUDA source in a Python string ({ast.unparse(call.func)})"})
    return kernels, others


MAX_CALLERS = 4  # public functions of the file kept because they call a kernel's launcher


def callers(stmts: list[_Stmt], wrappers: list[int], is_jit) -> list[int]:
    """Public functions of the file that call a launcher (directly or through the file's other
    functions), nearest first, at most MAX_CALLERS: the API a package exposes (and registers, as
    FlagGems registers `div_mode` for `div.Tensor_mode`) is often a caller of the launcher."""
    funcs = {s.node.name: j for j, s in enumerate(stmts)
             if isinstance(s.node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not is_jit(s.node)}
    reached = {stmts[j].node.name for j in wrappers if stmts[j].node.__class__ is not ast.ClassDef
               and hasattr(stmts[j].node, "name")}
    out: list[int] = []
    frontier = set(reached)
    while frontier and len(out) < MAX_CALLERS:
        nxt = set()
        for name, j in sorted(funcs.items(), key=lambda kv: kv[1]):
            if name in reached or not (_called(stmts[j].node) & frontier):
                continue
            reached.add(name)
            nxt.add(name)
            if not name.startswith("_") and len(out) < MAX_CALLERS:
                out.append(j)
        frontier = nxt
    return out


def backward_functions(stmts: list[_Stmt], kname: str, is_jit) -> list[int]:
    """Statements of the autograd Functions whose `backward` launches `kname` (through the file's
    functions) and whose `forward` does not: a backward kernel's record keeps the Function, so it can
    be launched as autograd launches it, on what the forward saved (and checked against the
    gradients of the forward's reference)."""
    funcs = {s.node.name: s.node for s in stmts if isinstance(s.node, (ast.FunctionDef, ast.AsyncFunctionDef))
             and not is_jit(s.node)}
    reach = {name: bool(_launches(f, kname)) for name, f in funcs.items()}
    calls = {name: _called(f) & set(funcs) for name, f in funcs.items()}
    changed = True
    while changed:
        changed = False
        for name in funcs:
            if not reach[name] and any(reach[c] for c in calls[name]):
                reach[name] = changed = True

    def reaches(m) -> bool:
        return bool(_launches(m, kname)) or any(reach.get(c) for c in _called(m))

    out = []
    for j, st in enumerate(stmts):
        if isinstance(st.node, ast.ClassDef) and _base_kind(st.node) == "autograd":
            methods = {m.name: m for m in st.node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
            if "forward" in methods and "backward" in methods and reaches(methods["backward"]) \
                    and not reaches(methods["forward"]):
                out.append(j)
    return out


def _other_dsl(langs: Languages, node, line: int, others: list[dict]) -> None:
    """List a kernel of a DSL other than Triton."""
    kind = langs.kind(node)
    if kind and kind[0] != "triton":
        others.append({"line": line, "reason": "unsupported_dsl", "detail": f"{kind[0]}: @{kind[1]} {node.name}"})


def _called(fn) -> frozenset[str]:
    """The plain names `fn` calls; one walk, kept on the node, as `_launch_lines`."""
    got = getattr(fn, "_sftbuild_called", None)
    if got is None:
        got = fn._sftbuild_called = frozenset(
            n.func.id for n in walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name))
    return got


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
    """Every kernel definition in a file, nested or not, of any DSL (for recall accounting): each
    is either extracted or listed with a reason."""
    tree = ast.parse(src)
    langs = Languages(tree)
    return sum(1 for n in walk(tree) if langs.of(n)) + len(langs.sources(tree))


# ---- entry points -----------------------------------------------------------------

WRAPPER_NOISE = {"launcher", "launch", "kernel", "fwd", "forward", "impl", "triton", "fn", "func", "op", "ops", "run",
                 "apply", "function", "wrapper", "static", "dynamic"}  # words that name no computation
OP_BASES = ("Function", "Module")  # torch.autograd.Function, torch.nn.Module (any spelling)
BACKWARD_WORDS = ("backward", "bwd", "grad")


def _base_kind(cls: ast.ClassDef) -> str | None:
    for b in cls.bases:
        last = ast.unparse(b).split(".")[-1]
        if last.endswith("Function"):
            return "autograd"
        if last.endswith("Module"):
            return "module"
    return None


def _role(name: str, launches: list[str]) -> str:
    low = name.lower()
    if any(w in low for w in BACKWARD_WORDS):
        return "backward"
    if launches and all(any(w in k.lower() for w in BACKWARD_WORDS) for k in launches):
        return "backward"
    return "forward"


def entry_points(code: str, hints: dict | None = None) -> list[dict]:
    """The callables of `code` that launch its kernels, directly or through its other functions.
    A parameter without a default gets a `hint`: the literal default the file declares for the name.

    Forward entries come first, then autograd Functions before plain functions, public names
    before private ones (the order a probe tries them)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    jits = {n.name for n in tree.body if is_jit(n)}
    funcs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not is_jit(n)}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    alias = aliases(tree, jits)

    def direct(node) -> set[str]:
        return {k for k in jits if _launches(node, k) and k not in funcs} | \
            {alias[a] for a in alias if _launches(node, a)}

    reach = {name: direct(f) for name, f in funcs.items()}
    calls = {name: _called(f) for name, f in funcs.items()}
    changed = True
    while changed:  # a function reaches what the functions it calls reach
        changed = False
        for name in funcs:
            more = set().union(*(reach.get(c, set()) for c in calls[name] if c in funcs)) - reach[name]
            if more:
                reach[name] |= more
                changed = True

    def method_reach(m) -> set[str]:
        return direct(m) | set().union(*(reach.get(c, set()) for c in _called(m) if c in funcs))

    out = []
    for name, f in funcs.items():
        if reach[name]:
            launches = sorted(reach[name])
            out.append({"qualname": name, "kind": "function", "params": _params(f), "launches": launches,
                        "role": _role(name, launches)})
    for cname, cls in classes.items():
        kind = _base_kind(cls)
        methods = {m.name: m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        fwd = methods.get("forward")
        if kind is None or fwd is None:
            continue
        launches = sorted(method_reach(fwd))
        bwd = sorted(method_reach(methods["backward"])) if "backward" in methods else []
        if not launches and not bwd:
            continue
        if kind == "autograd":
            out.append({"qualname": f"{cname}.apply", "kind": "autograd", "params": _params(fwd, drop_first=True),
                        "launches": launches, "role": "forward", "backward": {"launches": bwd}})
        else:
            init = _params(methods["__init__"], drop_first=True) if "__init__" in methods else []
            out.append({"qualname": cname, "kind": "module", "params": _params(fwd, drop_first=True),
                        "init": init, "launches": launches, "role": "forward"})
    for e in out:
        for p in e["params"] + e.get("init", []):
            if not p["has_default"] and p["name"] in (hints or {}):
                p["hint"] = hints[p["name"]]
    rank = {"autograd": 0, "function": 1, "module": 2}
    out.sort(key=lambda e: (e["role"] != "forward", e["qualname"].startswith("_"), rank[e["kind"]],
                            e["qualname"]))
    return out


# ---- launchers in other modules of the package ---------------------------------------

def module_of(rel: str) -> str:
    """`pkg/ops/x.py` -> `pkg.ops.x` (`pkg/__init__.py` -> `pkg`)."""
    parts = rel[:-3].split("/") if rel.endswith(".py") else rel.split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str | None:
    """The absolute module an import reads from, seen from `module`."""
    if not node.level:
        return node.module
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level - 1 > len(base):
        return None
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def foreign_launchers(src: str, rel: str) -> list[dict]:
    """Functions, classes and autograd Functions of this file that launch a kernel they import from
    another module: {"module": absolute module of the kernel, "kernel": its name there, "code": the
    launcher with what it needs from this file (relative imports made absolute, the kernel's own
    import left out, since the kernel's record defines it)}. A kernel is reached by its imported name
    or an alias of it (`from .k import f as g`), through its module (`import pkg.k as m`, `from . import
    k`, then `m.f[grid]`), or through a local chosen at run time (`fn = f if c else g`). An imported
    jit function this file's kernels only call is listed as {"module", "kernel", "device": True}: a
    device helper of another module, no kernel of its own. A function or class that plainly calls an
imported function and launches no kernel itself is listed with "wraps": True and the other imported
functions it calls, "calls": [[module, name]] (the function named "kernel" is then a launcher of
another module; an outer wrapper that allocates its outputs is the package's public entry).
Read by AST only."""
    tree = ast.parse(src)
    module = module_of(rel)
    is_package = rel.endswith("__init__.py")
    imported: dict[str, tuple[str, str]] = {}  # local name -> (module, name there)
    modules: dict[str, str] = {}  # local name -> an absolute module it may be (`import a.b as m`, `from a import b`)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            mod = _absolute(node, module, is_package)
            for a in node.names:
                if mod and a.name != "*":
                    imported[a.asname or a.name] = (mod, a.name)
                    modules[a.asname or a.name] = f"{mod}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    modules[a.asname] = a.name
    if not imported and not modules:
        return []
    lines = src.splitlines()
    stmts, by_name = _statements(tree)
    out = []
    targets = [(local, mod, name, None) for local, (mod, name) in imported.items()]
    for local, mod in modules.items():  # `m.f[grid]`: every `m.<name>` launched in the file
        for name in sorted(_attribute_launches(tree, local)):
            targets.append((f"{local}.{name}", mod, name, local))
    for local, mod, name, via in targets:
        launchers = [j for j, s in enumerate(stmts) if isinstance(s.node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                          ast.ClassDef))
                     and not is_jit(s.node) and _grid_launches(s.node, local)]
        wraps = False
        if not launchers:
            if via is None and any(is_jit(s.node) and local in _called(s.node) for s in stmts):
                out.append({"module": mod, "kernel": name, "device": True, "from": module})
                continue
            if mod.split(".")[0] != module.split(".")[0]:
                continue  # another package's function is no launcher of this one
            # a plain call of an imported function: an outer wrapper, kept where that function launches a kernel
            launchers = [j for j, s in enumerate(stmts) if isinstance(s.node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                              ast.ClassDef))
                         and not is_jit(s.node) and _plain_calls(s.node, local) and _thin(s.node)
                         and _named_alike(s.node.name, name)]  # its public face, not a helper that uses it
            wraps = bool(launchers)
        # one group per wrapper (each judged by what it calls), or all of the file's launchers
        for group in ([_with_callers(j, stmts) for j in launchers] if wraps else [launchers] if launchers else []):
            row = _launcher_code(group, stmts, by_name, lines, local, mod, name, module, is_package, modules,
                                 imported if wraps else None)
            if row:
                out.append(row)
    return out


def _with_callers(j: int, stmts: list[_Stmt]) -> list[int]:
    """Statement j with this file's functions that call it, directly or through each other
    (`scaled_quant` calling `static_scaled_quant`), none launching a kernel itself."""
    group, names = [j], {stmts[j].node.name}
    while True:
        more = [i for i, s in enumerate(stmts) if i not in group and isinstance(
            s.node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not is_jit(s.node)
            and _called(s.node) & names and _thin(s.node)]
        if not more:
            return group
        group += more
        names |= {stmts[i].node.name for i in more}


def _launcher_code(launchers, stmts, by_name, lines, local, mod, name, module, is_package, modules,
                   imported) -> dict | None:
    """The foreign_launchers row for `launchers` (statement indices) of `local` (imported as `name`
    from `mod`); `imported` is given for a wrapper, whose other package calls it lists (its own
    file's functions too), or None where what it needs of its file launches a kernel itself."""
    need = _closure(launchers, stmts, by_name) | {j for j, st in enumerate(stmts) if isinstance(
        st.node, ast.ImportFrom) and st.node.module == "__future__"}
    defs = [j for j in need if isinstance(stmts[j].node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    if imported is not None and not all(_thin(stmts[j].node) for j in defs):
        return None
    parts = []
    used = set().union(*(stmts[j].uses for j in need))
    for j in sorted(need):
        node = stmts[j].node
        if isinstance(node, ast.ImportFrom):
            mod_j = _absolute(node, module, is_package)
            names = [a for a in node.names if (a.asname or a.name) != local and
                     ((a.asname or a.name) in used or node.module == "__future__")]
            if not names or not mod_j:
                continue
            alias = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in names)
            parts.append(f"from {mod_j} import {alias}")
        else:
            parts.append("\n".join(lines[stmts[j].start - 1:stmts[j].end]))
    code = "\n\n".join(parts) + "\n"
    # the launcher calls the kernel by a local alias or through its module: by its own name in the record
    for spelled in {local} | {f"{m}.{name}" for m, full in modules.items() if full == mod}:
        if spelled != name:
            code = re.sub(rf"(?<![\w.]){re.escape(spelled)}\b", name, code)
    row = {"module": mod, "kernel": name, "code": code, "from": module}
    if imported is not None:  # what else of the package a wrapper calls (one running another launcher is refused)
        applied = {n.func.value.id for j in launchers for n in walk(stmts[j].node) if isinstance(n, ast.Call) and
                   isinstance(n.func, ast.Attribute) and n.func.attr == "apply" and isinstance(n.func.value, ast.Name)}
        row.update(wraps=True, calls=sorted({imported[c] for j in launchers for c in _called(stmts[j].node) | applied
                                             if c in imported and c != local} |
                                            {(module, stmts[j].node.name) for j in defs}))
    return row


def _name_words(name: str) -> set[str]:
    """`static_scaled_fp8_quant_launcher`, `SiluAndMul` -> the words that say what it computes."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return {w for w in spaced.lower().split("_") if w and w not in WRAPPER_NOISE}


def _named_alike(a: str, b: str) -> bool:
    """Two names share a word, or one word of one begins the other's (`negate`, `neg_launcher`)."""
    return any(x.startswith(y) or y.startswith(x) for x in _name_words(a) for y in _name_words(b)
               if min(len(x), len(y)) >= 3 or x == y)


def _thin(node) -> bool:
    """A wrapper that launches no kernel of its own (`k[grid](...)`): an attention that calls a softmax
    launcher among its own kernels is no entry point of the softmax."""
    return not any(isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) for n in walk(node))


def _plain_calls(node, name: str) -> bool:
    """`name(...)` or `name.apply(...)` (an autograd Function) inside node, `name` plain or dotted (`m.f`)."""
    return any(isinstance(n, ast.Call) and ast.unparse(n.func) in (name, f"{name}.apply") for n in walk(node))


def _attribute_launches(tree, local: str) -> set[str]:
    """Names read as `local.name` anywhere in the module: the kernels it may launch through the
    module (`_grid_launches` decides which it does)."""
    return {n.attr for n in walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == local}


def _grid_launches(node, name: str) -> bool:
    """`name[grid](...)` or `name.run(...)` inside node, `name` dotted (`m.f`) or held by a local chosen
    at run time (a plain call of an imported name is usually a helper, not a launch)."""
    held = {local for local, names in _local_aliases(node).items() if name in names}
    for n in walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, (ast.Subscript, ast.Attribute)):
            f = n.func
            callee = f.value if isinstance(f, ast.Subscript) else f.value if f.attr == "run" else None
            if callee is not None and (ast.unparse(callee) == name or
                                       isinstance(callee, ast.Name) and callee.id in held):
                return True
    return False


def attach_launchers(code: str, launchers: list[str]) -> tuple[str, list[dict]]:
    """A record's code with launchers from other modules appended, and its entry points then (a
    launcher's `from __future__` imports go first, where Python reads them)."""
    future = re.compile(r"(?m)^from __future__ import [^\n]*\n?")
    try:
        defined = _statements(ast.parse(code))[1].keys()
        launchers = [_unshadowed(c, defined) for c in launchers]
    except SyntaxError:
        return code, []
    heads = list(dict.fromkeys(m.group(0).rstrip("\n") for c in [code, *launchers] for m in future.finditer(c)))
    body = [future.sub("", c).strip("\n") for c in [code, *launchers]]
    joined = "".join(h + "\n" for h in heads) + ("\n" if heads else "") + "\n\n".join(body) + "\n"
    try:
        hints = default_hints(ast.parse(joined))
    except SyntaxError:
        return code, []
    return joined, entry_points(joined, hints)


def _unshadowed(launcher: str, defined) -> str:
    """`launcher` without the imported names the record's code defines: an appended import of the
    package's copy would replace the record's own function (whose launches the probe counts)."""
    lines = launcher.splitlines()
    for node in reversed(ast.parse(launcher).body):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__" and \
                any((a.asname or a.name) in defined for a in node.names):
            keep = [a for a in node.names if (a.asname or a.name) not in defined]
            text = f"from {'.' * node.level}{node.module or ''} import " + ", ".join(
                a.name + (f" as {a.asname}" if a.asname else "") for a in keep) if keep else ""
            lines[node.lineno - 1:node.end_lineno] = [text] if text else []
    return "\n".join(lines) + "\n"
