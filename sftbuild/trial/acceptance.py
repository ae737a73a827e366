"""The file's own acceptance test for an array its main() validates, where it can be read.

llm.c's main() checks each result with `validate_result(d_x, x, "x", n, tol)`, `tol` a literal or
a local it sets (`float tol = sizeof(floatX) == 4 ? 1e-3f : 1e-1f;`, possibly under
`#if defined(ENABLE_BF16)`), and common.h's validate_result accepts an element when
`fabs(ref[i] - out[i]) <= tolerance + fabs(ref[i]) * epsilon`, epsilon chosen under
`#ifdef ENABLE_BF16`. `rules(ref, texts)` reads both sides (main()'s part from harvest's
`acceptance_text`, the function from the file and its headers, branches resolved by the file's
own defines as `element_types` does) into one rule per validated array:

    {"function": name, "atol": C expression, "rtol": float, "source": where atol came from}

an allowance of `atol + |ref| * rtol` per element. `atol` may name `ELEM`, the element size of the
array as the harness measures it (what `sizeof(T)` of the launcher's element type is in the
build), and is read by `atol_value`. Only that form is recognised; anything else (a condition
over a run-time value, a name set twice, another shape of test) gives no rule, and the trials
keep their default tolerance.
"""
from __future__ import annotations

import re

from sftbuild.trial.element_types import active_lines, defines, dtype_of
from sftbuild.parsing import ASSIGN, VALIDATE_CALL, blank_comments, evaluate, split_args

SIZES = {"float": 4, "double": 8, "half": 2, "__half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "int": 4}
EPSILONS = {"FLT_EPSILON": 1.1920928955078125e-07, "DBL_EPSILON": 2.220446049250313e-16}
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fFlL]?"
ABS = r"(?:std::)?(?:fabsf?|abs)"
UNKNOWN = "@"  # stands for a size or type test that cannot be read


def rules(ref: dict, texts: list[str], slots: list[dict]) -> dict[str, dict]:
    """{CPU argument name: rule} for the arrays main() validates in a way read here."""
    text = ref.get("acceptance_text") or ""
    if not text:
        return {}
    defined = defines(texts)
    lines = active_lines(text, defined)
    calls: dict[str, list] = {}
    for line in lines:
        for m in VALIDATE_CALL.finditer(line):
            args = split_args(line, m.end(), "([{", ")]}")
            if args and len(args) >= 2:
                calls.setdefault(args[1], []).append((m.group(1), args))
    functions: dict[str, dict | None] = {}
    out = {}
    for i in ref.get("compare") or []:
        arr = ref["call_args"][i]
        found = calls.get(arr) or []
        if not found:
            continue
        name = found[0][0]
        if name not in functions:
            functions[name] = function_rule(name, texts, defined)
        test = functions[name]
        if test is None or test["ref_index"] != 1:
            continue  # main() passes the CPU array second (main_reader.validated): it must be the reference
        atols = {_atol_text(test, args) for _, args in found}
        if len({f for f, _ in found}) != 1 or len(atols) != 1 or None in atols:
            continue  # validated twice in different ways: no one rule
        tol = atols.pop()
        given = _resolved(tol, lines)
        expr = given and _sizes(given, _element_type(ref, slots, i), texts)
        if expr is None or any(atol_value({"atol": expr}, e) is None for e in (2, 4, 8)):
            continue
        out[arr] = {"function": name, "atol": expr, "rtol": test["rtol"],
                    "source": f"{tol} = {given}" if given != tol else tol}
    return out


def atol_value(rule: dict, elem_bytes: int) -> float | None:
    """The rule's absolute allowance for arrays of `elem_bytes`-byte elements; None when unreadable."""
    try:
        v = c_value(rule["atol"], {"ELEM": elem_bytes})
    except ValueError:
        return None
    return float(v) if v >= 0 else None


def describe(rule: dict, elem_bytes: int) -> str:
    """The rule as a verdict names it: `validate_result: 0.5 + |ref| * 0.079 (tol = ...)`."""
    return (f"{rule['function']}: {atol_value(rule, elem_bytes):g} + |ref| * {rule['rtol']:g} "
            f"({rule['source']})")


