"""Parsers the stages share, built once per process.

`cuda_parser()` is the tree-sitter CUDA parser: harvest extracts kernels with it and
describe reads features from its trees. `cuda_language()` is its grammar, for queries.
`param_info(decl)` reads one C/CUDA parameter declaration: harvest reads kernel, launcher and
CPU-function signatures with it, and binders read the records' kernel parameters.
`params(fn)`, `default_hints(tree)` and `is_jit(fn)` read Python functions from their syntax trees,
never running them: harvest reads entry points with them, and the probe's binder a package's defaults.
`strip_comments(code, language)` is the one comment stripper (string literals kept whole), and
`kernel_view(code)` the one parse of a CUDA record's text that static checks, describe, dedupe's
filters and binders read: its kernels' heads, bodies and parameters, its launches and includes,
built once per code text (cached by it) and frozen.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import math
import re

import tree_sitter as ts
import tree_sitter_cuda


@functools.lru_cache(maxsize=1)
def cuda_language() -> ts.Language:
    return ts.Language(tree_sitter_cuda.language())


@functools.lru_cache(maxsize=1)
def cuda_parser() -> ts.Parser:
    return ts.Parser(cuda_language())


INT_WORDS = {"int", "long", "size_t", "unsigned", "int64_t", "int32_t", "uint32_t", "uint64_t", "short"}
FLOAT_WORDS = {"float", "double"}


def param_info(decl: str) -> dict | None:
    """{type, name, ptr, const, kind: ptr|int|float} of one parameter declaration, None when unreadable."""
    decl = re.sub(r"\b(__restrict__|__restrict|restrict)\b", " ", decl.split("=")[0])
    if "&" in decl or "[" in decl or "(" in decl or decl.count("*") > 1:
        return None
    words = re.findall(r"[A-Za-z_]\w*", decl)
    if len(words) < 2:
        return None
    name, types = words[-1], [w for w in words[:-1] if w not in ("const", "volatile", "signed")]
    if not types:
        return None
    ptr = "*" in decl
    base = " ".join(types)
    const = "const" in words[:-1] and (not ptr or decl.find("const") < decl.find("*"))
    if ptr:
        kind = "ptr"
    elif set(types) <= INT_WORDS:
        kind = "int"
    elif set(types) <= FLOAT_WORDS:
        kind = "float"
    else:
        return None
    return {"type": base, "name": name, "ptr": ptr, "const": const, "kind": kind}


def literal(node, depth: int = 0, budget: list | None = None):
    """The value of a Python literal expression, read from its AST alone (never evaluated): numbers,
    strings, bytes, booleans, None, and tuples, lists, sets and dicts of them, with a unary sign.
    Nesting deeper than 16, more than 10,000 elements or a constant over 100,000 characters raise
    ValueError, as does anything else (a call, a name, an operator): hostile defaults cost nothing."""
    import ast

    budget = [10_000] if budget is None else budget
    budget[0] -= 1
    if depth > 16 or budget[0] < 0:
        raise ValueError("literal too large")
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, (str, bytes)) and len(v) > 100_000 or isinstance(v, int) and v.bit_length() > 4096:
            raise ValueError("literal too large")
        return v
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and \
            isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float, complex):
        v = literal(node.operand, depth + 1, budget)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [literal(e, depth + 1, budget) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else set(items) if isinstance(node, ast.Set) else items
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {literal(k, depth + 1, budget): literal(v, depth + 1, budget) for k, v in zip(node.keys, node.values)}
    raise ValueError("not a literal")


# ---- Python signatures: what harvest and the probe's binder read of a Triton package's functions ----

def decorator_names(fn) -> list[str]:
    """The dotted names a function's decorators call or are (`triton.jit`, `triton.autotune`)."""
    out = []
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        out.append(ast.unparse(target))
    return out


def is_jit(fn) -> bool:
    """Decorated by anything named `jit`, whatever it resolves to (see `Languages` for Triton's)."""
    return isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        n.split(".")[-1] == "jit" for n in decorator_names(fn))


