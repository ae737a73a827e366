"""Drop samples that are mostly commented-out code."""
from __future__ import annotations

import ast
import dataclasses
import re

from sftbuild.config import opt
from sftbuild.dedupe.filters import FILTERS, Filter
from sftbuild.parsing import C_COMMENTS, C_COMMENTS_ONLY, PY_COMMENTS, PYTHON_LANGUAGES, strip_comments

# a C/CUDA comment line reads as code when it is a statement (a ';' ending after an operator, call or
# index, or a jump), opens or closes a block, or is a directive; prose ending in ';' does not count
_C_CODE = re.compile(r"[=()\[\]][^;]*;\s*\Z|\A(?:return|break|continue)\b.*;\s*\Z|[{}]\s*;?\s*\Z|"
                     r"\A(?:#\s*(?:include|define|pragma|ifn?def|if|endif)\b|(?:if|for|while|switch)\s*\()")
# what every Python statement below has, tested before the (much slower) parse
_PY_MAYBE = re.compile(r"[=(]|\A(?:@|(?:return|pass|break|continue|import|from|assert|raise|del|for|if|while|with|"
                       r"def)\b)")
# Python statements that prose does not parse as; a lone expression counts only when it is a call
_PY_STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.If, ast.For, ast.While, ast.With,
                  ast.Import, ast.ImportFrom, ast.Assert, ast.Raise, ast.Delete, ast.FunctionDef, ast.Pass,
                  ast.Break, ast.Continue)


@FILTERS.register
class CommentedCode(Filter):
    """Mostly commented-out code: dead code in comments outweighs the live code.

    Training on such samples teaches a model to leave dead code behind. A CUDA comment
    line counts as code when it is a statement (``x[i] = y;``, ``f(a);``, ``return;``),
    opens or closes a block, or is a directive; a Python comment when it parses as an
    assignment, a call or another statement, never as a bare name or annotation (so
    prose such as ``Note: ...`` or ``size in bytes`` is not code).
    """

    name = "commented_code"
    version = 1
    order = 60  # after the older filters, so their drop reasons stay as they were

    @dataclasses.dataclass
    class Params:
        max_share: float = opt(0.5, "dropped when commented-out code lines are at least this share of "
                                    "all code lines, live and commented", lo=0, hi=1, lo_open=True)
        min_lines: int = opt(5, "fewer commented-out code lines never drop a sample", lo=1)

    def filter(self, doc):
        python = doc.language in PYTHON_LANGUAGES
        dead = sum(1 for line in _comment_lines(doc.text, python)
                   if (_py_code(line) if python else _C_CODE.search(line)))
        if dead < self.params.min_lines:
            return True
        live = sum(1 for line in strip_comments(doc.text, doc.language).splitlines() if line.strip())
        share = dead / (dead + live)
        if share < self.params.max_share:
            return True
        return False, f"{dead} commented-out code lines against {live} live ({share:.0%})"


def _comment_lines(code: str, python: bool) -> list[str]:
    """The text of every comment line, markers removed; string literals are skipped."""
    if python:
        lexer = PY_COMMENTS
    elif "/" not in code:
        return []
    else:  # without literals to step over, the comments-only pattern is much faster
        lexer = C_COMMENTS if '"' in code or "'" in code else C_COMMENTS_ONLY
    out = []
    for m in lexer.finditer(code):
        s = m.group()
        if s.startswith("#") and python:
            out.append(s[1:])
        elif s.startswith("//"):
            out.append(s[2:])
        elif s.startswith("/*"):
            out += [line.strip().lstrip("*") for line in s[2:-2].splitlines()]
    return [line.strip() for line in out if line.strip()]


def _py_code(line: str) -> bool:
    if not _PY_MAYBE.search(line):
        return False
    if line.endswith(":"):
        line += " pass"  # a commented-out block header ("for i in range(n):") parses once it has a body
    elif line.startswith("@"):
        line += "\ndef _(): pass"  # and a decorator once it decorates something
    try:
        tree = ast.parse(line)
    except (SyntaxError, ValueError, RecursionError):
        return False
    if len(tree.body) != 1:
        return False
    node = tree.body[0]
    if isinstance(node, ast.AnnAssign) and node.value is None:
        return False  # "Note: something" parses as an annotation
    return isinstance(node, _PY_STATEMENTS) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call))
