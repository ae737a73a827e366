"""Program catalogs: the reference programs the `torch-inductor` source compiles.

A catalog is a `Catalog` plug-in registered in `CATALOGS` (one module each in this folder;
`sftbuild list catalog` lists them): `handwritten` (the 61 programs of programs.py), `opdb`
(single-op programs from torch's op_db) and `fusions` (generated KernelBench level-2 style
fusions). `select(names, count, seed)` is what `catalog`, `catalog:opdb` or
`catalog:opdb,fusions` harvests: every named catalog (default: all), each shuffled by the seed,
interleaved in proportion to its size so that any prefix is a mix, cut to `count` programs.
The same (names, count, seed) always gives the same programs in the same order.

`folder(dir, benchmark)` reads a folder of KernelBench-format modules without running them.
"""
from __future__ import annotations

import ast
import random
from pathlib import Path
from typing import NamedTuple

from sftbuild.config import HarvestConfig
from sftbuild.harvest.sources import SourceError
from sftbuild.plugins import Plugin, Registry

DEFAULT_PROGRAMS = HarvestConfig().programs  # the catalog at its default size
MAX_PROGRAMS = 100_000
MAX_PROGRAM_BYTES = 1 << 20  # a folder's file larger than this is not a reference program


class Program(NamedTuple):
    """One reference program: a KernelBench-format module's source, where it came from, and the
    benchmark it belongs to (None for programs of no benchmark); decontamination reads `benchmark`.
    `meta` says what `sftbuild programs` lists: family or op, input shapes and dtypes."""

    name: str
    src: str
    catalog: str = "handwritten"
    benchmark: str | None = None
    meta: dict | None = None


class Catalog(Plugin):
    """Base of every program catalog."""

    fixed = True  # a fixed list (the seed only orders it); False: generated to any size

    def programs(self, count: int, seed: int) -> list[Program]:
        """Fixed catalogs return every program (`count` is a hint); generated ones exactly `count`."""
        raise NotImplementedError


CATALOGS: Registry[Catalog] = Registry("catalog", Catalog, __name__,
                                       doc="reference programs the torch-inductor source compiles (harvest)")


def parse_location(location: str) -> list[str] | None:
    """Catalog names a location selects (`catalog` -> all), or None when it names no catalog."""
    if location in ("", "catalog"):
        return list(CATALOGS.names())
    if not location.startswith("catalog:"):
        return None
    names = [n.strip() for n in location[len("catalog:"):].split(",") if n.strip()]
    unknown = [n for n in names if n not in CATALOGS]
    if unknown or not names:
        raise SourceError(f"unknown program catalog {', '.join(unknown) or '(none named)'} "
                          f"(known: {', '.join(CATALOGS.names())}; e.g. catalog:opdb,fusions)")
    return list(dict.fromkeys(names))


GENERATED_MIN = 600  # a generated catalog contributes at least this many to a mix


