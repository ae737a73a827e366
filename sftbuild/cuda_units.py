"""A CUDA file read as units: the top-level pieces (functions, types, macros, declarations, includes)
tree-sitter-cuda finds, each with the names it defines and uses, and how far a kernel's names reach.

Read by harvest's extraction (a kernel's closure is the units its names reach) and by the compile
gate's blame (an error in a header unit the kernel never reaches is the extraction's fault, not the
kernel's), so both judge reach by the same reading.

Invariants:
  * A unit's offsets point into `origin` (the file, or its includer's prelude); lines are 1-based.
  * Attributes and launch bounds are masked before parsing, with lengths kept, so offsets still hold.
  * `prune_headers` blanks the header functions a record's code never reaches, newlines kept (a
    compiler's line numbers still point into the original header); `unused_at` names what the unit at
    a header line defines when nothing reaches it.
  * `safe_rel` is a path inside a tree, or None where it is absolute or escapes it.
"""
from __future__ import annotations

import dataclasses
import functools
import re

import tree_sitter as ts

from sftbuild.parsing import cuda_language, cuda_parser


WORD = re.compile(r"[A-Za-z_]\w*")

UNIT_TYPES = {
    "function_definition", "template_declaration", "declaration", "type_definition",
    "alias_declaration", "struct_specifier", "class_specifier", "enum_specifier", "union_specifier",
    "preproc_def", "preproc_function_def", "using_declaration", "namespace_alias_definition",
    "static_assert_declaration", "expression_statement", "template_instantiation",
}

SCOPE_TYPES = {"namespace_definition", "linkage_specification"}

CONDITIONAL_TYPES = {"preproc_if", "preproc_ifdef"}

# attribute-like macros that take arguments and precede a declaration
ATTRIBUTE_CALLS = re.compile(rb"\b(__launch_bounds__|\w*LAUNCH_BOUNDS\w*|__attribute__|alignas|__align__|"
                             rb"__declspec)\s*\(")

# any other all-caps macro call directly before `__global__` is an attribute too
MACRO_BEFORE_GLOBAL = re.compile(rb"\b([A-Z_][A-Z0-9_]{2,})\s*\(")

# attribute-like macros without arguments
ATTRIBUTE_WORDS = re.compile(rb"\b(C10_HOST_DEVICE|C10_DEVICE|C10_HOST|C10_ALWAYS_INLINE|C10_NOINLINE|"
                             rb"C10_ALWAYS_INLINE_ATTRIBUTE|__ubsan_ignore_\w+__|C10_HIP_HOST_DEVICE|C10_RESTRICT|GPU_LAMBDA)\b")

STRING_TYPES = {"string_literal", "raw_string_literal", "raw_string_content", "string_content",
                "char_literal", "concatenated_string"}

# a conditional left empty once attributes are blanked (`template <...> #if !defined(USE_ROCM)
# C10_LAUNCH_BOUNDS_1(...) #endif __global__ ...`): harmless to the compiler, fatal to the grammar
EMPTY_CONDITIONAL = re.compile(rb"^[ \t]*#[ \t]*if(?:n?def)?\b[^\n]*\n(?:[ \t]*(?://[^\n]*)?\n)*?[ \t]*#[ \t]*endif\b[^\n]*",
                               re.M)

ROCM_MACROS = ("USE_ROCM", "__HIP_PLATFORM_AMD__", "__HIP_PLATFORM_HCC__", "USE_ROCM_CK_GEMM")

@functools.lru_cache(maxsize=1)
def _identifier_query():
    return ts.Query(cuda_language(),
                    "[(identifier) (type_identifier) (namespace_identifier) (field_identifier) (preproc_arg)] @id")

def _captures(node) -> list:
    """Identifier nodes under `node`, found by a compiled query (far faster than a Python walk)."""
    return ts.QueryCursor(_identifier_query()).captures(node).get("id", [])

