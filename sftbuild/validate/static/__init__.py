"""Static checks: read the code, never run it.

A static check is a plug-in of kind `static_check`: one file in this folder holding a
`StaticCheck` subclass registered with `@STATIC_CHECKS.register`, with a `name`, the
languages it reads, and one `check(src)` method yielding findings:

    @STATIC_CHECKS.register
    class NoPrintf(StaticCheck):
        '''printf in device code slows every launch.'''
        name = "no_printf"
        languages = ("cuda",)

        def check(self, src):
            if "printf(" in src.cuda:
                yield self.found("bad_launch", "printf in device code")

A finding is (reason, check, detail) where reason is `cheat`, `forbidden_call` or
`bad_launch`. `scan(code, language, budget, checks)` runs the selected checks in
their `order` and returns the findings; the first one decides the verdict. `budget`
holds the device limits (`max_block_size`, `shared_memory_budget`) that several
checks share; `checks` is the config's `validate.static_checks` selection.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
from typing import Iterator

from sftbuild.parsing import KernelView, kernel_view
from sftbuild.plugins import Plugin, Registry
from sftbuild.validate.static._read import aliases, full_name, is_jit


@dataclasses.dataclass
class Finding:
    reason: str  # cheat | forbidden_call | bad_launch
    check: str
    detail: str


class Source:
    """The code split into what checks read: Python AST, Python source, the CUDA C++ view (comments stripped)."""

    def __init__(self, code: str, language: str, budget: dict | None = None):
        self.code, self.language = code, language
        self.budget = {"max_block_size": 1024, "shared_memory_budget": 232448, **(budget or {})}
        self.tree: ast.AST | None = None
        self.syntax_error = ""
        if language in ("triton", "kernelbench"):
            try:
                self.tree = ast.parse(code)
            except SyntaxError as e:
                self.syntax_error = f"line {e.lineno}: {e.msg}"

    @functools.cached_property
    def view(self) -> KernelView:
        """The shared parse (sftbuild.parsing.kernel_view) of the CUDA text: the code itself, or the
        string constants of a Python module (load_inline sources)."""
        if self.language == "cuda":
            return kernel_view(self.code)
        parts = [] if self.tree is None else [
            n.value for n in ast.walk(self.tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and ("__global__" in n.value or "#include" in n.value or "torch::" in n.value)]
        return kernel_view("\n".join(parts))

    @property
    def cuda(self) -> str:
        """The CUDA text, comments removed."""
        return self.view.text

    @functools.cached_property
    def aliases(self) -> dict[str, str]:
        """Import aliases of the Python module (`F` -> `torch.nn.functional`)."""
        return aliases(self.tree) if self.tree is not None else {}

    @functools.cached_property
    def forward(self) -> list[ast.AST]:
        """Bodies of ModelNew.forward (KernelBench) or of the non-jit functions (Triton wrappers)."""
        if self.tree is None:
            return []
        out = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
                out += [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "forward"]
        if self.language == "triton" and not out:
            out = [f for f in self.tree.body if isinstance(f, ast.FunctionDef) and not is_jit(f)]
        return out

    def calls(self, nodes=None) -> Iterator[tuple[str, ast.Call]]:
        """(full dotted name, node) of every call under `nodes` (default: the module)."""
        for root in nodes if nodes is not None else [self.tree]:
            for n in ast.walk(root):
                if isinstance(n, ast.Call):
                    yield full_name(n.func, self.aliases), n


class StaticCheck(Plugin):
    """Base of a static check: `check(src)` yields findings for one record's code."""

    languages: tuple[str, ...] = ("cuda", "triton", "kernelbench")

    def check(self, src: Source) -> Iterator[Finding]:
        raise NotImplementedError

    def found(self, reason: str, detail: str) -> Finding:
        return Finding(reason, self.name, detail)


PYTHON = ("triton", "kernelbench")  # the languages whose code is a Python module

STATIC_CHECKS: Registry[StaticCheck] = Registry(
    "static_check", StaticCheck, package=__name__,
    doc="read a record's code without running it; the first finding drops the record")


def scan(code: str, language: str, budget: dict | None = None, checks: dict | None = None) -> list[Finding]:
    """The findings of every selected check that reads `language`, in check order."""
    src = Source(code, language, budget)
    if src.syntax_error:
        return [Finding("compile_error", "parse", f"Python syntax error, {src.syntax_error}")]
    return [f for c in STATIC_CHECKS.configured(checks, "validate.static_checks")
            if language in c.languages for f in c.check(src)]

