"""Extract `__global__` kernels from CUDA C++ with tree-sitter-cuda.

For each kernel we keep the closure of what it needs from its own file: the
file's includes, then every top-level unit (function, template, struct, alias,
constant, macro) that the kernel reaches by name, emitted in file order inside
the namespaces and preprocessor conditions it was declared in. A `#define` written
before an #include stays among the includes where the file has it, and is kept
whenever the file's own headers test it (a configuration macro such as llm.c's
`ENABLE_BF16`, which selects common.h's `floatX`). Text is copied byte for byte;
nothing is reformatted.

Two things confuse the grammar and are handled before parsing:
  * attribute macros written before a declaration (`C10_LAUNCH_BOUNDS_1(n)`,
    `C10_HOST_DEVICE`, ...) make tree-sitter read the macro as the declarator,
    so the kernel gets the macro's name or is not seen at all. We parse a copy
    in which those macro invocations are blanked with spaces of the same
    length, so byte offsets and line numbers still match the original.
  * `#ifdef USE_ROCM` branches: we target CUDA, so a branch that is dead
    without USE_ROCM is dropped (its kernels listed as `rocm_only`) and a live
    one is read as if the condition were not there. Other conditions become
    scopes: the unit is emitted inside the same `#if`.
"""
from __future__ import annotations

import dataclasses
import functools
import re


from sftbuild.harvest.main_reader import (acceptance_text, allocation, block_values, call_args, device_buffers,
                                          main_values, map_params, steps_code, validated, zeroed)
from sftbuild import parsing
from sftbuild.parsing import blank_comments, cuda_parser, param_info, split_args
from sftbuild.cuda_units import (DEFINE_LINE, STRING_TYPES, WORD, Unit, _balanced, _collect, _text,  # noqa: F401
                                 mask_attributes, prune_headers, safe_rel)  # (prune_headers, safe_rel: re-exported)

LAUNCH_BOUNDS = re.compile(r"\b(__launch_bounds__|\w*LAUNCH_BOUNDS\w*)\s*\(")


@dataclasses.dataclass
class Kernel:
    name: str
    code: str  # the closure, compilable given the include paths
    lines: tuple[int, int]  # 1-based span of the kernel in the file
    includes: list[str]
    needs: list[str]  # identifiers used but defined outside this file
    launch_bounds: str | None
    template: bool
    params: list[str]  # parameter declarations, as written
    launch_sites: list[dict]  # {"function", "lines", "macro"?, "template_args"?} in the same file
    instantiations: list[str] = dataclasses.field(default_factory=list)
    # the file's CPU reference and the host launcher the code then includes (see `file_reference`)
    file_reference: dict | None = None
    # the host function that launches this kernel and no other: {name, params, code} (see `_launcher`)
    launcher: dict | None = None


def extract_kernels(src: bytes, prelude: bytes = b"", tested: frozenset[str] = frozenset()
                    ) -> tuple[list[Kernel], list[dict]]:
    """Return the kernels in `src`, and every other `__global__` token with a reason.

    `prelude` is the text of the file that includes `src` up to its #include line,
    for headers that are not self-contained (they use what the includer set up).
    `tested`: macro names the file's own headers test (`macros_tested`); a file-scope `#define`
    of one, written before an #include, configures what that include declares (llm.c's
    `#define ENABLE_BF16` before `#include "common.h"` makes `floatX` bf16), so every closure
    keeps it. Defines written before an #include are emitted among the includes, in file order
    (`_head`), so the includes see them as the file's own build does.
    """
    units: list[Unit] = []
    dead: list[tuple[int, int, str]] = []
    if prelude:
        _collect(cuda_parser().parse(mask_attributes(prelude)).root_node, prelude, (), units, [], top=True)
        for u in units:
            u.kernels, u.origin = [], prelude
    first = len(units)
    masked = mask_attributes(src)
    tree = cuda_parser().parse(masked)
    _collect(tree.root_node, src, (), units, dead, top=True)
    for u in units[first:]:
        u.origin = src
    by_name: dict[str, list[int]] = {}
    for i, u in enumerate(units):
        for name in u.defines:
            by_name.setdefault(name, []).append(i)
    include_units = [u for u in units if u.include]
    includes = list(dict.fromkeys(_text(src, u).strip() for u in include_units))
    early = _early_defines(units, src)
    config = set().union(*(_closure(j, units, by_name) for j in early if units[j].defines & tested))

    kernels = []
    for i, u in enumerate(units):
        for kname in u.kernels:
            sites = _launch_sites(tree.root_node, units, src, kname, exclude=i)
            found = file_reference(units, src, i, kname, sites, by_name)
            ref, need = found if found else (None, _closure(i, units, by_name))
            # an explicit specialization (`template <> __global__ void k<float>(...)`) needs the
            # primary template's declaration, which shares its name (so is no use of it)
            for j in by_name.get(kname, ()):
                if j != i and not units[j].kernels and not units[j].function and j not in need:
                    need |= _closure(j, units, by_name)
            code = _emit(src, _head(units, need | config, early))
            text = _text(src, u)
            launcher = None if ref else _launcher(units, src, sites, need | config | early, by_name, kname,
                                                  _params(text.split("{", 1)[0], kname))
            if not ref and launcher is None:  # none in the repository: one of ours, where the kernel is flat
                launcher = generated_launcher(kname, _params(text.split("{", 1)[0], kname), text)
            if launcher and launcher.get("launches"):  # one record for the kernels one launcher runs together
                need |= siblings(units, by_name, launcher["launches"])
                code = _emit(src, _head(units, need | config, early))
            if launcher and any("Tensor" in p for p in launcher["params"]):  # an extension function
                launcher["exposed"] = exposed_by(src.decode("utf-8", "replace"), launcher["name"])
            head = text.split("{", 1)[0]
            defined = set().union(*(units[j].defines for j in need))
            kernels.append(Kernel(
                name=kname, code=code, lines=(u.line_start, u.line_end), includes=includes,
                needs=sorted(_external(units, need, defined)),
                launch_bounds=_launch_bounds(head),
                template=text.lstrip().startswith("template"),
                params=_params(head, kname),
                launch_sites=sites,
                instantiations=_instantiations(units, src, kname),
                file_reference=ref,
                launcher=launcher,
            ))
    return kernels, _unaccounted(tree.root_node, src, kernels, dead)