@dataclasses.dataclass
class Unit:
    start: int  # byte offsets into the file
    end: int
    scopes: tuple[tuple[str, str], ...]  # (opener, closer) of enclosing namespaces and #if blocks
    defines: set[str]
    uses: set[str]
    kernels: list[str]  # names of __global__ functions defined here
    line_start: int
    line_end: int
    include: bool = False
    origin: bytes = b""  # the text the offsets point into (the file, or its includer's prelude)
    function: bool = False  # a function definition with a body (templates included)

DEFINE_LINE = re.compile(r"\s*#\s*define\b")

TRAILING_SPACE = re.compile(rb"([ \t]+)\n")

def mask_attributes(src: bytes) -> bytes:
    """Blank attribute macros (keeping length and newlines) so the grammar sees the declaration."""
    out = bytearray(src)
    for m in ATTRIBUTE_CALLS.finditer(src):
        line_start = src.rfind(b"\n", 0, m.start()) + 1
        if src[line_start:m.start()].lstrip().startswith(b"#"):
            continue  # the macro's own #define, or a directive: leave it
        end = _balanced(src, m.end() - 1)
        if end is None:
            continue
        _blank(out, m.start(), end)
    for g in re.finditer(rb"\b__global__\b", src):
        lo = max(0, g.start() - 400)
        for m in MACRO_BEFORE_GLOBAL.finditer(src, lo, g.start()):
            end = _balanced(src, m.end() - 1)
            if end is not None and not src[end:g.start()].strip():
                line_start = src.rfind(b"\n", 0, m.start()) + 1
                if not src[line_start:m.start()].lstrip().startswith(b"#"):
                    _blank(out, m.start(), end)
    for m in ATTRIBUTE_WORDS.finditer(src):
        line_start = src.rfind(b"\n", 0, m.start()) + 1
        if not src[line_start:m.start()].lstrip().startswith(b"#"):
            _blank(out, m.start(), m.end())
    for m in EMPTY_CONDITIONAL.finditer(bytes(out)):
        _blank(out, m.start(), m.end())
    # a `#define F(x) ` with only spaces after it swallows the next line (causal-conv1d's `#else`): the
    # spaces move past the newline, so every byte but them keeps its offset and line
    return TRAILING_SPACE.sub(lambda m: b"\n" + m.group(1), bytes(out))

def _balanced(src: bytes, open_at: int) -> int | None:
    depth = 0
    for i in range(open_at, min(len(src), open_at + 2000)):
        c = src[i]
        if c == 40:  # (
            depth += 1
        elif c == 41:  # )
            depth -= 1
            if depth == 0:
                return i + 1
    return None

def _blank(buf: bytearray, a: int, b: int) -> None:
    for i in range(a, b):
        if buf[i] not in (10, 13):
            buf[i] = 32

def _text(src: bytes, u: Unit) -> str:
    return (u.origin or src)[u.start:u.end].decode("utf-8", "replace")

def _collect(node, src, scopes, units, dead, top=False):
    children = node.children
    real = [c for c in children if c.type != "comment"]
    # A file-wide `#if` guard wraps everything: look through it.
    if top and len(real) == 1 and real[0].type in CONDITIONAL_TYPES:
        inner = [c for c in real[0].children if c.type not in ("preproc_else", "preproc_elif")]
        return _collect_list(inner, src, scopes, units, dead)
    return _collect_list(children, src, scopes, units, dead)

def _collect_list(children, src, scopes, units, dead):
    for c in children:
        if c.type == "preproc_include":
            units.append(Unit(c.start_byte, c.end_byte, scopes, set(), set(), [],
                              c.start_point[0] + 1, c.end_point[0] + 1, include=True))
        elif c.type in SCOPE_TYPES:
            body = c.child_by_field_name("body")
            if body is None:
                continue
            opener = src[c.start_byte:body.start_byte].decode("utf-8", "replace").strip() + " {"
            _collect_list(body.children, src, scopes + ((opener, "}"),), units, dead)
        elif c.type in CONDITIONAL_TYPES:
            _collect_conditional(c, src, scopes, units, dead)
        elif _is_using_namespace(c):
            units.append(Unit(c.start_byte, c.end_byte, scopes, set(), set(), [],
                              c.start_point[0] + 1, c.end_point[0] + 1, include=True))
        elif c.type in UNIT_TYPES:
            u = _unit(c, src, scopes)
            nxt = c.next_sibling
            if nxt is not None and nxt.type == ";":  # `struct X {...};` parses as specifier + `;`
                u.end = nxt.end_byte
            units.append(u)
        elif c.type == "ERROR":
            _collect_error(c, src, scopes, units, dead)

