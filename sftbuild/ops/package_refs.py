"""A package's own reference implementations, found by AST and registered as ops inside a worker.

`find_package_references(tree)` reads every .py file under `tree` with `ast` only (harvested code is
never imported here) and returns the module-level functions that look like references: named
`naive_*`, `ref_*`, `reference_*`, `torch_*`, `*_ref`, `*_reference`, `*_torch` or `*_pytorch_*`
(leading underscores ignored), or any public function of a module named `naive.py`, `reference.py`
or `ref.py`, or of a module in a folder so named (`pkg/reference/norm/rms_norm.py`). Each result:
{module, path, name, params, required (positional, no default), scalars (the required ones annotated
float, int or bool: name -> type), shapes (the axes its code names per input, `read_shapes`),
signature, line, why}; `module` is the dotted import path relative to `tree`.

`candidates(tree, names, params)` lists the package references fit to be a record's candidate
references: named like the record's kernels or entry points, and plain torch (`plain_torch`: nothing
reachable from the function is a Triton import, a jit function or a name from a module of the
package that has either, so it can never be the kernel under test).

`package_op(module, func, like=..., root=...)` builds an Op whose reference imports `module` and
calls `func` on the inputs of `like` (an op or op name, whose input generator, shapes, dtypes,
tolerance and launch contract it borrows; `like` may also be an io list such as
["x: [rows, cols]", "w: [cols]"], whose named dims are drawn from a small pool). The import
happens only when the reference runs, so only a worker that already imports the package tree
(sandbox.run_isolated, executor.map_gpu) may call it; building the Op imports nothing.
"""
from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import re
import sys
from pathlib import Path

from sftbuild.ops import OPS, Op, add, get

NAME_PATTERNS = [(re.compile(p), why) for p, why in [
    (r"^naive_\w+", "naive_*"), (r"^ref_\w+", "ref_*"), (r"^reference_\w+", "reference_*"),
    (r"^torch_\w+", "torch_*"), (r"\w+_ref$", "*_ref"), (r"\w+_reference$", "*_reference"),
    (r"\w+_(?:py)?torch(?:_\w+)?", "*_torch, *_pytorch_*")]]
REF_MODULES = {"naive", "reference", "ref", "references"}  # a module, or a folder of modules, of references
NOT_REFERENCES = re.compile(r"dtype|device|version|available|config|to_triton|to_torch|from_torch|supported")
SKIP_DIRS = {"__pycache__", ".git", "node_modules", "build", "dist"}
# a cheap text test before parsing: a file without such a def (and not a reference module) has no candidate
CANDIDATE = re.compile(r"^def\s+_*(naive_|ref_|reference_|torch_|\w+_ref\s*\(|\w+_reference\s*\(|\w+_(py)?torch\b)",
                       re.M)


def python_files(root: Path, skip=SKIP_DIRS):
    """(relative path, path) of each .py file under `root`, in path order, outside the folders named
    in `skip` and hidden ones."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if not any(part in skip or part.startswith(".") for part in rel.parts[:-1]):
            yield rel, path


def find_package_references(tree: Path) -> list[dict]:
    """Reference-like functions in the .py files under `tree`, in path then line order; unreadable
    or unparsable files are skipped."""
    tree = Path(tree)
    found = []
    for rel, path in python_files(tree):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
            in_ref_module = bool(REF_MODULES & {rel.stem, *rel.parts[:-1]})
            if not in_ref_module and not CANDIDATE.search(text):
                continue
            mod = ast.parse(text, filename=str(path))
        except (SyntaxError, ValueError, OSError):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        module = ".".join(parts)
        for node in mod.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            why = _why(node.name, in_ref_module)
            params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
            if not why or not params or NOT_REFERENCES.search(node.name):
                continue
            positional = node.args.posonlyargs + node.args.args
            required = positional[:len(positional) - len(node.args.defaults)]
            found.append({"module": module, "path": str(rel), "name": node.name, "params": params,
                          "required": [a.arg for a in required],
                          "scalars": {a.arg: ast.unparse(a.annotation) for a in required if a.annotation is not None
                                      and ast.unparse(a.annotation) in SCALAR_TYPES},
                          "shapes": read_shapes(node, params),
                          "signature": f"{node.name}({ast.unparse(node.args)})", "line": node.lineno, "why": why})
    return found


TRITON_USE = re.compile(r"^\s*(?:import|from)\s+triton\b|^\s*@[\w.]*jit\b", re.M)
SCALAR_TYPES = {"float", "int", "bool"}  # a required parameter so annotated is no tensor input
MAX_CANDIDATES = 3  # package references tried per record, best named first


def candidates(tree: str | None, names: list[str], params: list[str] | None = None,
               k: int = MAX_CANDIDATES) -> list[dict]:
    """The package references under `tree` named most like `names` (a record's kernels and entry
    points) that are plain torch, best first: each a `find_package_references` row."""
    from sftbuild.ops.ranking import name_score

    if not tree or not Path(tree).is_dir():
        return []
    scored = []
    for ref in _references(str(tree)):
        s = max((name_score(n, ref["name"]) for n in names), default=0.0)
        if s > 0 and not plain_torch(Path(tree) / ref["path"], ref["name"], Path(ref["path"]).parts[0]):
            scored.append((-s, ref["module"], ref["name"], ref))
    return [r for *_, r in sorted(scored, key=lambda x: x[:3])[:k]]


@functools.lru_cache(maxsize=8)
def _references(tree: str) -> tuple:
    return tuple(find_package_references(Path(tree)))


def plain_torch(path: Path, func: str, package: str | None = None) -> str | None:
    """Why the module-level function `func` of the file at `path` may not be plain torch, or None:
    what it and the file's functions it calls use must not be a Triton import, a jit function, or a
    name imported from the package's own modules (a wrapper that launches the kernel under test)
    unless that module has no Triton in it (`_triton_free`: a platform query, a settings module);
    `package` names the top-level package where a folder without `__init__.py` hides it."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return "unreadable"
    top = path.parent
    own = {path.parent.name, *([package] if package else [])}
    while (top / "__init__.py").is_file():  # the package's top-level name: its absolute imports are its own
        own.add(top.name)
        top = top.parent
    banned: dict[str, str] = {}
    funcs = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mod = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            for a in node.names:
                full = a.name if isinstance(node, ast.Import) else f"{mod}.{a.name}"
                root = full.split(".")[0]
                if root == "triton" or (isinstance(node, ast.ImportFrom) and (node.level or root in own)
                                        and not _triton_free(path, node, a.name)):
                    banned[(a.asname or a.name).split(".")[0]] = full
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any("jit" in ast.unparse(d) for d in node.decorator_list):
                banned[node.name] = "a jit function"
            else:
                funcs[node.name] = node
    if func not in funcs:
        return f"{func} is not a plain function of its module"
    seen, todo = set(), [func]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        used = {n.id for n in ast.walk(funcs[name]) if isinstance(n, ast.Name)}
        hit = sorted(used & banned.keys())
        if hit:
            return f"{name} uses {hit[0]} ({banned[hit[0]]})"
        todo += [n for n in used if n in funcs]
    return None


