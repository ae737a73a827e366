"""Static features of a kernel, read from its parse tree (tree-sitter for CUDA, `ast` for Triton).

Each detector is a tiny named plug-in: `(Source) -> bool`. Comments and ordinary string
literals never count (the tree separates them); inline-asm strings do, since PTX such as
`mma.sync` or `cp.async` only appears there.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import Callable

from sftbuild.harvest.cuda_extract import parser


@dataclasses.dataclass
class Source:
    tokens: set[str]  # identifiers, keywords and type names outside comments and strings
    asm: str  # inline-asm text
    loops: list[str]  # the header (init; cond; update) of every for loop
    calls: set[str]  # called names, dotted for Triton (tl.dot)
    text: str


DETECTORS: dict[str, dict[str, Callable[[Source], bool]]] = {"cuda": {}, "triton": {}}


def detector(language: str, name: str):
    def wrap(fn):
        DETECTORS[language][name] = fn
        return fn
    return wrap


def _any(tokens: set[str], *names: str) -> bool:
    return any(n in tokens for n in names)


def _prefix(tokens: set[str], *prefixes: str) -> bool:
    return any(t.startswith(prefixes) for t in tokens)


# ---- CUDA detectors ------------------------------------------------------------------

@detector("cuda", "shared_memory")
def _shared(s):
    return "__shared__" in s.tokens


@detector("cuda", "warp_shuffle")
def _shuffle(s):
    return _prefix(s.tokens, "__shfl", "WARP_SHFL") or "shfl.sync" in s.asm


@detector("cuda", "vectorized_access")
def _vector(s):
    return _any(s.tokens, "float4", "float2", "half2", "__half2", "__nv_bfloat162", "int4", "uint4", "double2",
                "aligned_vector", "load_vector") or ".v4." in s.asm


@detector("cuda", "tensor_cores")
def _tensor_cores(s):
    return _any(s.tokens, "wmma", "mma_sync", "load_matrix_sync") or bool(re.search(r"\b(w?gmma|mma)\.", s.asm))


@detector("cuda", "atomics")
def _atomics(s):
    return _prefix(s.tokens, "atomic", "gpuAtomic", "fastAtomic") or "atom." in s.asm or "red." in s.asm


@detector("cuda", "grid_stride_loop")
def _grid_stride(s):
    return any("gridDim" in loop.split(";")[-1] for loop in s.loops) or _prefix(s.tokens, "CUDA_KERNEL_LOOP")


@detector("cuda", "launch_bounds")
def _bounds(s):
    return _any(s.tokens, "__launch_bounds__") or _prefix(s.tokens, "C10_LAUNCH_BOUNDS")


@detector("cuda", "cooperative_groups")
def _coop(s):
    return _any(s.tokens, "cooperative_groups", "this_thread_block", "this_grid", "tiled_partition")


@detector("cuda", "async_copy")
def _async(s):
    return _any(s.tokens, "memcpy_async", "__pipeline_memcpy_async", "cp_async") or "cp.async" in s.asm


@detector("cuda", "cub_primitives")
def _cub(s):
    return _any(s.tokens, "cub", "BlockReduce", "BlockScan", "WarpReduce", "BlockRadixSort", "WarpMergeSort")


# ---- Triton detectors ----------------------------------------------------------------

@detector("triton", "tensor_cores")
def _tl_dot(s):
    return "tl.dot" in s.calls


@detector("triton", "atomics")
def _tl_atomic(s):
    return any(c.startswith("tl.atomic_") for c in s.calls)


@detector("triton", "autotune")
def _tl_autotune(s):
    return "triton.autotune" in s.calls


@detector("triton", "masked_access")
def _tl_mask(s):
    return "mask" in s.tokens and "tl.load" in s.calls


# ---- reading sources ------------------------------------------------------------------

def _cuda_source(code: str) -> Source:
    src = code.encode()
    root = parser().parse(src).root_node
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
    if "shared_memory" in techniques and _any(s.tokens, "__syncthreads"):
        return "shared_memory_tree"
    if "atomics" in techniques:
        return "atomic"
    if any(c in s.calls for c in ("tl.sum", "tl.max", "tl.min", "tl.reduce", "tl.argmax")):
        return "tl_reduce"
    return None


def _block_size(entry: dict, binding: dict, code: str) -> int | None:
    args = binding.get("harness_args") or {}
    for key in ("block", "threads", "block_size"):
        if isinstance(args.get(key), int):
            return args[key]
    m = re.search(r"\((\d+)", entry.get("launch_bounds") or "") or \
        re.search(r"__launch_bounds__\s*\(\s*(\d+)", code)
    return int(m.group(1)) if m else None


def _dtypes(record) -> list[str]:
    binding = record.binding or {}
    if binding.get("dtypes"):
        return list(binding["dtypes"])
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


def extract(record) -> dict:
    """The feature dict describe stores and the fidelity check compares against."""
    lang = "triton" if record.language == "triton" else "cuda"
    src = _triton_source(record.code) if lang == "triton" else _cuda_source(record.code)
    techniques = {name for name, fn in DETECTORS[lang].items() if fn(src)}
    feats = {
        "language": record.language,
        "kernel": record.name,
        "techniques": sorted(techniques),
        "reduction": _reduction(src, techniques),
        "block_size": _block_size(record.entry, record.binding or {}, record.code),
        "templated": bool(record.entry.get("template")),
        "dtypes": _dtypes(record),
        "accumulate_type": _any(src.tokens, "acc_type", "accscalar_t", "opmath_t", "acc_t", "accscalar_t"),
    }
    if lang == "triton":
        feats.update(_triton_meta(record.code))
    return feats