def _collect_error(node, src, scopes, units, dead):
    """Recover from a construct the grammar cannot read: the parser then flattens the
    enclosing namespace and struct into loose tokens, so we rebuild both from the tokens."""
    stack = list(scopes)
    depth_at: list[int] = []  # brace depth where each recovered namespace opened
    raw_start, raw_name, depth = None, None, 0
    kids = node.children
    for k, c in enumerate(kids):
        t = c.type
        if raw_start is not None:
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
            elif t == ";" and depth == 0:
                text = src[raw_start.start_byte:c.end_byte].decode("utf-8", "replace")
                units.append(Unit(raw_start.start_byte, c.end_byte, tuple(stack), {raw_name} if raw_name else set(),
                                  set(WORD.findall(text)) - {raw_name}, [], raw_start.start_point[0] + 1,
                                  c.end_point[0] + 1))
                raw_start = None
            elif t in ("type_identifier",) and raw_name is None:
                raw_name = c.text.decode()
            continue
        if t == "namespace" and k + 2 < len(kids) and kids[k + 2].type == "{":
            stack.append((src[c.start_byte:kids[k + 2].start_byte].decode().strip() + " {", "}"))
            depth_at.append(0)
        elif t == "}" and depth_at:
            depth_at.pop()
            stack.pop()
        elif t in ("template", "struct", "class", "union") and (k == 0 or kids[k - 1].type != "template"):
            raw_start, raw_name, depth = c, None, 0
        elif t in UNIT_TYPES or t == "ERROR" or t in CONDITIONAL_TYPES or t == "preproc_include":
            _collect_list([c], src, tuple(stack), units, dead)

def _branches(node):
    """(condition text or None for #else, child nodes) for each branch of an #if chain."""
    out = []
    while node is not None:
        if node.type == "preproc_ifdef":
            name = node.child_by_field_name("name").text.decode()
            neg = node.children[0].type == "#ifndef"
            cond = f"{'!' if neg else ''}defined({name})"
        elif node.type == "preproc_else":
            cond = None
        else:
            cond = node.child_by_field_name("condition").text.decode().strip()
        alt = node.child_by_field_name("alternative")
        skip = {"condition", "name"}
        body = [c for c in node.children if c.is_named and c != alt
                and not any(node.child_by_field_name(f) == c for f in skip)]
        out.append((cond, body))
        node = alt
    return out

def _rocm_value(cond: str | None) -> bool | None:
    """The value of a condition on a CUDA build when it only tests ROCm macros; else None."""
    if cond is None:
        return True
    c = " ".join(cond.replace("(", " ( ").replace(")", " ) ").split())
    for m in ROCM_MACROS:
        for form in (f"defined ( {m} )", f"defined {m}", m):
            if c == form:
                return False
            if c == f"! {form}" or c == f"!{form}":
                return True
    return None

def _collect_conditional(node, src, scopes, units, dead):
    prior: list[str] = []
    prior_known_false = True  # every earlier branch is known to be off on CUDA
    dead_rest = False  # a live branch was taken: the rest are dead
    for cond, body in _branches(node):
        value = _rocm_value(cond)
        if prior_known_false and value is True:
            _collect_list(body, src, scopes, units, dead)  # the live branch: condition is moot
            prior_known_false, value = False, None
            dead_rest = True
            continue
        if dead_rest:
            for c in body:
                dead.append((c.start_byte, c.end_byte, "rocm_only"))
            continue
        if prior_known_false and value is False:
            for c in body:
                dead.append((c.start_byte, c.end_byte, "rocm_only"))
            prior.append(cond)
            continue
        parts = [f"!({p})" for p in prior] + ([f"({cond})"] if cond else [])
        opener = "#if " + " && ".join(parts) if parts else "#if 1"
        _collect_list(body, src, scopes + ((opener, "#endif"),), units, dead)
        if cond is None:
            return
        prior.append(cond)
        prior_known_false = False

