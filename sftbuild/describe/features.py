"""Static features of a kernel, read from its parse tree (tree-sitter for CUDA, `ast` for Triton).

The techniques are describers (`sftbuild.describe.describers`), one per technique, each a
`(Source) -> bool` per language. Comments and ordinary string literals never count (the tree
separates them); inline-asm strings do, since PTX such as `mma.sync` or `cp.async` only
appears there. `extract` returns the feature dict describe stores and checks text against.
"""
from __future__ import annotations

import ast
import re

from sftbuild.binding import Binding
from sftbuild.describe.describers import DESCRIBERS, Describer, Source
from sftbuild.ops.programs import declared_dtypes
from sftbuild.parsing import cuda_parser


# ---- reading sources ------------------------------------------------------------------

def _cuda_source(code: str) -> Source:
    src = code.encode()
    root = cuda_parser().parse(src).root_node
    tokens, asm, loops, calls = set(), [], [], set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "comment":
            continue
        if node.type == "string_literal":
            if _inside(node, "gnu_asm_expression"):
                asm.append(node.text.decode(errors="replace"))
            continue
        if node.type == "for_statement":
            body = node.child_by_field_name("body")
            head = src[node.start_byte: body.start_byte if body else node.end_byte].decode(errors="replace")
            loops.append(head)
        if node.type == "call_expression":
            fn = node.child_by_field_name("function")
            if fn is not None:
                calls.add(fn.text.decode(errors="replace"))
        if node.child_count == 0:
            tokens.add(node.text.decode(errors="replace"))
        stack.extend(node.children)
    return Source(tokens, "\n".join(asm), loops, calls, code)


def _inside(node, kind: str) -> bool:
    while node is not None:
        if node.type == kind:
            return True
        node = node.parent
    return False


def _triton_source(code: str) -> Source:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return Source(set(), "", [], set(), code)
    tokens, calls = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            tokens.add(node.id)
        elif isinstance(node, ast.Attribute):
            tokens.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            tokens.add(node.arg)
        if isinstance(node, ast.Call):
            calls.add(_dotted(node.func))
    return Source(tokens, "", [], calls, code)


def _dotted(node) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return ""


def _reduction(s: Source, techniques: set[str]) -> str | None:
    if "cub_primitives" in techniques:
        return "cub"
    if "warp_shuffle" in techniques:
        return "warp_shuffle"
    if "shared_memory" in techniques and s.has("__syncthreads"):
        return "shared_memory_tree"
    if "atomics" in techniques:
        return "atomic"
    if any(c in s.calls for c in ("tl.sum", "tl.max", "tl.min", "tl.reduce", "tl.argmax")):
        return "tl_reduce"
    return None


def _block_size(entry: dict, binding: Binding | None, code: str) -> int | None:
    args = (binding.harness_args if binding else None) or {}
    for key in ("block", "threads", "block_size"):
        if isinstance(args.get(key), int):
            return args[key]
    m = re.search(r"\((\d+)", entry.get("launch_bounds") or "") or \
        re.search(r"__launch_bounds__\s*\(\s*(\d+)", code)
    return int(m.group(1)) if m else None


def _dtypes(record) -> list[str]:
    binding = record.binding
    if binding and binding.dtypes:
        return list(binding.dtypes)
    if binding and binding.kind == "kernelbench" and binding.reference:  # what its get_inputs() makes
        return declared_dtypes(binding.reference)
    params = " ".join(record.entry.get("params") or [])
    found = [d for d, pat in (("float32", r"\bfloat\s*\*"), ("float16", r"\b(__)?half\b|c10::Half|at::Half"),
                              ("bfloat16", r"bfloat16|BFloat16")) if re.search(pat, params)]
    return found


def _triton_meta(code: str) -> dict:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return {}
    configs, blocks = 0, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func).endswith("Config"):
            configs += 1
            if node.args and isinstance(node.args[0], ast.Dict):
                for k, v in zip(node.args[0].keys, node.args[0].values):
                    if isinstance(k, ast.Constant) and "BLOCK" in str(k.value) and isinstance(v, ast.Constant):
                        blocks.add(int(v.value))
    return {"autotune_configs": configs, "block_sizes": sorted(blocks)}


def _template_over(record) -> str:
    """What a templated kernel's parameters are: "type" (typename/class), "value" (an int block
    size, say) or "both", read from the `template <...>` right before the kernel's definition."""
    m = re.search(r"template\s*<([^<>]*(?:<[^<>]*>[^<>]*)*)>\s*(?:__\w+__\s*(?:\([^)]*\)\s*)?)*"
                  r"(?:static\s+|inline\s+)*void\s+" + re.escape(record.name) + r"\s*\(", record.code or "")
    params = [p.strip() for p in (m.group(1).split(",") if m else []) if p.strip()]
    kinds = {"type" if re.match(r"(typename|class)\b", p) else "value" for p in params}
    return "both" if len(kinds) > 1 else (kinds.pop() if kinds else "type")


# how each language's code is read; records of other languages (KernelBench modules) read as CUDA
READERS = {"cuda": _cuda_source, "triton": _triton_source}


def extract(record, describers: list[Describer] | None = None) -> dict:
    """The feature dict describe stores and the fidelity check compares against.

    `describers`: the techniques to look for (default: every registered one)."""
    lang = record.language if record.language in READERS else "cuda"
    src = READERS[lang](record.code)
    if describers is None:
        describers = DESCRIBERS.configured({})
    techniques = {d.name for d in describers if d.detect(lang, src)}
    feats = {
        "language": record.language,
        "kernel": record.name,
        "techniques": sorted(techniques),
        "reduction": _reduction(src, techniques),
        "block_size": _block_size(record.entry, record.binding, record.code),
        "templated": _template_over(record) if record.entry.get("template") else None,
        "dtypes": _dtypes(record),
        "accumulate_type": src.has("acc_type", "accscalar_t", "opmath_t", "acc_t"),
    }
    if lang == "triton":
        feats.update(_triton_meta(record.code))
    return feats