def function_rule(name: str, texts: list[str], defined: set[str]) -> dict | None:
    """How function `name` accepts an element, read from its definition's active lines:
    {ref_index, atol_index (a parameter) | atol (a literal), default (of that parameter), rtol};
    None unless its one comparison is `fabs(ref[i] - out[i]) > atol + fabs(ref[i]) * rtol`."""
    for text in texts:
        code = blank_comments("\n".join(active_lines(text, defined)))
        for m in re.finditer(rf"\b{re.escape(name)}\s*\(", code):
            before = re.search(r"(\w+|[>*&])\s*$", code[:m.start()])
            if not before or before.group(1) in ("if", "while", "for", "switch", "return", "else", "do"):
                continue  # a call, not the definition (which follows its return type)
            params = split_args(code, m.end(), "(", ")")
            end = _closing(code, m.end() - 1)
            if params is None or end is None or not code[end:].lstrip().startswith("{"):
                continue
            start = code.index("{", end)
            close = _closing(code, start, "{", "}")
            return _read_test(params, code[start + 1:close - 1] if close else "")
    return None


def _read_test(params: list[str], body: str) -> dict | None:
    """`function_rule`'s reading of one definition (its parameter declarations and body)."""
    names, defaults = [], []
    for p in params:
        decl, _, default = p.partition("=")
        w = re.findall(r"\w+", decl)
        names.append(w[-1] if w else "")
        defaults.append(default.strip() or None)
    # the one test that fails an element: `if (fabs(a[i] - b[i]) > bound)`
    tests = re.findall(rf"\bif\s*\(\s*{ABS}\s*\(([^;]*?)\)\s*>(?!=)\s*([^;{{]+?)\)\s*(?:\{{|\w)", body)
    if len(tests) != 1:
        return None
    inner, bound = tests[0][0], " ".join(tests[0][1].split())
    sides = [s.strip() for s in _top_split(inner, "-")]
    if len(sides) != 2:
        return None
    refs = [re.fullmatch(r"(?:\(\s*\w+\s*\))?\s*(\w+)\s*\[\s*\w+\s*\]", s) for s in sides]
    if not all(refs):
        return None  # not the difference of two arrays' elements
    ref_names = [r.group(1) for r in refs if r.group(1) in names]
    expr = _local(bound, body) if re.fullmatch(r"\w+", bound) and bound not in names else bound
    if expr is None:
        return None
    atol, rtol = None, None
    for term in _top_split(expr, "+"):
        term = term.strip()
        scaled = re.fullmatch(rf"{ABS}\s*\(\s*(\w+)\s*\[\s*\w+\s*\]\s*\)\s*\*\s*({NUMBER}|\w+)|"
                              rf"({NUMBER}|\w+)\s*\*\s*{ABS}\s*\(\s*(\w+)\s*\[\s*\w+\s*\]\s*\)", term)
        if scaled:
            arr, eps = (scaled.group(1), scaled.group(2)) if scaled.group(1) else (scaled.group(4), scaled.group(3))
            if rtol is not None or arr not in ref_names:
                return None
            ref_index, rtol = names.index(arr), _constant(eps, body)
            if rtol is None:
                return None
        elif term in names and atol is None:
            atol = term
        elif re.fullmatch(NUMBER, term) and atol is None:
            atol = term
        else:
            return None
    if rtol is None or atol is None:
        return None
    if atol in names and re.search(rf"\b{atol}\s*{ASSIGN}", body):
        return None  # the function changes the allowance it was given
    if atol in names:
        return {"ref_index": ref_index, "atol_index": names.index(atol), "default": defaults[names.index(atol)],
                "rtol": rtol}
    return {"ref_index": ref_index, "atol": atol, "rtol": rtol}


def _atol_text(test: dict, args: list[str]) -> str | None:
    """The allowance's text for one call: the argument it passes, else the parameter's default."""
    if "atol" in test:
        return test["atol"]
    j = test["atol_index"]
    return args[j] if j < len(args) else test["default"]


def _local(name: str, body: str) -> str | None:
    """The one value a function's local `name` is given (`float t_eff = ...;`); None if set again."""
    if len(re.findall(rf"\b{re.escape(name)}\s*{ASSIGN}", body)) != 1:
        return None
    m = re.search(rf"\b(?:const\s+)?(?:float|double|auto)\s+{re.escape(name)}\s*=\s*([^;]+);", body)
    return " ".join(m.group(1).split()) if m else None


def _constant(name: str, body: str) -> float | None:
    """A non-negative number: a literal, FLT_EPSILON/DBL_EPSILON, or a local set once to one."""
    if name in EPSILONS:
        return EPSILONS[name]
    value = name if re.fullmatch(NUMBER, name) else _local(name, body)
    if value in EPSILONS:
        return EPSILONS[value]
    if value is None or not re.fullmatch(NUMBER, value) or float(value.rstrip("fFlL")) < 0:
        return None
    return float(value.rstrip("fFlL"))