CONDITION_LINE = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|elifdef|elifndef)\b([^\n]*)", re.M)


def macros_tested(texts) -> set[str]:
    """Names the preprocessor conditions of `texts` test (`#if`, `#ifdef`, `#elif`, `defined(X)`)."""
    out: set[str] = set()
    for text in texts:
        for m in CONDITION_LINE.finditer(text):
            out |= set(WORD.findall(m.group(1).split("//", 1)[0]))
    return out - {"defined"}


def _early_defines(units: list[Unit], src: bytes) -> set[int]:
    """The file's own `#define`s written before its last #include (indices into `units`)."""
    last = max((u.start for u in units if u.include and u.origin is src), default=-1)
    return {j for j, u in enumerate(units) if u.origin is src and not u.include and u.start < last
            and u.defines and DEFINE_LINE.match(_text(src, u))}


def _head(units: list[Unit], need: set[int], early: set[int]) -> list[Unit]:
    """The units a closure emits: the includes with the needed defines written before an #include,
    in file order, then the rest of `need` in file order."""
    head = sorted({j for j, u in enumerate(units) if u.include} | (need & early))
    return [units[j] for j in head] + [units[j] for j in sorted(need - early)]


def _closure(start: int, units: list[Unit], by_name: dict[str, list[int]]) -> set[int]:
    need, todo = {start}, [start]
    while todo:
        u = units[todo.pop()]
        for name in u.uses:
            for j in by_name.get(name, ()):
                if j not in need and not units[j].kernels:
                    need.add(j)
                    todo.append(j)
    return need


def _external(units, need, defined) -> set[str]:
    used = set().union(*(units[j].uses for j in need))
    return {n for n in used - defined if n.startswith(("at", "c10", "C10", "TORCH", "AT_", "CUDA_", "cub", "thrust"))
            and len(n) > 2}


def _emit(src: bytes, chosen: list[Unit]) -> str:
    out: list[str] = []
    open_scopes: tuple[tuple[str, str], ...] = ()
    for u in chosen:
        # close and open scopes so each unit sits where it was declared
        common = 0
        while common < min(len(open_scopes), len(u.scopes)) and open_scopes[common] == u.scopes[common]:
            common += 1
        for _, closer in reversed(open_scopes[common:]):
            out.append(closer)
        for opener, _ in u.scopes[common:]:
            out.append(opener)
        open_scopes = u.scopes
        out.append(_text(src, u).rstrip())
        if not u.include:
            out.append("")
    for _, closer in reversed(open_scopes):
        out.append(closer)
    return "\n".join(out).rstrip() + "\n"


def _launch_bounds(head: str) -> str | None:
    m = LAUNCH_BOUNDS.search(head)
    if not m:
        return None
    end = _balanced(head.encode(), len(head[:m.end() - 1].encode()))
    return head[m.start():] if end is None else head.encode()[len(head[:m.start()].encode()):end].decode()


def _params(head: str, name: str) -> list[str]:
    head = parsing.strip_comments(head)  # vLLM's `torch::Tensor& out,  // [..., hidden]`
    m = re.search(r"\b" + re.escape(name) + r"\s*\(", head)
    return (split_args(head, m.end(), "(<[", ")>]") or []) if m else []


def _launch_pattern(kname: str) -> re.Pattern:
    return re.compile(r"\b" + re.escape(kname) + r"\s*(<(?:[^;<>]|<[^;<>]*>)*>)?[\s\\]*<<<", re.S)


def _launch_sites(root, units: list[Unit], src: bytes, kname: str, exclude: int) -> list[dict]:
    pat = None
    sites = []
    for j, u in enumerate(units):
        if j == exclude or u.include or (u.origin and u.origin is not src):
            continue
        raw = src[u.start:u.end]
        if b"<<<" not in raw or kname.encode() not in raw:
            continue  # cheap byte tests before the regex
        pat = pat or _launch_pattern(kname)
        text = _text(src, u)
        # launched through a pointer to it (`auto kernel = &k<Ktraits>; kernel<<<...>>>`, causal-conv1d's and mamba's)
        aliases = [a.group(1) for a in re.finditer(rf"\b(\w+)\s*=\s*&?\s*{re.escape(kname)}\b(?!\s*\()", text)]
        pats = [pat] + [_launch_pattern(a) for a in aliases]
        for m in (m for p in pats for m in p.finditer(text)):
            line = u.line_start + text.count("\n", 0, m.start())
            site = {"function": sorted(u.defines)[0] if u.defines else "", "lines": [u.line_start, u.line_end],
                    "line": line}
            if m.group(1):
                site["template_args"] = " ".join(m.group(1)[1:-1].replace("\\", " ").split())
            macro = _enclosing_macro(root, u.start + len(text[:m.start()].encode()))
            if macro:
                site["macro"] = macro  # launched from a #define body
            sites.append(site)
    return sites


def _enclosing_macro(root, offset: int) -> str | None:
    n = root.descendant_for_byte_range(offset, offset + 1)
    while n is not None:
        if n.type in ("preproc_def", "preproc_function_def"):
            return n.child_by_field_name("name").text.decode()
        n = n.parent
    return None


def _instantiations(units: list[Unit], src: bytes, kname: str) -> list[str]:
    out = []
    for u in units:
        if u.origin and u.origin is not src:
            continue
        text = _text(src, u)
        if text.lstrip().startswith("template") and re.search(r"\b" + re.escape(kname) + r"\s*<", text) \
                and "{" not in text and re.match(r"\s*template\s+(?!<)", text):
            out.append(" ".join(text.split()))
    return out