def aliases(tree: ast.Module, names: set[str]) -> dict[str, str]:
    """Module-level names bound to one of `names` (`exp__kernel = exp_`, kept before a wrapper of the
    same name replaces the kernel's): {alias: name}, chains followed."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            target = out.get(node.value.id, node.value.id if node.value.id in names else None)
            if target:
                out.update({t.id: target for t in node.targets if isinstance(t, ast.Name) and t.id != target})
    return out


def walk(node: ast.AST) -> list[ast.AST]:
    """ast.walk's nodes in its order (breadth first), listed once per node and kept on it: extraction
    asks a dozen questions of one module's nodes and of each statement's (its trees are read only)."""
    nodes = node.__dict__.get("_walked")
    if nodes is None:
        nodes = node._walked = list(ast.walk(node))
    return nodes


def default_hints(tree: ast.AST) -> dict:
    """Literal defaults the whole file declares, by parameter name (`casting_mode="llama"` on an
    autograd Function): the values a wrapper without defaults is usually called with."""
    out: dict = {}
    for fn in walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and not is_jit(fn):
            for p in params(fn):
                if p["has_default"] and not isinstance(p["default"], dict) and p["kind"] in ("pos", "kwonly"):
                    out.setdefault(p["name"], p["default"])
    return out


def params(fn, drop_first: bool = False) -> list[dict]:
    """A function's parameters in order: name, literal default (or its source), annotation, kind."""
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    out = []
    for arg, d in zip(pos, defaults):
        out.append(param_of(arg, d, "pos"))
    if a.vararg:
        out.append({**param_of(a.vararg, None, "var"), "has_default": True})
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append(param_of(arg, d, "kwonly"))
    if a.kwarg:
        out.append({**param_of(a.kwarg, None, "varkw"), "has_default": True})
    return out[1:] if drop_first and out else out


def param_of(arg: ast.arg, default, kind: str) -> dict:
    value = None
    if default is not None:
        try:  # read from the AST, never evaluated: the default is the harvested file's text
            value = literal(default)
        except (ValueError, TypeError):
            value = {"source": ast.unparse(default)}  # not a literal: the callee's own default applies
    return {"name": arg.arg, "default": value, "has_default": default is not None,
            "annotation": ast.unparse(arg.annotation) if arg.annotation is not None else None, "kind": kind}


# ---- C text: main() and its checks, read without compiling ----

COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
VALIDATE_CALL = re.compile(r"\b(validate_\w*)\s*\(")
ASSIGN = r"(?:[-+*/%&|^]|<<|>>)?=(?!=)"  # after a name: it is assigned (`=`, `*=`, ...), not compared


def split_args(text: str, start: int, opens: str, closes: str) -> list[str] | None:
    """The comma-separated arguments from `start` (just past an opening parenthesis) to its match,
    each with its whitespace collapsed; None when the text ends first."""
    depth, i, parts = 1, start, []
    while i < len(text) and depth:
        ch = text[i]
        if ch in opens:
            depth += 1
        elif ch in closes:
            depth -= 1
        if (ch == "," and depth == 1) or depth == 0:
            part = " ".join(text[start:i].split())
            if part:
                parts.append(part)
            start = i + 1
        i += 1
    return parts if depth == 0 else None


def blank_comments(text: str) -> str:
    """`text` with its comments blanked (spaces, newlines kept, so offsets and lines still match):
    what main() leaves commented out (`int block_sizes[] = {32, /*768,*/ 1024};`) it never runs.
    String and character literals are kept whole, `//` inside them included."""
    return COMMENT_OR_STRING.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else
                                 re.sub(r"[^\n]", " ", m.group(0)), text)


def evaluate(expr: str, env: dict[str, float]) -> float:
    """A C arithmetic expression over known names; integer division between ints. ValueError otherwise."""
    e = re.sub(r"\(\s*(?:const\s+)?(?:unsigned\s+)?(?:int|long|size_t|int64_t|float|double)\s*\)", " ", expr)
    e = re.sub(r"(\d+\.?\d*(?:[eE][-+]?\d+)?)[fFuUlL]+\b", r"\1", e).strip()
    try:
        tree = ast.parse(e, mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot read {expr!r}") from None

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool):
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in env:
                raise ValueError(f"unknown name {n.id}")
            return env[n.id]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Add):
                return a + b
            if isinstance(n.op, ast.Sub):
                return a - b
            if isinstance(n.op, ast.Mult):
                return a * b
            if isinstance(n.op, (ast.Div, ast.FloorDiv, ast.Mod)):
                if b == 0:
                    raise ValueError("division by zero")
                if isinstance(n.op, ast.Mod):
                    return math.fmod(a, b) if isinstance(a, float) or isinstance(b, float) else int(math.fmod(a, b))
                if isinstance(a, int) and isinstance(b, int):
                    return int(a / b)  # C truncation
                return a / b
            if isinstance(n.op, ast.LShift) and isinstance(a, int) and isinstance(b, int) and 0 <= b < 63:
                return a << b
            if isinstance(n.op, ast.RShift) and isinstance(a, int) and isinstance(b, int) and 0 <= b < 63:
                return a >> b
        raise ValueError(f"cannot evaluate {expr!r}")

    return ev(tree)


# ---- comments, and the one view of a CUDA record's text ----

