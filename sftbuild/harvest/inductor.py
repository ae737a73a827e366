"""PyTorch Inductor programs and output code, read by the `torch-inductor` source kind.

Each program is a KernelBench-format module (`Model`, `get_inputs`,
`get_init_inputs`): the built-in catalog (catalog/programs.py) or a user module
given by path. It is compiled with dynamic shapes; the generated output code is
captured with `torch._inductor.utils.run_and_get_code`, and every kernel in it
(`async_compile.triton(name, source)`) becomes a record bound exactly to the
program that produced it. Inductor writes Triton only for GPU devices, so this
source needs CUDA; without it the source fails with a clear message.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

from sftbuild.harvest.sources import SourceError


class Program(NamedTuple):
    """One reference program: a KernelBench-format module's source, where it came from, and the
    benchmark it belongs to (None for programs of no benchmark); decontamination reads `benchmark`."""

    name: str
    src: str
    catalog: str = "handwritten"
    benchmark: str | None = None


def programs(location: str) -> list[Program]:
    """The programs a location names: a built-in catalog or a program module."""
    if location in ("", "catalog"):
        from sftbuild.harvest.catalog.programs import catalog

        return [Program(name, src) for name, src in catalog()]
    p = Path(location)
    if not p.is_file():
        raise SourceError(f"program module {location} does not exist")
    src = p.read_text(encoding="utf-8")
    names = {n.name for n in ast.parse(src).body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    if not {"Model", "get_inputs"} <= names:
        raise SourceError(f"{location}: a program module needs `class Model` and `def get_inputs()`")
    return [Program(str(p.resolve()), src, catalog="file")]


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