def _unaccounted(root, src: bytes, kernels: list[Kernel], dead) -> list[dict]:
    """Every `__global__` token outside comments that is not in an extracted kernel, with a reason."""
    out = []
    for m in re.finditer(rb"\b__global__\b", src):
        line = src.count(b"\n", 0, m.start()) + 1
        node = root.descendant_for_byte_range(m.start(), m.end())
        types = set()
        n = node
        while n is not None:
            types.add(n.type)
            n = n.parent
        if "comment" in types:
            continue
        if any(k.lines[0] <= line <= k.lines[1] for k in kernels):
            continue
        detail = src[src.rfind(b"\n", 0, m.start()) + 1:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()[:120]
        if types & STRING_TYPES:
            reason = "in_string_literal"  # source text for a runtime (JIT) compiler
        elif any(a <= m.start() < b for a, b, _ in dead):
            reason = next(r for a, b, r in dead if a <= m.start() < b)
        elif types & {"preproc_def", "preproc_function_def"}:
            reason = "in_macro_definition"
        elif "function_definition" not in types:
            reason = "declaration_only"
        else:
            reason = "not_a_kernel_definition"
        out.append({"line": line, "reason": reason, "detail": detail})
    return out


INCLUDE_LINE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.M)


def late_includes(files: dict[str, bytes]) -> dict[str, bytes]:
    """For headers included after code by another file of the same source, that file's text
    up to the #include: the context the header relies on (e.g. Loops.cuh -> CUDALoops.cuh); and
    so for a header naming torch's namespaces after torch headers it does not include itself
    (apex's scaled_masked_softmax.h, whose c10::BFloat16 its .cu's <ATen/ATen.h> declares)."""
    out: dict[str, bytes] = {}
    by_base: dict[str, list[str]] = {}
    for r in files:
        by_base.setdefault(r.rsplit("/", 1)[-1], []).append(r)
    for rel, data in files.items():
        for m in INCLUDE_LINE.finditer(data):
            target = m.group(1).decode("utf-8", "replace")
            cands = by_base.get(target.rsplit("/", 1)[-1], ())
            hit = next((r for r in cands if r == target or r.endswith("/" + target)), None)
            if hit is None or hit == rel or hit in out:
                continue
            before = data[:m.start()]
            if _has_code(before) or (TORCH_NAMES.search(files[hit])
                                     and set(TORCH_INCLUDE.findall(before)) - set(TORCH_INCLUDE.findall(files[hit]))):
                out[hit] = before  # ... or a header naming torch's types that its includer's includes declare
    return out


TORCH_NAMES = re.compile(rb"\b(?:c10|at|torch)::")
TORCH_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"]((?:torch|ATen|c10)/[^>"]+)', re.M)


def _has_code(text: bytes) -> bool:
    """Whether text has anything but comments, preprocessor lines and blank lines."""
    in_block = False
    for line in text.splitlines():
        s = line.strip()
        if in_block:
            in_block = b"*/" not in s
            continue
        if s.startswith(b"/*"):
            in_block = b"*/" not in s
            continue
        if not s or s.startswith((b"//", b"#")) or s.endswith(b"\\"):
            continue
        if s.startswith((b"namespace", b"}", b"{")):
            continue
        return True
    return False


# ---- a file's own headers: include folders and the local headers its includes reach ----------

STANDARD_INCLUDE_DIRS = ("include", "csrc")
MAX_HEADER_BYTES = 512 << 10  # one header
MAX_HEADERS_BYTES = 1 << 20  # all the headers of one file (stored with each of its records)


def include_dirs(root, rel: str, extra: list[str] = ()) -> list[str]:
    """Folders (relative to `root`, '.' for the root) searched for the includes of file `rel`:
    its own folder, the root, the usual include/ and csrc/, then `extra`, then every folder of the
    tree named like an include folder (DeepSpeed's csrc/includes), those that exist."""
    import os

    own = rel.rsplit("/", 1)[0] if "/" in rel else "."
    out: list[str] = []
    for d in (own, ".", *STANDARD_INCLUDE_DIRS, *extra, *_include_folders(str(root))):
        d = safe_rel(d)
        if d is None or d in out:
            continue
        full = os.path.join(root, d)
        if os.path.isdir(full) and not os.path.islink(full) and _inside_real(root, full):
            out.append(d)
    return out


INCLUDE_FOLDER_NAMES = ("include", "includes", "inc")
INCLUDE_FOLDER_DEPTH = 5