def _resolved(tol: str, lines: list[str]) -> str | None:
    """main()'s value for a call's allowance: a name main() sets once (its active lines), else the text."""
    if not re.fullmatch(r"[A-Za-z_]\w*", tol):
        return tol
    return _local(tol, "\n".join(lines))


def _element_type(ref: dict, slots: list[dict], i: int) -> str:
    """The launcher's element type for the CPU call's i-th argument (a pointer)."""
    k = sum(1 for c in ref["cpu_params"][:i] if c["ptr"])
    for s in slots:
        if s["kind"] == "ptr" and s["slot"] == k:
            return re.sub(r"\bconst\b|\*|&", " ", s.get("ltype") or "").strip()
    return ""


def _sizes(expr: str, elem: str, texts: list[str]) -> str | None:
    """`expr` with `sizeof(T)` as ELEM (T the array's element type) or a number (T a builtin type),
    and `std::is_same_v<T, B>` as 1 or 0 by the types the file builds; None where one is unknown
    (a type other than the array's: main()'s test for a build the launcher does not have)."""
    def size(m):
        t = " ".join(m.group(1).split())
        return "ELEM" if t == elem else str(SIZES[t]) if t in SIZES else UNKNOWN

    def same(m):
        pair = [x.strip() for x in ((m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4)))]
        a, b = (dtype_of(x, texts) for x in pair)
        return UNKNOWN if elem not in pair or a is None or b is None else str(int(a == b))

    expr = re.sub(r"\bsizeof\s*\(\s*([\w\s]+?)\s*\)", size, expr)
    expr = re.sub(r"\bstd::is_same(?:_v\s*<([^,<>]+),([^<>]+)>|\s*<([^,<>]+),([^<>]+)>\s*::\s*value)",
                  same, expr)
    return None if UNKNOWN in expr else expr


def c_value(expr: str, env: dict) -> float:
    """A C expression with `?:` and comparisons over `env` (`parsing.evaluate` otherwise)."""
    e = _unwrap(expr.strip())
    q = _top_index(e, "?")
    if q is not None:
        colon = _matching_colon(e, q)
        if colon is None:
            raise ValueError(f"cannot read {expr!r}")
        return c_value(e[q + 1:colon], env) if _truth(e[:q], env) else c_value(e[colon + 1:], env)
    return evaluate(e, env)


def _truth(cond: str, env: dict) -> bool:
    c = _unwrap(cond.strip())
    m = None
    for op in ("==", "!=", "<=", ">=", "<", ">"):
        j = _top_index(c, op)
        if j is not None:
            m = (op, c[:j], c[j + len(op):])
            break
    if m is None:
        return c_value(c, env) != 0
    op, a, b = m[0], c_value(m[1], env), c_value(m[2], env)
    return {"==": a == b, "!=": a != b, "<=": a <= b, ">=": a >= b, "<": a < b, ">": a > b}[op]


def _unwrap(e: str) -> str:
    while e.startswith("(") and _closing(e, 0) == len(e):
        e = e[1:-1].strip()
    return e


def _closing(text: str, start: int, open_: str = "(", close: str = ")") -> int | None:
    """The index just past the bracket matching the one at `start`."""
    depth = 0
    for j in range(start, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def _top_index(e: str, token: str) -> int | None:
    depth = 0
    for j, ch in enumerate(e):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and e.startswith(token, j):
            if token in "<>" and (e[j + 1:j + 2] in "=<>" or e[j - 1:j] in "<>"):
                continue  # part of <=, >=, << or >>
            return j
    return None


def _matching_colon(e: str, q: int) -> int | None:
    depth, nested = 0, 0
    for j in range(q + 1, len(e)):
        ch = e[j]
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and ch == "?":
            nested += 1
        elif depth == 0 and ch == ":" and e[j - 1:j + 1] != "::" and e[j:j + 2] != "::":
            if nested == 0:
                return j
            nested -= 1
    return None


def _top_split(e: str, sep: str) -> list[str]:
    """`e` split at `sep` outside brackets (a leading sign stays with its term)."""
    parts, depth, start = [], 0, 0
    for j, ch in enumerate(e):
        depth += ch in "([{"
        depth -= ch in ")]}"
        term = e[start:j].strip()
        if depth == 0 and ch == sep and term and not re.search(r"(?<![\w.])\d+\.?\d*[eE]$", term):
            parts.append(e[start:j])
            start = j + 1
    parts.append(e[start:])
    return parts