def read_shapes(fn, params: list[str]) -> dict[str, list[str]]:
    """The dimension names a reference's own code gives its tensor parameters: `B, T, D = x.shape`
    (or `*q.shape, v.shape[-1]`) names every axis of x; `V = v.shape[-1]` names v's last one, as
    ["...", "V"]. The first naming of a parameter counts; the names are lower-cased."""
    out: dict[str, list[str]] = {}
    for n in ast.walk(fn):
        if not isinstance(n, ast.Assign) or len(n.targets) != 1:
            continue
        unpacked = isinstance(n.targets[0], ast.Tuple)
        names = [(t.id.lower() if t.id != "_" else f"_{n.lineno}_{i}") if isinstance(t, ast.Name) else None
                 for i, t in enumerate(n.targets[0].elts if unpacked else [n.targets[0]])]
        values = n.value.elts if isinstance(n.value, ast.Tuple) else [n.value]
        at = 0
        for i, v in enumerate(values):
            if isinstance(v, ast.Starred) and (p := _shape_of(v.value, params)):
                take = len(names) - at - (len(values) - 1 - i)  # what the other values leave to `*x.shape`
            elif len(values) == 1 and unpacked and (p := _shape_of(v, params)):
                take = len(names)
            else:
                last = v.value if isinstance(v, ast.Subscript) and ast.unparse(v.slice) == "-1" else None
                if (p := _shape_of(last, params)) and at < len(names) and names[at]:
                    out.setdefault(p, ["...", names[at]])
                at += 1
                continue
            if take > 0 and None not in names[at:at + take]:
                out.setdefault(p, names[at:at + take])
            at += max(take, 0)
    return out


def _shape_of(node, params) -> str | None:
    """The parameter whose `.shape` `node` is (`x.shape`), else None."""
    return node.value.id if isinstance(node, ast.Attribute) and node.attr == "shape" and \
        isinstance(node.value, ast.Name) and node.value.id in params else None


def _triton_free(path: Path, node: ast.ImportFrom, name: str, depth: int = 3) -> bool:
    """Whether what `from <module> import <name>` in the file at `path` reads from its own package
    (a platform query, a settings module) is a module that, with the package's modules it imports in
    turn (`depth` levels), imports no Triton and defines no jit function; False where unreadable."""
    parts = path.parent.parts[:len(path.parent.parts) - node.level + 1] if node.level else None
    if parts is None:  # absolute: the folder holding the top-level package
        top = (node.module or "").split(".")[0]
        parts = next((p.parent.parts for p in path.parents if p.name == top), None)
        if parts is None:
            return False
    base = Path(*parts, *(node.module or "").split(".")) if node.module else Path(*parts)
    files = [f for f in (base / f"{name}.py", base / name / "__init__.py", base.with_suffix(".py"),
                         base / "__init__.py") if f.is_file()][:1]
    if not files or depth == 0:
        return False
    try:
        text = files[0].read_text(encoding="utf-8", errors="replace")
        imports = [n for n in ast.parse(text).body if isinstance(n, ast.ImportFrom) and n.module != "__future__"]
    except (OSError, SyntaxError, ValueError):
        return False
    if TRITON_USE.search(text):
        return False
    own = (node.module or "").split(".")[0] if not node.level else None
    return all(_triton_free(files[0], n, a.name, depth - 1) for n in imports for a in n.names
               if n.level or (own and (n.module or "").split(".")[0] == own))