@functools.lru_cache(maxsize=16)
def _include_folders(root: str) -> tuple[str, ...]:
    """The tree's folders named like include folders, at most INCLUDE_FOLDER_DEPTH deep (a build's
    `-Icsrc/includes`, which the tree itself does not state), in sorted order."""
    import os

    out = []
    for here, dirs, _ in os.walk(root):
        depth = os.path.relpath(here, root).count(os.sep) + (here != root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if depth < INCLUDE_FOLDER_DEPTH else []
        if here != root and os.path.basename(here) in INCLUDE_FOLDER_NAMES:
            out.append(os.path.relpath(here, root).replace(os.sep, "/"))
    return tuple(out)


def local_headers(root, rel: str, dirs: list[str], src: bytes) -> dict[str, str]:
    """The tree's own headers that `src` (the file `rel`) includes, transitively: {path: text}.

    `#include "x"` is looked up in the including file's folder, then in `dirs`; `<x>` in `dirs`
    only; a name not found in the tree is a system header and is left to the compiler. Nothing
    outside the tree is ever read: absolute names, `..` escaping the root and links are ignored."""
    import os

    out: dict[str, str] = {}
    total = 0
    todo = [(rel, src)]
    while todo:
        cur, data = todo.pop()
        here = cur.rsplit("/", 1)[0] if "/" in cur else "."
        for m in INCLUDE_FULL.finditer(data):
            quote, name = m.group(1), m.group(2).decode("utf-8", "replace")
            bases = ([here] if quote == b'"' else []) + list(dirs)
            for base in bases:
                cand = safe_rel(f"{base}/{name}")
                if cand is None or cand == rel:
                    continue
                if cand in out:
                    break
                full = os.path.join(root, cand)
                if not os.path.isfile(full) or os.path.islink(full) or not _inside_real(root, full):
                    continue
                try:
                    size = os.path.getsize(full)
                    if size > MAX_HEADER_BYTES or total + size > MAX_HEADERS_BYTES:
                        break
                    with open(full, "rb") as f:
                        text = f.read()
                except OSError:
                    break
                total += size
                out[cand] = text.decode("utf-8", "replace")
                todo.append((cand, text))
                break
    return dict(sorted(out.items()))


INCLUDE_FULL = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


def _inside_real(root, path) -> bool:
    import os

    from sftbuild.sandbox import within

    return within(os.path.realpath(path), os.path.realpath(root))


# ---- the file's own CPU reference and host launcher (llm.c style) ------------------------------

# launchers not to validate through: library work (a cheat) or leaving the process (forbidden)
LIBRARY_WORK = re.compile(r"\b(?:cublas(?!Check\b)\w+|cudnn(?!Check\b)\w+|thrust::\w+|cub::Device\w+::\w+)\s*\(|"
                          r"(?<![\w.:])(?:std::)?(?:exit|_exit|abort|quick_exit|system)\s*\(")
CPU_REFERENCE = re.compile(r"(?:_cpu|_reference|_ref|_host)$|^(?:ref_|reference_|cpu_|naive_cpu_)")


def _host_functions(units: list[Unit], src: bytes) -> dict[str, int]:
    """Host function definitions by name (no __global__/__device__); templates only when every
    template parameter is a type (`template <typename T>`), which a call can deduce."""
    out = {}
    for i, u in enumerate(units):
        if u.kernels or u.include or (u.origin and u.origin is not src):
            continue
        text = _text(src, u).lstrip()
        head = text.split("{", 1)[0]
        if "{" not in text or re.search(r"__(?:device|global)__", head) \
                or not re.search(r"\)\s*$", head.strip()) or len(u.defines) != 1:
            continue
        if text.startswith("template") and not _type_template(head):
            continue
        out[next(iter(u.defines))] = i
    return out


def _type_template(head: str) -> list[str] | None:
    """Names of a template's parameters when all are types, else None (also for a non-template)."""
    m = re.match(r"\s*template\s*<([^<>]*)>", head)
    if not m:
        return None
    parts = [p.strip() for p in m.group(1).split(",") if p.strip()]
    names = [re.fullmatch(r"(?:typename|class)\s+(\w+)", p) for p in parts]
    return [n.group(1) for n in names] if parts and all(names) else None


def _signature(units, src, i, name) -> list[dict] | None:
    head = _text(src, units[i]).split("{", 1)[0]
    params = [param_info(p) for p in _params(head, name)]
    if any(p is None for p in params):
        return None
    for p in params:  # a template type parameter takes the CPU side's type (the harness passes that)
        p["template"] = p["type"] in (_type_template(head) or [])
    return params


def prepare_call(units, src, hosts: dict[str, int], cpus: list[str], main: str, cname: str, args: list[str],
                 buffers: list[dict]) -> dict | None:
    """The earlier step of main() that fills arrays the CPU reference reads but main() only allocates:
    the last call of another CPU function of the file, before the reference's own call, that takes
    one of them (llm.c's attention_backward main() runs attention_forward_cpu to make the causal
    `att` the backward reads; layernorm_backward's runs layernorm_forward_cpu for `mean`, `rstd`).
    Returns {cpu, params, args, extra: [{arg, gen, size, ...}]} (`extra`: its arrays that the
    reference call does not take, as main() allocates them), or None when there is no such call or
    one of its arrays is not one main() allocates. The trials run it on the host arrays first, so
    the kernel reads what main() would have given it (a causal softmax's zeros, not random values)."""
    empty = {b["arg"] for b in buffers if b.get("gen") == "empty"}
    at = re.search(r"(?<![\w.])" + re.escape(cname) + r"\s*\(", main)
    if not empty or not at:
        return None
    best = None
    for name in cpus:
        if name == cname:
            continue
        for m in re.finditer(r"(?<![\w.])" + re.escape(name) + r"\s*\(", main[:at.start()]):
            call = split_args(main, m.end(), "([{", ")]}")
            if call and empty & set(call) and (best is None or m.start() > best[0]):
                best = (m.start(), name, call)
    if best is None:
        return None
    _, name, call = best
    sig = _signature(units, src, hosts[name], name)
    if not sig or len(sig) != len(call) or any(p["template"] for p in sig):
        return None
    extra, by_arg = [], dict(zip(args, _signature(units, src, hosts[cname], cname) or []))
    for p, a in zip(sig, call):
        if not p["ptr"]:
            continue
        if a in args:
            if by_arg.get(a, {}).get("type") != p["type"]:
                return None  # one host array, two element types
            continue
        alloc = allocation(main, a) if re.fullmatch(r"\w+", a) else None
        if alloc is None or not alloc["size"] or alloc["gen"] == "int" or p["type"] not in ("float", "double"):
            return None
        extra.append({"arg": a, **alloc})
    return {"cpu": name, "params": sig, "args": call, "extra": extra}


def _caller_types(units, src, hosts: dict[str, int], lname: str) -> dict[int, str]:
    """The pointer types the file's own call of template launcher `lname` deduces ({argument
    index: element type}): where an argument is a pointer parameter of the calling function (llm.c's
    dispatcher passes its `floatX* dinp`), or a pointer the caller declares (`floatX* d_dinp;`).
    The first host function that calls the launcher decides; {} when none does. A type the caller
    itself takes as a template parameter says nothing and is left out."""
    for cname, i in hosts.items():
        if cname == lname:
            continue
        text = _text(src, units[i])
        head, _, body = text.partition("{")
        args = call_args(body, lname)
        if not args:
            continue
        own = set(_type_template(head) or [])
        params = {p["name"]: p for p in map(param_info, _params(head, cname)) if p}
        out = {}
        for j, a in enumerate(args):
            p = params.get(a)
            if p and p["ptr"]:
                typ = p["type"]
            else:
                d = re.search(r"(?<![\w.])((?:unsigned\s+)?[A-Za-z_][\w:]*)\s*\*\s*" + re.escape(a) + r"\s*[;=,]",
                              body) if re.fullmatch(r"\w+", a) else None
                typ = d.group(1) if d and d.group(1) not in ("return", "const") else None
            if typ and typ not in own:
                out[j] = typ
        return out
    return {}


STEPS_CPU = "sftbuild_cpu_steps"  # the CPU reference made of several of main()'s CPU calls (`_references`)


def _references(units, src, hosts: dict[str, int], cpus: list[str], main: str, decls: list):
    """The CPU references a launcher may fit, as (name, signature, main()'s arguments, steps): each
    CPU function main() calls (steps None), then each run of two or more consecutive CPU calls of
    main() (steps [(function, arguments)]), as one function over main()'s arrays and sizes: a fused
    launcher (llm.c's fused_residual_forward: residual_forward_cpu, then layernorm_forward_cpu on its
    result) does what main() checks with several calls. Its arrays are main()'s, typed by the steps'
    parameters (const where every step reads it); its scalars are main()'s sizes the steps' scalar
    arguments name, in order."""
    calls = []
    for name in cpus:
        sig = _signature(units, src, hosts[name], name)
        m = re.search(r"(?<![\w.])" + re.escape(name) + r"\s*\(", main)
        args = split_args(main, m.end(), "([{", ")]}") if m and sig and not any(p["template"] for p in sig) else None
        yield name, sig, args, None
        if args and len(args) == len(sig):
            calls.append((m.start(), name, sig, args))
    calls.sort()
    sizes = {d[0]: d[2] for d in decls}
    for n in range(2, len(calls) + 1):
        for i in range(len(calls) - n + 1):
            run = calls[i:i + n]
            params, names = [], {}
            for _, _, sig, args in run:
                for q, a in zip(sig, args):
                    if q["ptr"]:
                        if not re.fullmatch(r"\w+", a) or a in ("NULL", "nullptr"):
                            break
                        if a in names:
                            names[a]["const"] = names[a]["const"] and q["const"]
                            if names[a]["type"] != q["type"]:
                                break
                        else:
                            names[a] = {"type": q["type"], "name": a, "ptr": True, "const": q["const"],
                                        "kind": "ptr", "template": False}
                            params.append(names[a])
                    else:
                        for w in re.findall(r"[A-Za-z_]\w*", a):
                            if w in sizes and w not in names:
                                names[w] = {"type": "float" if sizes[w] == "float" else "int", "name": w,
                                            "ptr": False, "const": False, "kind": sizes[w], "template": False}
                                params.append(names[w])
                else:
                    continue
                break
            else:
                yield STEPS_CPU, params, [q["name"] for q in params], [(name, args) for _, name, _, args in run]


def _main_argument(units, src, hosts: dict[str, int], main: str, lname: str, name: str) -> str | None:
    """What main() passes for launcher `lname`'s parameter `name`: its argument where main() calls
    the launcher, or a function that hands the parameter on under the same name (llm.c's dispatcher
    `fused_residual_forward(kernel_num, ..., B*T, C, block_size)` passing `N` to each launcher)."""
    sig = _signature(units, src, hosts[lname], lname) or []
    callers = [(lname, [q["name"] for q in sig])]
    for cname, i in hosts.items():
        if cname in (lname, "main"):
            continue
        head, _, body = _text(src, units[i]).partition("{")
        args = call_args(body, lname)
        if args and name in args:
            callers.append((cname, [q["name"] for q in (_signature(units, src, i, cname) or [])]))
    for cname, names in callers:
        got = call_args(main, cname)
        if got and name in names and len(got) == len(names):
            return got[names.index(name)]
    return None


def _main_body(units, src) -> str:
    """main()'s text with its comments blanked (`parsing.blank_comments`): what it leaves
    commented out, it never runs."""
    for u in units:
        if "main" in u.defines and not u.kernels and (not u.origin or u.origin is src):
            return blank_comments(_text(src, u))
    return ""


def file_reference(units: list[Unit], src: bytes, kernel_index: int, kname: str, sites: list[dict],
                   by_name: dict[str, list[int]]) -> tuple[dict, set[int]] | None:
    """The file's CPU reference for kernel `kname`, called through a host launcher of the same file.

    Returns ({cpu, cpu_code, launcher, cpu_params, launcher_params, launcher_map, trailing,
    call_args, buffers, compare, acceptance_text, scalars, block_sizes, prepare, device_buffers,
    zeroed}, the units the record then needs: kernel, launcher and their closures), or None when no CPU function
    (`*_cpu`, `*_reference`, `ref_*`) that main() calls, nor a run of consecutive ones
    (`_references`), fits a launcher of the kernel (see `map_params`). `prepare`: main()'s earlier
    CPU step that fills arrays the reference reads (`prepare_call`); `device_buffers`: file-scope
    device pointers main() allocates; `zeroed`: per launcher scratch buffer, whether main() clears it;
    `acceptance_text`: how main() accepts the arrays it validates (`main_reader.acceptance_text`)."""
    hosts = _host_functions(units, src)
    cpus = [n for n in hosts if CPU_REFERENCE.search(n)]
    main = _main_body(units, src)
    if not cpus or not main:
        return None
    decls, blocks = main_values(main)
    for site in sites:
        lname = site.get("function")
        if lname not in hosts or lname == "main" or site.get("macro"):
            continue
        lsig = _signature(units, src, hosts[lname], lname)
        if lsig is None or LIBRARY_WORK.search(_text(src, units[hosts[lname]])):
            continue  # handing work to cuBLAS/cuDNN/thrust, or exiting, would drop the kernel with it
        for cname, csig, args, steps in _references(units, src, hosts, cpus, main, decls):
            if not args or len(args) != len(csig):
                continue
            mapped = map_params(csig, lsig, args, main, lambda name: _main_argument(units, src, hosts, main,
                                                                                       lname, name))
            if mapped is None:
                continue
            lmap, trailing = mapped
            buffers, ok = [], True
            for p, a in zip(csig, args):
                if p["ptr"]:
                    if a in ("NULL", "nullptr", "0"):
                        buffers.append({"arg": a, "gen": "null", "size": "0"})
                        continue
                    alloc = allocation(main, a) if re.fullmatch(r"\w+", a) else None
                    if alloc is None or not alloc["size"]:
                        ok = False
                        break
                    buffers.append({"arg": a, **alloc})
            if not ok:
                continue
            lsig = [dict(g) for g in lsig]
            called = _caller_types(units, src, hosts, lname)
            for j, (m, g) in enumerate(zip(lmap, lsig)):  # template types: the file's own call's, else the CPU side's
                if g["template"]:
                    g["type"] = called.get(j) or (csig[m["cpu"]]["type"] if "cpu" in m else "float")
            written = sorted(m["cpu"] for m, g in zip(lmap, lsig) if "cpu" in m and g["ptr"] and not g["const"])
            checked = [i for i in written if args[i] in validated(main, args)]
            need = _closure_of([kernel_index, hosts[lname]], units, by_name, launcher=hosts[lname], src=src)
            earlier = None if steps else prepare_call(units, src, hosts, cpus, main, cname, args, buffers)
            own = [hosts[n] for n, _ in steps] if steps else [hosts[cname]]
            cpu_need = _closure_of(own + ([hosts[earlier["cpu"]]] if earlier else []), units, by_name) - need
            ref = {"cpu": cname, "launcher": lname, "cpu_params": csig, "launcher_params": lsig,
                   "launcher_map": lmap, "trailing": trailing,
                   "cpu_code": _emit(src, [units[j] for j in sorted(cpu_need)]) + steps_code(cname, csig, steps),
                   "call_args": args, "buffers": buffers, "compare": checked or written,
                   "acceptance_text": acceptance_text(main, [args[i] for i in checked]),
                   "scalars": decls, "block_sizes": block_values(main, trailing) if trailing else blocks,
                   "prepare": earlier,
                   "device_buffers": device_buffers(_emit(src, [units[j] for j in sorted(need)]), main),
                   "zeroed": zeroed(main, [g["name"] for m, g in zip(lmap, lsig) if "scratch" in m])}
            return ref, need
    return None


def _closure_of(starts: list[int], units, by_name, launcher: int | None = None, src: bytes = b"") -> set[int]:
    """Units the `starts` need; the kernels the launcher launches come along with it."""
    need = set()
    for s in starts:
        need |= _closure(s, units, by_name)
    if launcher is not None:
        text = _text(src, units[launcher])
        for j, u in enumerate(units):
            if u.kernels and j not in need and any(_launch_pattern(k).search(text) for k in u.kernels):
                need |= _closure(j, units, by_name)
    return need


# ---- the kernel's host launcher, and its headers cut to what the kernel and launcher use --------

CONCRETE_TYPES = {"float", "double", "half", "__half", "__nv_bfloat16", "nv_bfloat16", "int", "int8_t", "uint8_t"}


def _launcher(units: list[Unit], src: bytes, sites: list[dict], have: set[int], by_name, kname: str,
              kparams: list[str] = ()) -> dict | None:
    """The first host function launching `kname` and no other kernel: {name, params, code}, where
    `code` is the launcher and what it needs beyond `have` (the kernel's closure), in file order. A
    template over types adds `template` (its parameters) and `instantiated` (the first type of each
    explicit instantiation in the file: `template void launch_gelu<__half>(...)`); a full
    specialization (`template <> void launch_fused_add2<float>(...)`) adds `call`, its name as called,
    and is taken only where its pointers' types are among the kernel's (`kparams`): an overloaded
    kernel's float record is launched by the float specialization."""
    hosts = set(_host_functions(units, src).values())
    ktypes = set(WORD.findall(" ".join(kparams)))
    alone = _launcher_of(units, src, sites, have, by_name, kname, hosts, ktypes, several=False)
    return alone or _launcher_of(units, src, sites, have, by_name, kname, hosts, ktypes, several=True)


def _launcher_of(units, src, sites, have, by_name, kname, hosts, ktypes, several: bool) -> dict | None:
    """`_launcher`'s search over the launch sites; `several`: a launcher that runs other kernels of the
    file too is taken (it adds `launches`, those kernels), unless it calls a library (cuBLAS, cuDNN,
    thrust, cub), whose work would be the match rather than the kernels'."""
    for i, fname in _launching_units(units, src, sites, hosts):
        site = {"function": fname}
        head = _text(src, units[i]).split("{", 1)[0]
        special = re.match(r"\s*template\s*<\s*>", head) and not re.search(r"__(?:device|global)__", head) and \
            re.search(rf"\b{re.escape(site['function'])}\s*(<[^(){{}};]*>)\s*\(", head)
        if i not in hosts and not special:
            continue
        need = _closure(i, units, by_name) - have
        code = _emit(src, [units[j] for j in sorted(need) if not units[j].include])
        named = set(WORD.findall(code))
        others = sorted({k for u in units for k in u.kernels if k != kname and k in named})
        if others and (not several or LIBRARY_WORK.search(parsing.strip_comments(code))):
            continue  # it (or a host function it calls) runs other kernels too: not this record's launch
        if others:  # the kernels it runs beside this one join the record's code (`siblings`), not the launcher's
            code = _emit(src, [units[j] for j in sorted(need - siblings(units, by_name, others))
                               if not units[j].include])
        if special:
            ptr_types = {w for p in split_args(head, special.end(), "(<[", ")>]") or [] if "*" in p
                         for w in WORD.findall(p.split("*")[0]) if w not in ("const", "volatile")}
            if ktypes & CONCRETE_TYPES and not ptr_types <= ktypes:
                continue  # an overload of the kernel for other types (a template kernel takes any)
            found = {"name": site["function"], "call": site["function"] + "".join(special.group(1).split()),
                     "params": split_args(head, special.end(), "(<[", ")>]") or [], "code": code,
                     **({"launches": others} if others else {})}
            return found
        found = {"name": site["function"], "params": _params(head, site["function"]), "code": code,
                 **({"launches": others} if others else {})}
        tparams = _type_template(head)
        if tparams:  # a template over types: the types the file instantiates it with, where it says
            found["template"] = tparams
            found["instantiated"] = sorted({m.group(1) for inst in _instantiations(units, src, site["function"])
                                            for m in [re.search(r"<\s*([\w:]+)\s*[,>]", inst)] if m}
                                           | _macro_instantiations(units, src, site["function"]))
        return found
    return None


FLAT_INDEX = re.compile(r"\b(\w+)\s*=\s*(?:\(\s*\w+\s*\)\s*)?(?:blockIdx\.x\s*\*\s*blockDim\.x\s*\+\s*threadIdx\.x|"
                        r"threadIdx\.x\s*\+\s*blockIdx\.x\s*\*\s*blockDim\.x)\s*;")
NOT_FLAT = re.compile(r"__shared__|__syncthreads|\b(?:blockIdx|threadIdx|blockDim|gridDim)\.[yz]\b|cooperative_groups|"
                      r"\bcg::|__shfl|\bwarp|\batomic\w*\s*\(")


def generated_launcher(kname: str, kparams: list[str], text: str) -> dict | None:
    """A launcher of our own for a kernel the repository launches nowhere, where the kernel is flat: each
    thread handles the element at `blockIdx.x * blockDim.x + threadIdx.x`, bounded by one of its integer
    parameters (`if (i < n)`), with no shared memory, barriers, warp work, atomics or second grid
    dimension; a template over one type stays one. The grid covers that size at 256 threads a block,
    or fewer where its launch bounds say so (`generated` says so). None where the kernel is not flat."""
    head, _, body = text.partition("{")
    tparams = _type_template(head) if head.lstrip().startswith("template") else []
    if tparams is None or len(tparams) > 1 or NOT_FLAT.search(body):
        return None
    params = [param_info(p) for p in kparams]
    if not params or any(p is None for p in params):
        return None
    ints = {p["name"] for p in params if not p["ptr"] and p["kind"] == "int"}
    size = None
    for m in FLAT_INDEX.finditer(body):  # `if (idx < n)`, `idx < B * NH * N * d`: sizes and constants only
        bound = re.search(rf"\b{re.escape(m.group(1))}\s*<\s*([\w\s*+()]+?)\s*(?:\)\s*[{{\w]|;|&&|\|\|)",
                          body[m.end():])
        if bound and {w for w in WORD.findall(bound.group(1)) if not w.isdigit()} <= ints:
            size = " ".join(bound.group(1).split())
            break
    bounds = re.search(r"__launch_bounds__\s*\(\s*([^,)]*)", head)
    threads = int(bounds.group(1)) if bounds and bounds.group(1).strip().isdigit() else 256
    if size is None or bounds and not bounds.group(1).strip().isdigit():
        return None  # a block size bounded by an expression we cannot read
    threads = min(threads, 256)  # at most what its launch bounds allow
    name = f"sftbuild_launch_{kname}"
    inst = f"<{tparams[0]}>" if tparams else ""
    args = ", ".join(p["name"] for p in params)
    code = (f"{'template <typename ' + tparams[0] + '>' + chr(10) if tparams else ''}"
            f"void {name}({', '.join(kparams)}) {{\n"
            f"  {kname}{inst}<<<(({size}) + {threads - 1}) / {threads}, {threads}>>>({args});\n}}\n")
    out = {"name": name, "params": list(kparams), "code": code,
           "generated": f"ours: a flat grid over {size} at {threads} threads a block"}
    if tparams:
        out["template"], out["instantiated"] = tparams, []
    return out


def _macro_instantiations(units: list[Unit], src: bytes, name: str) -> set[str]:
    """The types a file instantiates template `name` at through a macro of its own (DeepSpeed's
    `#define INSTANTIATE_FUSED_LN(T) template void launch_fused_ln(T*, ...);` then `INSTANTIATE_FUSED_LN(__half);`)."""
    text = src.decode("utf-8", "replace")
    out: set[str] = set()
    for u in units:
        body = _text(src, u) if u.origin is src else ""
        m = re.match(r"\s*#\s*define\s+(\w+)\s*\(\s*\w+\s*\)", body)
        if m and re.search(rf"\btemplate\s+[^;]*\b{re.escape(name)}\b", body):
            out |= set(re.findall(rf"^[ \t]*{m.group(1)}\s*\(\s*([\w:]+)\s*\)", text, re.M))
    return out


def _launching_units(units, src, sites, hosts) -> list[tuple[int, str]]:
    """(unit, function name) of each launch site, in order; a launch inside a `#define` body
    (DeepSpeed's `LAUNCH_FUSED_LN(...)`) is made by the host functions that use that macro, one in a
    function `_host_functions` leaves out (a template over values) by the host functions calling it."""
    out: list[tuple[int, str]] = []
    macros = {j for j, u in enumerate(units) if DEFINE_LINE.match(_text(u.origin or src, u))}
    for site in sites:
        if site.get("macro"):
            launching, grew = {site["macro"]}, True
            while grew:  # a macro that expands one that launches launches too (LAUNCH_ALL_RMS_NORM)
                more = {d for j in macros if units[j].uses & launching for d in units[j].defines} - launching
                launching, grew = launching | more, bool(more)
            out += [(j, next(iter(units[j].defines))) for j in sorted(hosts - macros) if units[j].uses & launching]
            continue
        i = next((j for j, u in enumerate(units) if u.line_start == site["lines"][0] and u.origin is src
                  and site["function"] in u.defines), None)
        if i is not None:
            out.append((i, site["function"]))
        if i is not None and i not in hosts:  # a template over values (causal-conv1d's `_launch<128, 4, T>`):
            calling, grew = {site["function"]}, True  # the host functions calling it, through others, launch
            while grew:
                more = {d for j, u in enumerate(units) if u.function and not u.kernels and j not in hosts
                        and u.uses & calling for d in u.defines} - calling
                calling, grew = calling | more, bool(more)
            out += [(j, next(iter(units[j].defines))) for j in sorted(hosts - macros) if units[j].uses & calling]
    return list(dict.fromkeys(out))


TENSOR_PARAM = re.compile(r"\b(?:torch|at)::Tensor\b")
CALLER_EXT = (".cpp", ".cc", ".cxx", ".cu")  # where a binding file's extension functions live


def extension_callers(src: bytes, launchers: set[str], launching: set[str]) -> dict[str, dict]:
    """The extension functions of `src` that launch a kernel of another file through its raw launcher:
    {launcher name: {name, params, code, includes, template?, exposed?, calls}} for each host function
    taking tensors whose closure in `src` (its macros and helpers, DeepSpeed's `DISPATCH_LAYER_NORM`)
    calls exactly one of the repository's launching functions (`launching`), and that one is in
    `launchers`. One per launcher: the first a module of `src` exposes, else the first in file order.
    A template over types adds `template`, its type parameters."""
    units: list[Unit] = []
    _collect(cuda_parser().parse(mask_attributes(src)).root_node, src, (), units, [], top=True)
    for u in units:
        u.origin = src
    by_name: dict[str, list[int]] = {}
    for i, u in enumerate(units):
        for name in u.defines:
            by_name.setdefault(name, []).append(i)
    text = src.decode("utf-8", "replace")
    includes = list(dict.fromkeys(_text(src, u).strip() for u in units if u.include))
    found: dict[str, dict] = {}
    for name, i in _host_functions(units, src).items():
        head = _text(src, units[i]).split("{", 1)[0]
        params = _params(head, name)
        if not any(TENSOR_PARAM.search(p) for p in params):
            continue
        need = _closure(i, units, by_name)
        if any(units[j].kernels for j in need):
            continue  # launches kernels of its own file: that file's extension function
        code = _emit(src, [units[j] for j in sorted(need) if not units[j].include])
        calls = (set(WORD.findall(parsing.strip_comments(code))) & launching) - {name}
        if len(calls) != 1 or not calls <= launchers:
            continue
        fn = {"name": name, "params": params, "code": code, "includes": includes, "calls": next(iter(calls))}
        spaces = [m.group(1) for opener, _ in units[i].scopes for m in [re.match(r"namespace\s+([\w:]+)", opener)] if m]
        if spaces:  # called from outside its namespaces by this name
            fn["qualified"] = "::".join([*spaces, name])
        tparams = _type_template(head)
        if tparams:
            fn["template"] = tparams
        exposed = exposed_by(text, name)
        if exposed:
            fn["exposed"] = exposed
        if fn["calls"] not in found or (exposed and not found[fn["calls"]].get("exposed")):
            found[fn["calls"]] = fn
    return found


def calls_fit(code: str, launcher: dict) -> bool:
    """Whether `code` calls `launcher` with as many arguments as it takes (those with defaults may be
    left out): two files of a repository may define launchers of one name and different parameters."""
    params = launcher.get("params") or []
    least = sum("=" not in p for p in params)
    for m in re.finditer(rf"\b{re.escape(launcher['name'])}\s*(?:<[^;(){{}}]*>)?\s*\(", parsing.strip_comments(code)):
        args = split_args(parsing.strip_comments(code), m.end(), "(<[", ")>]")
        if args is not None and least <= len(args) <= len(params):
            return True
    return False


def needed_includes(code: str, includes: list[str], headers: dict[str, str]) -> list[str]:
    """`includes` (a file's #include lines) less those of the tree's own `headers` that define nothing
    `code` names, themselves or through the headers they include: a binding file's header of cuBLAS
    wrappers that its layer norm never calls must not fail that function's build."""
    words = set(WORD.findall(code))
    own: dict[str, set[str]] = {}  # each header's own names, parsed once

    def names(rel: str) -> set[str]:
        if rel not in own:
            data = headers[rel].encode()
            units: list[Unit] = []
            _collect(cuda_parser().parse(mask_attributes(data)).root_node, data, (), units, [], top=True)
            own[rel] = set().union(*(u.defines for u in units))
        return own[rel]

    def uses(rels: list[str]) -> bool:  # whether these headers, or those they include, define a name `code` uses
        seen, todo = set(rels), list(rels)
        while todo:
            rel = todo.pop()
            if names(rel) & words:
                return True
            for m in INCLUDE_LINE.finditer(headers[rel].encode()):
                more = set(_header_of(m.group(1).decode("utf-8", "replace"), headers)) - seen
                seen |= more
                todo += sorted(more)
        return False

    kept = []
    for line in includes:
        m = INCLUDE_LINE.match(line.encode())
        rels = _header_of(m.group(1).decode("utf-8", "replace"), headers) if m else []
        if not rels or uses(rels):
            kept.append(line)  # a system or library header, or one the code uses
    return kept


def _header_of(name: str, headers: dict[str, str]) -> list[str]:
    """The tree's headers an #include of `name` may mean (by path suffix)."""
    return [r for r in headers if r == name or r.endswith("/" + name)]


def siblings(units: list[Unit], by_name, names: list[str]) -> set[int]:
    """The units the kernels `names` need: a launcher running several kernels brings them into the record."""
    out: set[int] = set()
    for j, u in enumerate(units):
        # an explicit specialization's primary template is declared apart, under the same name
        if set(u.kernels) & set(names) or u.defines & set(names) and not u.kernels and not u.function:
            out |= _closure(j, units, by_name)
    return out


MODULE = re.compile(r"\b(PYBIND11_MODULE|TORCH_LIBRARY(?:_FRAGMENT|_IMPL)?)\s*\(([^)]*)\)\s*\{")
# `m.def("name", &fn ...)`, `m.def("name(Tensor x) -> Tensor", &fn)`, `m.impl("name", TORCH_FN(fn))`
EXPOSE = re.compile(r"\.\s*(def|impl)\s*\(\s*\"([^\"]*)\"\s*,\s*(?:TORCH_FN\s*\(\s*)?&?\s*(?:[\w:]*::)?(\w+)")
SCHEMA = re.compile(r"\.\s*def\s*\(\s*\"(\w+)\s*(\([^\"]*)\"")


def exposed_by(text: str, name: str) -> dict | None:
    """How the file's module definitions expose host function `name`: {kind (PYBIND11_MODULE |
    TORCH_LIBRARY | TORCH_LIBRARY_FRAGMENT | TORCH_LIBRARY_IMPL), module (its first argument), name (as
    exposed), schema (a TORCH_LIBRARY definition's, where one names it)}; None when none does (the
    binder then builds a module of its own exposing it)."""
    schemas = {m.group(1): m.group(1) + m.group(2) for m in SCHEMA.finditer(text)}
    for m in MODULE.finditer(text):
        body = text[m.end():_block_end(text, m.end() - 1)]
        for e in EXPOSE.finditer(body):
            if e.group(3) == name:
                exposed = e.group(2).split("(")[0].strip()
                found = {"kind": m.group(1), "module": m.group(2).split(",")[0].strip(), "name": exposed}
                schema = e.group(2) if "(" in e.group(2) else schemas.get(exposed)
                return {**found, **({"schema": schema} if schema else {})}
    return None


def _block_end(text: str, brace: int) -> int:
    """The index just past the `}` closing the `{` at `brace` (the text's end when it never closes)."""
    depth = 0
    for i in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    return len(text)