# C/C++/CUDA: strings are matched so that "//" inside a literal is not a comment.
C_COMMENTS = re.compile(r'("(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')|//[^\n]*|/\*[\s\S]*?\*/')
C_COMMENTS_ONLY = re.compile(r"//[^\n]*|/\*[\s\S]*?\*/")
# Python: every alternative starts with # or a quote, so the regex engine can skip ahead fast.
PY_COMMENTS = re.compile(r'#[^\n]*|"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
PYTHON_LANGUAGES = ("triton", "kernelbench")


def strip_comments(code: str, language: str = "cuda") -> str:
    """`code` with each comment replaced by a space (and, for Python, docstrings); string literals kept."""
    if language in PYTHON_LANGUAGES:
        # KernelBench solutions carry their CUDA source in Python strings: strip C comments there too.
        inner = language == "kernelbench"
        return PY_COMMENTS.sub(lambda m: _py_keep(m, inner), code)
    if "/" not in code:
        return code
    if '"' not in code and "'" not in code:
        return C_COMMENTS_ONLY.sub(" ", code)  # no literals to protect: a constant replacement is faster
    return C_COMMENTS.sub(r"\1 ", code)


def _py_keep(m: re.Match, inner: bool) -> str:
    s = m.group()
    if s[0] == "#":
        return " "
    if s[:3] in ('"""', "'''"):
        # a triple-quoted string alone on its line(s) is a docstring (or a no-op): drop it
        text, start, end = m.string, m.start(), m.end()
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        after = text[end:len(text) if line_end < 0 else line_end]
        if not text[line_start:start].strip() and (not after.strip() or after.lstrip().startswith("#")):
            return " "
    if inner and ("//" in s or "/*" in s):
        return C_COMMENTS.sub(r"\1 ", s)
    return s


@dataclasses.dataclass(frozen=True)
class KernelDef:
    """One `__global__` definition: `head` from `__global__` to its `{`, `body` between its braces."""
    name: str
    head: str
    body: str
    decls: tuple[str, ...]  # its parameter declarations, whitespace collapsed

    @property
    def params(self) -> tuple[dict | None, ...]:
        """param_info of each declaration: type, name, pointer, const-ness, kind (None when unreadable)."""
        return tuple(param_info(d) for d in self.decls)

    @property
    def definition(self) -> str:
        return self.head + "{" + self.body + "}"


@dataclasses.dataclass(frozen=True)
class KernelView:
    """A CUDA text read once, comments removed: its kernels (every definition, in order: `#if` branches
    may define one name twice), the names it launches with `<<<...>>>` and the headers it includes."""
    text: str
    kernels: tuple[KernelDef, ...]
    launches: tuple[str, ...]
    includes: tuple[str, ...]

    def kernel(self, name: str) -> KernelDef | None:
        """The first definition of `name`, None when the text defines none."""
        return next((k for k in self.kernels if k.name == name), None)


GLOBAL = re.compile(r"\b__global__\b")
LAUNCH = re.compile(r"\b(\w+)\s*(?:<[^<>;{}]*(?:<[^<>;{}]*>[^<>;{}]*)*>\s*)?<<<")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]', re.M)
BRACE = re.compile(r"[{}]")
HEAD_END = re.compile(r"[;{}]")
HEAD_SPAN = 10_000  # how far a kernel's head (attributes, name, parameters) is followed
MAX_KERNELS = 1_000  # `__global__` tokens read per text: hostile text gets linear cost, not quadratic


@functools.lru_cache(maxsize=32)  # a record's readers ask in turn; a view holds its text about twice
def kernel_view(code: str) -> KernelView:
    """The view of CUDA text `code`; built once per text (a record's id is its code's hash)."""
    text = strip_comments(code, "cuda")
    closing, stack = {}, []
    for b in BRACE.finditer(text):  # every brace's match, in one pass
        if b.group() == "{":
            stack.append(b.start())
        elif stack:
            closing[stack.pop()] = b.start()
    kernels = []
    for n, m in enumerate(GLOBAL.finditer(text)):
        if n >= MAX_KERNELS:
            break
        if k := _kernel_def(text, m.start(), m.end(), closing):
            kernels.append(k)
    launches = tuple(dict.fromkeys(m.group(1) for m in LAUNCH.finditer(text)))
    return KernelView(text, tuple(kernels), launches, tuple(INCLUDE.findall(text)))


def _kernel_def(text: str, start: int, i: int, closing: dict[int, int]) -> KernelDef | None:
    """The definition whose `__global__` spans start..i; None for a declaration or unreadable text."""
    end = HEAD_END.search(text, i, i + HEAD_SPAN)
    if not end or end.group() != "{" or end.start() not in closing:
        return None
    head = text[start:end.start()]
    close = head.rfind(")")
    depth, j = 0, close
    while j >= 0:  # back to the parameter list's own "("
        depth += {")": 1, "(": -1}.get(head[j], 0)
        if depth == 0:
            break
        j -= 1
    name = re.search(r"(\w+)\s*(?:<[^()]*>)?\s*$", head[max(0, j - 300):j]) if close >= 0 and j >= 0 else None
    if not name:
        return None
    decls = tuple(split_args(head, j + 1, "(<[", ")>]") or [])
    return KernelDef(name.group(1), head, text[end.start() + 1:closing[end.start()]], decls)
