"""The house as its imports draw it: rooms, floors, arrows and cycles.

  * A room is a package directly under `sftbuild` or a top-level module of it; its size is its lines.
  * An arrow A -> B means some module of A imports some module of B (grimp, the graph import-linter
    reads); the count beside it is how many module pairs draw it.
  * Floors are counted down from the roof (the rooms nothing imports): a room sits one floor below the
    lowest room that imports it, so every arrow runs down. Rooms that import each other (a cycle)
    share a floor and are named.
  * A hidden arrow is a module path written as a string (`"sftbuild.x.y:fn"`, loaded by name at run
    time) that names another room: the import contract cannot see it, so it is listed apart. The
    registries' own declarations (plugins.py, stages.py) and strings beside a real import arrow are
    marked; any other is a back door (`back_doors`, which tests/core/test_architecture.py keeps empty).
  * `--mermaid` prints the picture as a Mermaid graph instead of text.

    python bench/structure.py [--mermaid]
"""
from __future__ import annotations

import argparse
import ast
import re
from collections import defaultdict
from pathlib import Path

import grimp

PKG = "sftbuild"
REGISTRIES = ("plugins", "stages")  # they name where plug-ins and stages live: their strings are the design
ROOT = Path(__file__).resolve().parents[1] / PKG


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def lines(name: str) -> int:
    path = ROOT / name
    files = path.rglob("*.py") if path.is_dir() else [path.with_suffix(".py")]
    return sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files)


def arrows(graph) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = defaultdict(int)
    for mod in graph.modules:
        for dep in graph.find_modules_directly_imported_by(mod):
            a, b = room(mod), room(dep)
            if a != b and a != PKG and b != PKG:
                out[a, b] += 1
    return dict(out)


def hidden(graph) -> dict[tuple[str, str], int]:
    """Arrows drawn by module paths in string constants (docstrings left out)."""
    named = re.compile(rf"^{PKG}\.(\w+)(\.\w+)*(:\w+)?$")
    out: dict[tuple[str, str], int] = defaultdict(int)
    for mod in graph.modules:
        path = ROOT.parent / (mod.replace(".", "/") + ".py")
        path = path if path.exists() else path.with_suffix("") / "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                m = named.match(node.value)
                if m and m.group(1) != room(mod) and (ROOT / m.group(1)).exists() | (ROOT / f"{m.group(1)}.py").exists():
                    out[room(mod), m.group(1)] += 1
    return dict(out)


def back_doors(edges, strings) -> list[tuple[str, str]]:
    """Hidden arrows that neither a registry declares nor a real import runs beside."""
    return sorted(k for k in strings if k[0] not in REGISTRIES and k not in edges)


def cycles(rooms: list[str], edges) -> list[list[str]]:
    """Strongly connected groups of more than one room (Tarjan)."""
    succ = defaultdict(list)
    for a, b in edges:
        succ[a].append(b)
    index, low, stack, on, found, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for r in rooms:
        if r not in index:
            visit(r)
    return found


def floors(rooms: list[str], edges, groups) -> dict[str, int]:
    """Each room's floor, counted down from the roof: a room sits one floor below the lowest room that
    imports it (the rooms nothing imports, the CLI, form the roof), then the floors are numbered from
    the ground up. So a room sits as high as its importers allow: rooms that only the CLI uses share
    the floor under it, whatever they import themselves."""
    rep = {r: r for r in rooms}
    for g in groups:
        for r in g:
            rep[r] = g[0]
    up = defaultdict(set)
    for a, b in edges:
        if rep[a] != rep[b]:
            up[rep[b]].add(rep[a])
    memo: dict[str, int] = {}

    def depth(r):
        if r not in memo:
            memo[r] = 1 + max((depth(a) for a in up[r]), default=-1)
        return memo[r]

    deepest = max((depth(rep[r]) for r in rooms), default=0)
    return {r: deepest - depth(rep[r]) for r in rooms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mermaid", action="store_true", help="print a Mermaid graph")
    args = ap.parse_args()
    graph = grimp.build_graph(PKG, include_external_packages=False)
    rooms = sorted({room(m) for m in graph.modules} - {PKG})
    edges = arrows(graph)
    groups = cycles(rooms, edges)
    level = floors(rooms, edges, groups)
    if args.mermaid:
        print("graph TD")
        for (a, b), n in sorted(edges.items()):
            print(f"  {a} -->|{n}| {b}")
        return
    top = max(level.values())
    print(f"{len(rooms)} rooms on {top + 1} floors, {len(edges)} arrows, "
          f"{len(groups)} cycle{'s' * (len(groups) != 1)}" + "".join(f": {' <-> '.join(g)}" for g in groups))
    for f in range(top, -1, -1):
        here = [r for r in rooms if level[r] == f]
        print(f"floor {f}: " + ", ".join(f"{r} ({lines(r):,} lines)" for r in here))
    print("arrows (room -> rooms it imports):")
    for r in sorted(rooms, key=lambda r: (-level[r], r)):
        outs = sorted(b for a, b in edges if a == r)
        if outs:
            print(f"  {r} -> {', '.join(outs)}")
    strings = hidden(graph)
    print(f"hidden arrows (module paths in strings): {len(strings)}, back doors: {len(back_doors(edges, strings))}")
    for (a, b), n in sorted(strings.items()):
        why = ("the registry's declaration" if a in REGISTRIES else "beside an import" if (a, b) in edges
               else "a back door")
        print(f"  {a} ~> {b} ({n})  ({why})")


if __name__ == "__main__":
    main()