def _why(name: str, in_ref_module: bool) -> str | None:
    bare = name.lstrip("_")
    for pat, why in NAME_PATTERNS:
        if pat.fullmatch(bare):
            return why
    if in_ref_module and not name.startswith("_"):
        return "function in a reference module"
    return None


# ---- registering a package function as an op (inside a worker) ------------------------------------

def load_function(module: str, func: str, root: str | Path | None = None):
    """Import `module` (dotted, importable from `root`, or a .py file path) and return `func`."""
    if module.endswith(".py"):
        path = Path(root or ".") / module
        spec = importlib.util.spec_from_file_location(f"sftbuild_pkgref_{abs(hash(str(path)))}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    else:
        if root is not None and str(root) not in sys.path:
            sys.path.insert(0, str(root))
        mod = importlib.import_module(module)
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise AttributeError(f"{module} has no function {func!r}")
    return fn


DIM_POOL = [1, 7, 33, 100, 257, 1000]
DIM_POOL_ND = [2, 3, 5, 8, 16, 33]


def _io_like(io_in: list[str]) -> tuple:
    """An input generator and shape pool for an io list like ["x: [rows, cols]", "w: [cols]"]."""
    from sftbuild.ops.pools import rand

    specs = [[d.strip() for d in m.group(1).split(",") if d.strip()] if (m := re.search(r"\[([^\]]*)\]", s))
             else [] for s in io_in]
    dims = sorted({d for spec in specs for d in spec if not d.isdigit()})
    sizes = DIM_POOL if len(dims) <= 2 else DIM_POOL_ND  # three or more axes: small ones, or the product explodes
    pool = [tuple(sizes[(i + j) % len(sizes)] for j in range(len(dims))) for i in range(len(sizes))]

    def make_inputs(shape, dtype, layout, gen, params):
        size = dict(zip(dims, shape))
        return [rand(tuple(int(d) if d.isdigit() else size[d] for d in spec), dtype, layout if i == 0 else
                     "contiguous", gen) for i, spec in enumerate(specs)]
    return make_inputs, pool


def package_op(module: str, func: str, like, root: str | Path | None = None, name: str | None = None,
               register: bool = True, params: dict | None = None) -> Op:
    """An op whose reference is the package function `module.func`, shaped like `like`, with `params`
    (the reference's scalar arguments) added to the op's."""
    if isinstance(like, str):
        like = get(like)
    name = name or f"pkg.{module.removesuffix('.py').replace('/', '.')}.{func}"
    cache: dict = {}

    def reference(*inputs, **params):
        if "fn" not in cache:
            cache["fn"] = load_function(module, func, root)
        fn = cache["fn"]
        try:
            import inspect

            sig = inspect.signature(fn)
            kw = params if any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()) else \
                {k: v for k, v in params.items() if k in sig.parameters}
        except (TypeError, ValueError):
            kw = {}
        return fn(*inputs, **kw)

    sem = {"en": f"what the package reference `{module}.{func}` computes",
           "zh": f"包内参考实现`{module}.{func}`的计算"}
    if isinstance(like, Op):
        op = Op(name=name, family=like.family, semantics=sem, reference=reference, make_inputs=like.make_inputs,
                shape_pool=list(like.shape_pool), io=like.io, dtypes=like.dtypes, layouts=like.layouts,
                params=dict(like.params), tolerance=like.tolerance, launch=like.launch, outputs=like.outputs,
                mutates=like.mutates, grad_constants=like.grad_constants)
        op.params.update(params or {})
    else:
        io_in = list(like)
        make_inputs, pool = _io_like(io_in)
        op = Op(name=name, family="torch_op", semantics=sem, reference=reference, make_inputs=make_inputs,
                shape_pool=pool, io={"inputs": io_in, "outputs": ["y"]}, launch="tensors",
                dtypes=("float32", "float16"), params=dict(params or {}))
    if register:
        if name in OPS:
            return OPS[name]
        add(op)
    return op


def smoke(op: Op, dtype: str = "float32") -> torch.Tensor | tuple:
    """Run an op's reference once on its smallest pool shape (a worker's first check of a package op)."""
    import math

    import torch

    shape = min(op.shape_pool, key=math.prod)
    params = dict(op.params)
    inputs = op.make_inputs(shape, dtype, "contiguous", torch.Generator().manual_seed(0), params)
    return op.run_reference(inputs, params)