def _unit(node, src, scopes) -> Unit:
    text = src[node.start_byte:node.end_byte].decode("utf-8", "replace")
    defines: set[str] = set()
    kernels: list[str] = []
    if node.type in ("preproc_def", "preproc_function_def"):
        defines.add(node.child_by_field_name("name").text.decode())
        uses = set(WORD.findall(text)) - defines
    else:
        uses = set()
        for n in _captures(node):
            text = n.text.decode("utf-8", "replace")
            uses |= set(WORD.findall(text)) if n.type == "preproc_arg" else {text}
        # blanked attribute macros are still needs of this unit
        uses |= {m.group(1).decode() for m in ATTRIBUTE_WORDS.finditer(src, node.start_byte, node.end_byte)}
        for m in ATTRIBUTE_CALLS.finditer(src, node.start_byte, node.end_byte):
            end = _balanced(src, m.end() - 1) or m.end()
            uses |= set(WORD.findall(src[m.start():end].decode("utf-8", "replace")))
        if node.type != "template_instantiation":
            defines |= _defined_names(node)
        if _is_global(node) and defines:
            kernels = sorted(defines)[:1]
    uses |= {w for opener, _ in scopes if opener.startswith("#") for w in WORD.findall(opener)}  # macros in #if
    inner = [c for c in node.named_children if c.type != "template_parameter_list"] \
        if node.type == "template_declaration" else [node]
    function = any(c.type == "function_definition" for c in inner)
    return Unit(node.start_byte, node.end_byte, scopes, defines, uses - defines, kernels,
                node.start_point[0] + 1, node.end_point[0] + 1, function=function)

def _defined_names(node) -> set[str]:
    t = node.type
    if t == "template_declaration":
        inner = [c for c in node.named_children if c.type != "template_parameter_list"]
        return set().union(*(_defined_names(c) for c in inner)) if inner else set()
    if t == "function_definition":
        name = _declarator_name(node.child_by_field_name("declarator"))
        return {name} if name else set()
    if t in ("struct_specifier", "class_specifier", "enum_specifier", "union_specifier"):
        n = node.child_by_field_name("name")
        names = {n.text.decode().split("::")[-1].split("<")[0]} if n else set()
        if t == "enum_specifier":
            names |= {e.child_by_field_name("name").text.decode() for e in _walk(node) if e.type == "enumerator"}
        return names
    if t in ("declaration", "type_definition"):
        names = set()
        for c in node.named_children:
            if c.type in ("struct_specifier", "class_specifier", "enum_specifier", "union_specifier"):
                names |= _defined_names(c)
        for d in node.children_by_field_name("declarator"):
            n = _declarator_name(d)
            if n:
                names.add(n)
        return names
    if t in ("alias_declaration", "namespace_alias_definition"):
        n = node.child_by_field_name("name") or next(
            (c for c in node.named_children if c.type in ("namespace_identifier", "identifier")), None)
        return {n.text.decode()} if n else set()
    if t == "using_declaration" and not _is_using_namespace(node):  # `using std::min;` names `min`
        last = node.named_children[-1] if node.named_children else None
        return {last.text.decode().split("::")[-1]} if last is not None else set()
    return set()

def _is_using_namespace(node) -> bool:
    return node.type == "using_declaration" and any(c.type == "namespace" for c in node.children)

