"""The dtype a CUDA file's element type names as the file builds it.

llm.c's launchers take `floatX*`; `common.h` makes floatX `__nv_bfloat16` under
`#if defined(ENABLE_BF16)`, `half` under `#elif defined(ENABLE_FP16)` and `float` otherwise, and a
file that writes `#define ENABLE_BF16` before its include builds in bf16. `dtype_of(name, texts)`
follows `typedef` and `using` through the preprocessor branches the texts' own `#define`s select
to one of CUDA's floating types. A branch whose condition is more than `defined` names joined by
`!`, `&&` and `||` (an architecture test, a version) is neither taken nor refused: a typedef found
only under one resolves to nothing, and the caller keeps its default rather than guess.
"""
from __future__ import annotations

import re

from sftbuild.parsing import blank_comments

FLOATS = {"float": "float32", "double": "float64", "half": "float16", "__half": "float16",
          "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16"}
_DIRECTIVE = re.compile(r"\s*#\s*(ifdef|ifndef|if|elif|else|endif)\b(.*)")


def dtype_of(name: str, texts: list[str]) -> str | None:
    """The torch dtype name `name` resolves to in `texts` (code, then its headers); None if unknown."""
    defined = defines(texts)
    seen: set[str] = set()
    while name not in FLOATS:
        if name in seen:
            return None
        seen.add(name)
        name = _alias(name, texts, defined)
        if name is None:
            return None
    return FLOATS[name]


def defines(texts: list[str]) -> set[str]:
    """The names the texts `#define` anywhere (what their conditions test)."""
    return {d for t in texts for d in re.findall(r"(?m)^\s*#\s*define\s+(\w+)", t)}


def _alias(name: str, texts: list[str], defined: set[str]) -> str | None:
    pattern = re.compile(rf"\s*(?:typedef\s+(?:const\s+)?(\w+)\s+{re.escape(name)}\s*;|"
                         rf"using\s+{re.escape(name)}\s*=\s*(?:const\s+)?(\w+)\s*;)")
    for text in texts:
        for line in active_lines(text, defined):
            m = pattern.match(line)
            if m:
                return m.group(1) or m.group(2)
    return None


def active_lines(text: str, defined: set[str]) -> list[str]:
    """The lines of `text` outside every branch its conditions refuse or leave undecided."""
    stack: list[list] = []  # per open #if: [this branch taken (True/False/None), an earlier one taken]
    out = []
    for line in text.splitlines():
        m = _DIRECTIVE.match(line)
        if not m:
            if all(f[0] is True for f in stack):
                out.append(line)
            continue
        kw, rest = m.groups()
        if kw in ("if", "ifdef", "ifndef"):
            val = condition(kw, rest, defined)
            stack.append([val, val])
        elif not stack:
            continue  # an unbalanced directive: the rest is read as it stands
        elif kw == "elif":
            earlier = stack[-1][1]
            val = False if earlier is True else (condition("if", rest, defined) if earlier is False else None)
            stack[-1] = [val, True if val is True else earlier]
        elif kw == "else":
            earlier = stack[-1][1]
            stack[-1] = [None if earlier is None else not earlier, True]
        else:
            stack.pop()
    return out


def condition(kw: str, rest: str, defined: set[str]) -> bool | None:
    """A directive's condition over `defined`; None for anything beyond defined names and ! && ||."""
    rest = blank_comments(rest).strip()
    if kw in ("ifdef", "ifndef"):
        return (rest in defined) == (kw == "ifdef") if re.fullmatch(r"\w+", rest) else None
    expr = re.sub(r"defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)",
                  lambda m: str((m.group(1) or m.group(2)) in defined), rest)
    expr = expr.replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr)
    if not re.fullmatch(r"(?:\s|True|False|and|or|not|\(|\))*", expr) or not expr.strip():
        return None
    try:
        return bool(eval(expr, {"__builtins__": {}}, {}))  # only True/False/and/or/not/parentheses remain
    except SyntaxError:
        return None
