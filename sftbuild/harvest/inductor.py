"""PyTorch Inductor programs and output code, read by the `torch-inductor` source kind.

Each program is a KernelBench-format module (`Model`, `get_inputs`,
`get_init_inputs`): the built-in catalogs (sftbuild/harvest/catalog/), a folder
of reference modules, or a user module given by path. It is compiled with
dynamic shapes; the generated output code is captured with `torch._inductor.utils.run_and_get_code`, and every kernel in it
(`async_compile.triton(name, source)`) becomes a record bound exactly to the
program that produced it. Inductor writes Triton only for GPU devices, so this
source needs CUDA; without it the source fails with a clear message.
"""
from __future__ import annotations

import ast
from pathlib import Path

from sftbuild.harvest.catalog import Program, folder, is_program, parse_location, select, static_inputs
from sftbuild.harvest.sources import SourceError

__all__ = ["Program", "programs", "kernels_in_output", "compile_program"]


def programs(location: str, count: int | None = None, seed: int = 0, benchmark: str | None = None,
             skipped: list | None = None) -> list[Program]:
    """The programs a location names; a folder's files that are not programs go to `skipped` as
    (file name, reason):
    - "catalog" (every catalog) or "catalog:NAME[,NAME...]": the first `count` programs of the seeded
      mix of those catalogs (sftbuild.harvest.catalog);
    - a folder: every KernelBench-format module directly in it (not recursive), of benchmark
      `benchmark` (default: the folder's name);
    - a .py module with `Model` and `get_inputs`: that one program.
    Nothing here runs a program."""
    names = parse_location(location)
    if names is not None:
        return select(names, count, seed)
    p = Path(location)
    if p.is_dir():
        progs, others = folder(p, benchmark)
        if skipped is not None:
            skipped.extend(others)
        if not progs:
            why = "; ".join(f"{n}: {r}" for n, r in others[:3]) or "it holds no .py file"
            raise SourceError(f"folder {location} holds no reference program (a .py module defining "
                              f"`class Model` and `def get_inputs()`): {why}")
        return progs[:count] if count else progs
    if not p.is_file():
        raise SourceError(f"program module {location} does not exist")
    try:
        src = p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError) as e:
        raise SourceError(f"program module {location} cannot be read: {e}") from None
    why = is_program(src)
    if why:
        raise SourceError(f"{location}: a program module needs `class Model` and `def get_inputs()` ({why})")
    return [Program(str(p.resolve()), src, catalog="file", benchmark=benchmark,
                    meta={"family": p.stem, **static_inputs(src)})]


def kernels_in_output(code: str) -> list[dict]:
    """Kernels in Inductor output code: `name = async_compile.triton('name', '''src''', ...)`."""
    tree = ast.parse(code)
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "triton" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "async_compile" \
                and len(node.args) >= 2 and all(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                                for a in node.args[:2]):
            found[node.args[0].value] = {"name": node.args[0].value, "code": node.args[1].value,
                                         "launch_sites": []}
    for node in ast.walk(tree):  # launches: `kernel.run(...)` in the generated `call`
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in found:
            found[node.func.value.id]["launch_sites"].append(
                {"function": "call", "line": node.lineno, "text": ast.unparse(node)[:500]})
    return list(found.values())


def compile_program(name: str, src: str) -> list[str]:
    """Run a program under torch.compile(dynamic=True) on the GPU; return the output code."""
    import torch
    from torch._inductor.utils import run_and_get_code

    ns: dict = {"__name__": f"sftbuild_program_{abs(hash(name))}"}
    exec(compile(src, name, "exec"), ns)
    init = ns.get("get_init_inputs", lambda: [])()
    model = ns["Model"](*init).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ns["get_inputs"]()]
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=True)
    with torch.no_grad():
        _, codes = run_and_get_code(compiled, *inputs)
    return list(codes)
