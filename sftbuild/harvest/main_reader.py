"""What a CUDA file's `main()` sets up before it calls a launcher, read from its text (llm.c style
test programs): the sizes and host arrays it makes and how it fills them, the device buffers it
allocates (its own `d_` arrays and file-scope pointers), the block sizes it tries, and how a
launcher's parameters are fed from the file's CPU reference call.

Pure text functions over `main()`'s source; sftbuild.harvest.cuda_extract finds `main()`, the
launchers and the CPU functions with tree-sitter and uses these to fill a file reference.
"""
from __future__ import annotations

import re

from sftbuild.parsing import ASSIGN, FLOAT_WORDS, VALIDATE_CALL, split_args

GENERATORS = {  # host generators whose value ranges the trials reproduce
    "make_random_float": ("uniform", -1.0, 1.0), "make_random_float_01": ("uniform", 0.0, 1.0),
    "make_zeros_float": ("zeros",), "make_ones_float": ("ones",), "make_random_int": ("int",),
}


def steps_code(name: str, params: list[dict], steps: list | None) -> str:
    """The CPU reference made of main()'s consecutive CPU calls (`_references`), as C: one function
    taking main()'s arrays and sizes that makes the calls as main() writes them."""
    if not steps:
        return ""
    decl = ", ".join(f"{'const ' if q['const'] else ''}{q['type']}{'*' if q['ptr'] else ''} {q['name']}"
                     for q in params)
    body = "".join(f"    {f}({', '.join(args)});\n" for f, args in steps)
    return f"\nvoid {name}({decl}) {{\n{body}}}\n"


def map_params(cpu: list[dict], launcher: list[dict], cpu_args: list[str], main: str, argument=None):
    """How each launcher parameter is fed: ({"cpu": i} | {"scratch": size} | {"expr": size}) per leading
    parameter, and the trailing block-size names; None when the launcher does not fit the CPU call.

    The launcher repeats the CPU signature (by position, or by parameter name for a launcher that
    takes a subset), then trailing block-size ints. A pointer the CPU function does not take is
    device-only scratch, sized by main()'s cudaMalloc of it (an array main() also keeps on the host is
    not); a size it does not take is what main() passes for it ({"expr": C expression over main()'s
    sizes}, from `argument(name)`). Pointers pair with pointers (the
    launcher's constness says what is an input), integer buffers with the same type, scalars with
    scalars of their kind."""
    n = len(launcher)
    while n and launcher[n - 1]["kind"] == "int" and "block" in launcher[n - 1]["name"].lower():
        n -= 1
    head, trailing = launcher[:n], [p["name"] for p in launcher[n:]]
    if len(trailing) > 1:
        return None
    by_name = {c["name"]: i for i, c in enumerate(cpu)}
    positional = len(head) == len(cpu) and all(c["kind"] == g["kind"] for c, g in zip(cpu, head))
    out = []
    for j, g in enumerate(head):
        i = j if positional else by_name.get(g["name"])
        if i is None and not g["ptr"]:  # a size the CPU call does not take: what main() passes for it
            expr = argument(g["name"]) if argument else None
            if expr is None:
                return None
            out.append({"expr": expr})
            continue
        if i is None:
            size = device_size(main, g["name"])
            if size is None or allocation(main, g["name"]) is not None:
                return None  # not allocated, or data main() keeps on the host too: not device-only scratch
            out.append({"scratch": size})
            continue
        c = cpu[i]
        if c["kind"] != g["kind"] or cpu_args[i] in ("NULL", "nullptr", "0"):
            return None
        if c["ptr"] and c["type"] not in ("float", "double") and c["type"] != g["type"] and not g.get("template"):
            return None  # integer buffers pass through unconverted: same type only
        out.append({"cpu": i})
    if not any("cpu" in m and g["ptr"] and not g["const"] for m, g in zip(out, head)):
        return None  # nothing the launcher writes can be compared
    return out, trailing


def device_size(main: str, name: str, prefixed: bool = True) -> str | None:
    """The element count of main()'s `cudaMalloc(&d_NAME, count * sizeof(T))` (with or without a
    check macro around it; `prefixed`: `d_NAME` counts too), or None."""
    prefix = "(?:d_)?" if prefixed else ""
    m = re.search(r"cudaMalloc\s*\(\s*(?:\(void\s*\*\*\)\s*)?&\s*" + prefix + re.escape(name) + r"\s*,", main)
    args = split_args(main, m.start() + main[m.start():].index("(") + 1, "([{", ")]}") if m else None
    if not args or len(args) != 2:
        return None
    return elements(args[1])


def elements(size: str) -> str | None:
    """A byte count `n * sizeof(T)` as the element count `n`: a leading or trailing sizeof goes, one
    inside the product (`n * sizeof(float) * 32`) counts as 1."""
    size = re.sub(r"^\s*sizeof\s*\([^)]*\)\s*\*|\*\s*sizeof\s*\([^)]*\)\s*$", " ", size.strip()).strip()
    size = re.sub(r"\bsizeof\s*\([^)]*\)", "1", size).strip()
    return size or None


# a pointer declared at file scope (at the start of a line, outside any function): `float* buf;`
FILE_SCOPE_POINTER = re.compile(r"(?m)^(?:static\s+)?((?:unsigned\s+)?[A-Za-z_][\w:]*)\s*\*\s*(\w+)\s*"
                                r"(?:=\s*(?:NULL|nullptr|0)\s*)?;")