def _declarator_name(d) -> str | None:
    while d is not None:
        if d.type in ("identifier", "field_identifier", "type_identifier", "operator_name", "destructor_name"):
            return d.text.decode()
        if d.type in ("qualified_identifier", "template_function"):
            n = d.child_by_field_name("name")
            if n is None:
                return None
            d = n
            continue
        nxt = d.child_by_field_name("declarator")
        if nxt is None:
            for c in d.named_children:
                if c.type in ("identifier", "field_identifier", "qualified_identifier", "template_function"):
                    nxt = c
                    break
        d = nxt
    return None

def _is_global(node) -> bool:
    fn = node
    if node.type == "template_declaration":
        fns = [c for c in node.named_children if c.type == "function_definition"]
        if not fns:
            return False
        fn = fns[0]
    if fn.type != "function_definition":
        return False
    body = fn.child_by_field_name("body")
    head = fn.text[: body.start_byte - fn.start_byte] if body else fn.text
    return b"__global__" in head

def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))

def safe_rel(path: str) -> str | None:
    """`path` normalised as a path inside a tree, or None when it is absolute or escapes the tree."""
    if not path or path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", path) or "\0" in path:
        return None
    parts: list[str] = []
    for p in path.replace("\\", "/").split("/"):
        if p in ("", "."):
            continue
        if p == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(p)
    return "/".join(parts) or "."

def prune_headers(headers: dict[str, str], used: str) -> dict[str, str]:
    """`headers` with each function definition that `used` (a closure's text) never reaches blanked.

    Types, macros and declarations stay; a function stays when it is named by `used`, by a kept
    type or declaration, or by a function or macro that stays. Blanked text keeps its newlines,
    so a compiler's line numbers still point into the original header. Why: a header's unrelated
    host code (llm.c's `cudaMemAdvise` with an `int` device, which CUDA 13 changed) must not fail
    a kernel that never calls it."""
    units, owner, reached = _header_reach(headers, used)
    texts = {rel: text.encode() for rel, text in headers.items()}
    cut: dict[str, bytearray] = {}
    for i, u in enumerate(units):
        if u.function and i not in reached and u.defines and not any(d.startswith("operator") for d in u.defines):
            _blank(cut.setdefault(owner[i], bytearray(texts[owner[i]])), u.start, u.end)
    return {rel: (bytes(cut[rel]).decode("utf-8", "replace") if rel in cut else text)
            for rel, text in headers.items()}

def _header_reach(headers: dict[str, str], used: str) -> tuple[list[Unit], list[str], set[int]]:
    """The headers' units, the header of each, and the indices of those `used` reaches by name
    (through the uses of every type and declaration, which are always kept, and of what it reaches)."""
    units: list[Unit] = []
    owner: list[str] = []  # the header of each unit
    for rel, text in headers.items():
        data = text.encode()
        start = len(units)
        _collect(cuda_parser().parse(mask_attributes(data)).root_node, data, (), units, [], top=True)
        for u in units[start:]:
            u.origin = data
        owner += [rel] * (len(units) - start)
    by_name: dict[str, list[int]] = {}
    for i, u in enumerate(units):
        for name in u.defines:
            by_name.setdefault(name, []).append(i)
    macro = {i for i, u in enumerate(units) if DEFINE_LINE.match(_text(u.origin, u))}
    seeds = set(WORD.findall(used))
    for i, u in enumerate(units):
        if not u.function and i not in macro:
            seeds |= u.uses
    reached = {j for name in seeds for j in by_name.get(name, ())}
    todo = list(reached)
    while todo:
        for name in units[todo.pop()].uses:
            for j in by_name.get(name, ()):
                if j not in reached:
                    reached.add(j)
                    todo.append(j)
    return units, owner, reached

def unused_at(headers: dict[str, str], used: str, rel: str, line: int) -> str:
    """The names defined by the unit at `line` of header `rel` when `used` never reaches it, else ''."""
    units, owner, reached = _header_reach(headers, used)
    for i, u in enumerate(units):
        if owner[i] == rel and u.line_start <= line <= u.line_end and u.defines:
            return "" if i in reached else ", ".join(sorted(u.defines))
    return ""