def select(names: list[str], count: int | None = DEFAULT_PROGRAMS, seed: int = 0) -> list[Program]:
    """The first `count` programs of the seeded, proportional mix of the named catalogs."""
    if count is not None and not 1 <= count <= MAX_PROGRAMS:
        raise SourceError(f"programs must be between 1 and {MAX_PROGRAMS}, got {count}")
    cats = [CATALOGS.create(n) for n in names]
    fixed: dict[str, list[Program]] = {}
    for c in cats:
        if c.fixed:
            progs = list(c.programs(count or 0, seed))
            random.Random(f"sftbuild-catalog-{c.name}-{seed}").shuffle(progs)
            fixed[c.name] = progs
    n_fixed = sum(map(len, fixed.values()))
    generated = [c for c in cats if not c.fixed]
    lists = []
    for c in cats:
        if c.fixed:
            lists.append(fixed[c.name])
        else:
            want = max(GENERATED_MIN, (count or 0) - n_fixed) if fixed else (count or GENERATED_MIN)
            lists.append(c.programs(-(-want // len(generated)), seed))
    out, seen = [], set()
    for prog in mix(lists):
        if prog.src not in seen:  # distinct programs only
            seen.add(prog.src)
            out.append(prog)
    return out[:count] if count else out


def mix(lists: list[list[Program]]) -> list[Program]:
    """Interleave lists in proportion to their sizes: item i of a list of n sits at (i + 0.5) / n."""
    keyed = [((i + 0.5) / len(lst), k, i) for k, lst in enumerate(lists) for i in range(len(lst))]
    return [lists[k][i] for _, k, i in sorted(keyed)]


# ---- folders of reference modules ---------------------------------------------------------------------

def is_program(src: str) -> str | None:
    """Why a module's source is not a KernelBench-format program, or None when it is one."""
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return f"not valid Python: {type(e).__name__}: {str(e)[:120]}"
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in ("Model", "get_inputs") if n not in names]
    if missing:
        return f"defines no {' and no '.join(missing)} at module level"
    return None


def folder(directory: str | Path, benchmark: str | None = None) -> tuple[list[Program], list[tuple[str, str]]]:
    """Every `*.py` directly in `directory` (not recursive) that defines `Model` and `get_inputs`,
    as a Program of catalog "folder" and benchmark `benchmark` (default: the folder's name); the
    other files as (name, reason). Nothing is run: a file is only parsed."""
    d = Path(directory)
    bench = benchmark or d.resolve().name
    progs, skipped = [], []
    for p in sorted(d.iterdir()):
        if p.suffix != ".py" or p.name.startswith("."):
            continue
        if p.is_symlink():
            skipped.append((p.name, "a symlink (not followed)"))
            continue
        if not p.is_file():
            continue
        if p.stat().st_size > MAX_PROGRAM_BYTES:
            skipped.append((p.name, f"larger than {MAX_PROGRAM_BYTES} bytes"))
            continue
        try:
            src = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            skipped.append((p.name, "not UTF-8 text"))
            continue
        why = is_program(src)
        if why:
            skipped.append((p.name, why))
            continue
        progs.append(Program(str(p.resolve()), src, catalog="folder", benchmark=bench,
                             meta={"family": p.stem, **static_inputs(src)}))
    return progs, skipped


def static_inputs(src: str) -> dict:
    """Input shapes and dtypes read from `get_inputs()` without running it: `torch.randn(a, b)`,
    `torch.rand`, `torch.randint(lo, hi, shape)` with literal or module-level integer sizes,
    `.to(torch.X)`; what cannot be read is left out."""
    try:
        return _static_inputs(ast.parse(src))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}


def _static_inputs(tree: ast.Module) -> dict:
    consts = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            v = _int(n.value, consts)  # arithmetic on integer literals and earlier sizes, never evaluated code
            if v is not None:
                consts[n.targets[0].id] = v
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
    ret = next((n.value for n in ast.walk(fn) if isinstance(n, ast.Return)), None) if fn else None
    if not isinstance(ret, (ast.List, ast.Tuple)):
        return {}
    shapes, dtypes = [], set()
    for el in ret.elts:
        shape, dtype = _tensor_expr(el, consts)
        if shape is None:
            return {}
        shapes.append(shape)
        dtypes.add(dtype)
    return {"shapes": shapes, "dtypes": sorted(dtypes)}


def _int(node, consts):
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id]
    if isinstance(node, ast.BinOp):
        a, b = _int(node.left, consts), _int(node.right, consts)
        if a is None or b is None:
            return None
        if max(abs(a), abs(b)) > 1 << 40:
            return None
        ops = {ast.Mult: lambda: a * b, ast.FloorDiv: lambda: a // b if b else None, ast.Add: lambda: a + b,
               ast.Sub: lambda: a - b}
        return ops.get(type(node.op), lambda: None)()
    return None


def _tensor_expr(node, consts) -> tuple[list | None, str]:
    dtype = "float32"
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "cuda",
                                                                                                    "contiguous"):
        if node.func.attr == "to" and node.args and isinstance(node.args[0], ast.Attribute):
            dtype = node.args[0].attr
        node = node.func.value
    if isinstance(node, ast.Compare):  # torch.rand(...) > 0.5: a mask
        shape, _ = _tensor_expr(node.left, consts)
        return shape, "bool"
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("randn", "rand", "randint", "ones", "zeros")):
        return None, dtype
    args = node.args
    if node.func.attr == "randint":
        dtype, args = "int64", args[2:] if len(args) >= 3 else args[1:]
    for kw in node.keywords:
        if kw.arg == "dtype" and isinstance(kw.value, ast.Attribute):
            dtype = kw.value.attr
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        args = args[0].elts
    dims = [_int(a, consts) for a in args]
    return (None if any(d is None for d in dims) else dims), dtype


# ---- what a catalog holds (sftbuild programs) ----------------------------------------------------------

def row(prog: Program) -> dict:
    """One program as `sftbuild programs` lists it."""
    meta = prog.meta or {}
    return {"name": prog.name, "catalog": prog.catalog, "family": meta.get("family"),
            "shapes": meta.get("shapes"), "dtypes": meta.get("dtypes"), "benchmark": prog.benchmark}


def counts(progs: list[Program]) -> dict:
    """Programs per catalog, and the distinct ops and fusion structures among them."""
    per: dict[str, int] = {}
    for p in progs:
        per[p.catalog] = per.get(p.catalog, 0) + 1
    ops = {(p.meta or {}).get("family") for p in progs if p.catalog == "opdb"}
    return {"programs": len(progs), "distinct": len({p.src for p in progs}), "by_catalog": dict(sorted(per.items())),
            "opdb_ops": len(ops - {None})}