def device_buffers(code: str, main: str) -> list[dict]:
    """Device buffers the code keeps in file-scope pointers that main() allocates before calling the
    launcher (llm.c's `float* dbias_buffer;`, `cudaMalloc(&dbias_buffer, OC * sizeof(float) * 32)`):
    [{name, type, size (element count, a C expression over main()'s scalars), zeroed (main() memsets
    it)}]. The harness points them at buffers of that size, as main() would have."""
    out = []
    for m in FILE_SCOPE_POINTER.finditer(code):
        ctype, name = m.group(1), m.group(2)
        if ctype in ("return", "typedef", "extern", "const") or any(b["name"] == name for b in out):
            continue
        size = device_size(main, name, prefixed=False)
        if size:
            out.append({"name": name, "type": ctype, "size": size, "zeroed": zeroed(main, [name])[0]})
    return out


def zeroed(main: str, names: list[str]) -> list[bool]:
    """Per device buffer name: whether main() clears it with cudaMemset (so each launcher call starts
    from zeros, not from what the previous call left)."""
    return [bool(re.search(r"cudaMemset\s*\(\s*(?:d_)?" + re.escape(n) + r"\s*,\s*0\s*,", main)) for n in names]


def validated(main: str, args: list[str]) -> list[str]:
    """The host arrays main() checks the GPU result against (llm.c's `validate_result(d_x, x, ...)`)."""
    names = []
    for m in re.finditer(r"\bvalidate_\w*\s*\(\s*\w+\s*,\s*(\w+)\s*,", main):
        if m.group(1) in args and m.group(1) not in names:
            names.append(m.group(1))
    return names


def call_args(text: str, name: str) -> list[str] | None:
    m = re.search(r"(?<![\w.])" + re.escape(name) + r"\s*\(", text)
    return split_args(text, m.end(), "([{", ")]}") if m else None


def allocation(main: str, var: str) -> dict | None:
    """How main() fills the host array `var`: {gen, size (C expression), lo/hi/high}, or None."""
    m = re.search(r"\b" + re.escape(var) + r"\s*=\s*([^;]+);", main)
    if not m:
        return None
    rhs = m.group(1).strip()
    call = re.match(r"(\w+)\s*\((.*)\)\s*$", rhs, re.S)
    if call and call.group(1) in GENERATORS:
        args = call_args(rhs, call.group(1)) or []
        g = GENERATORS[call.group(1)]
        out = {"gen": g[0], "size": args[0] if args else ""}
        if g[0] == "uniform":
            out.update(lo=g[1], hi=g[2])
        if g[0] == "int":
            if len(args) < 2:
                return None
            out["high"] = args[1]
        return out
    m = re.match(r"(?:\([^()]*\*\s*\))?\s*(malloc|calloc)\s*\((.*)\)\s*$", rhs, re.S)
    if m:
        args = call_args(rhs, m.group(1)) or []
        size = " * ".join(args) if m.group(1) == "calloc" else (args[0] if args else "")
        size = re.sub(r"\*?\s*sizeof\s*\([^)]*\)\s*\*?", " ", size).strip().strip("*").strip()
        return {"gen": "zeros" if m.group(1) == "calloc" else "empty", "size": size}
    return None


def main_values(main: str) -> tuple[list[list[str]], list[int]]:
    """main()'s scalar definitions [(name, C expression)] in order, and its block sizes."""
    decls = []
    for m in re.finditer(r"(?m)^\s*(?:const\s+)?(?:unsigned\s+)?(int|long|size_t|int64_t|float|double)\s+"
                         r"(\w+)\s*=\s*([^;{}]+);", main):
        decls.append([m.group(2), " ".join(m.group(3).split()), "float" if m.group(1) in FLOAT_WORDS else "int"])
    return decls, block_values(main)


def block_values(main: str, trailing: list[str] | tuple = ()) -> list[int]:
    """The block sizes main() tries, from its array of them: the one named after the launcher's
    trailing parameter (`sqrt_block_size` -> `sqrt_block_sizes[]`), else `block_sizes[]`, else
    another `*block_sizes[]`; [] when main() has none."""
    arrays = {m.group(1): m.group(2) for m in
              re.finditer(r"\b(\w*block_sizes)\s*\[\s*\w*\s*\]\s*=\s*\{([^}]*)\}", main)}
    for name in [f"{t}s" for t in trailing] + ["block_sizes", *sorted(arrays)]:
        if name in arrays:
            return [int(x) for x in re.findall(r"\d+", arrays[name])]
    return []


def acceptance_text(main: str, arrays: list[str]) -> str:
    """The part of main() that states how it accepts the host arrays `arrays` (llm.c's
    `validate_result(d_x, x, "x", n, tol)`): its calls of a `validate_*` function on them, the
    lines that set a name such a call passes (`float tol = sizeof(floatX) == 4 ? 1e-3f : 1e-1f;`),
    and main()'s preprocessor directives, so the branches the file's own defines select can be
    resolved where the headers are known (sftbuild.trial.acceptance). "" when main()
    validates none of them."""
    calls = []
    for m in VALIDATE_CALL.finditer(main):
        args = split_args(main, m.end(), "([{", ")]}")
        if args and len(args) >= 2 and args[1] in arrays:
            calls.append(args)
    if not calls:
        return ""
    names = {a for args in calls for a in args[2:] if re.fullmatch(r"[A-Za-z_]\w*", a)}
    keep = []
    for line in main.splitlines():
        s = line.strip()
        if s.startswith("#") or VALIDATE_CALL.search(s) or any(
                re.search(rf"\b{re.escape(n)}\s*{ASSIGN}", s) for n in names):
            keep.append(s)
    return "\n".join(keep)
