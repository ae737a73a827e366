"""Normalisation for hashing only: the emitted code is never touched.

A kernel is reduced to its token sequence: comments, docstrings and licence
headers go (they live in comments or docstrings), whitespace disappears, and
the code is split into words (``\\w+``) and single punctuation characters, case
kept. Operators stay as tokens because they are what tells ``a + b`` from
``a * b``.

The abstract view replaces the code's own identifiers by placeholders numbered
by first appearance, while keywords, builtin types, CUDA/Triton/PyTorch API
names, ``__``-prefixed intrinsics, vector types and member names (a word right
after ``.``) are kept: a copy whose variables were renamed has the same
abstract tokens as its original.
"""
from __future__ import annotations

import re

from sftbuild.parsing import PYTHON_LANGUAGES, strip_comments  # noqa: F401 (the one stripper, read here too)

_TOKEN = re.compile(r"\w+|[^\w\s]", re.A)

VERSION = 2  # bumped when what hashing sees changes: stored dedupe results are then recomputed


def tokens(code: str, language: str) -> list[str]:
    """The normalised token sequence of a kernel."""
    code = strip_comments(code, language)
    if language in PYTHON_LANGUAGES:
        code = strip_generated(code)
    return _TOKEN.findall(code)


_HEURISTICS = re.compile(r"@triton_heuristics\.\w+\(")
_PY_IMPORT = re.compile(r"^[ \t]*(?:import [\w., ]+|from [\w.]+ import (?:\([^)]*\)|[^\n]+))[ \t]*$", re.M)


def strip_generated(code: str) -> str:
    """What a generator writes around every kernel alike, which would make any two of its kernels look
    near-identical: import lines, and the metadata Inductor passes to `@triton_heuristics.*(...)`
    (signature, device properties, config flags: a dozen lines per kernel). The decorator's name stays."""
    code = _PY_IMPORT.sub(" ", code)
    if "@triton_heuristics." not in code:
        return code
    out, i = [], 0
    for m in _HEURISTICS.finditer(code):
        if m.start() < i:
            continue
        out.append(code[i:m.end() - 1])
        i = _close(code, m.end() - 1)
    out.append(code[i:])
    return "".join(out)


def _close(code: str, start: int) -> int:
    """The index just past the parenthesis that closes the one at `start` (strings skipped)."""
    depth, i, quote = 0, start, ""
    while i < len(code):
        c = code[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(code)


def normalize(code: str, language: str) -> str:
    """Tokens joined by single spaces: the text exact dedup compares."""
    return " ".join(tokens(code, language))


# ---- identifier abstraction ----------------------------------------------
_C_KEYWORDS = """
auto bool break case catch char class const constexpr continue default delete do double else enum
explicit extern false float for friend goto if inline int long namespace new noexcept nullptr
operator private protected public register reinterpret_cast return short signed sizeof static
static_cast const_cast dynamic_cast static_assert struct switch template this throw true try typedef
typename union unsigned using virtual void volatile while include define ifdef ifndef endif pragma
unroll once size_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t ptrdiff_t
std min max abs
"""
_CUDA_NAMES = """
threadIdx blockIdx blockDim gridDim warpSize dim3 half half2 nv_bfloat16 nv_bfloat162 bfloat16
atomicAdd atomicMax atomicMin atomicCAS atomicExch atomicSub atomicAnd atomicOr atomicXor
expf exp exp2f logf log log2f sqrtf sqrt rsqrtf fabsf fabs fmaxf fminf fmaf tanhf tanh sinf cosf
powf erff erf floorf ceilf roundf truncf isnan isinf make_float2 make_float4 make_int2 make_int4
cudaStream_t cudaError_t cudaSuccess cudaMalloc cudaFree cudaMemcpy cudaMemset cudaGetLastError
cudaDeviceSynchronize cudaMemcpyHostToDevice cudaMemcpyDeviceToHost cooperative_groups
thread_block tiled_partition this_thread_block shfl_down shfl_xor
wmma fragment load_matrix_sync store_matrix_sync mma_sync fill_fragment matrix_a matrix_b
accumulator row_major col_major
torch Tensor at TORCH_CHECK AT_DISPATCH_FLOATING_TYPES AT_DISPATCH_FLOATING_TYPES_AND_HALF
data_ptr numel size stride empty empty_like zeros zeros_like ones options device dtype
scalar_t kFloat kHalf kBFloat16 PYBIND11_MODULE TORCH_EXTENSION_NAME
"""
_PY_KEYWORDS = """
False None True and as assert async await break class continue def del elif else except finally
for from global if import in is lambda nonlocal not or pass raise return try while with yield
self super range len int float bool str list tuple dict print isinstance enumerate zip min max
abs sum __init__ forward nn Module ModelNew Model get_inputs get_init_inputs load_inline
cpp_sources cuda_sources functions verbose extra_cuda_cflags extra_cflags name randn rand cuda
"""
_TRITON_NAMES = """
triton tl jit autotune Config heuristics constexpr program_id num_programs arange load store
zeros full dot sum max min argmax argmin exp exp2 log log2 sqrt rsqrt sigmoid softmax where
maximum minimum abs cdiv next_power_of_2 atomic_add atomic_max atomic_min atomic_cas atomic_xchg
broadcast_to reshape view trans expand_dims cumsum num_warps num_stages BLOCK_SIZE float16
float32 bfloat16 int32 int64 float8e4nv multiple_of max_contiguous static_range cast to fma
libdevice math debug_barrier mask other eviction_policy cache_modifier
"""
KEPT_WORDS = frozenset((_C_KEYWORDS + _CUDA_NAMES + _PY_KEYWORDS + _TRITON_NAMES).split())
_VECTOR_TYPE = re.compile(r"(?:u?char|u?short|u?int|u?long|longlong|float|double|half|bfloat16)[1-4]\Z")


def is_kept_word(tok: str) -> bool:
    """True for words the abstraction keeps; False for the code's own identifiers."""
    c = tok[0]
    if not (c.isalpha() or c == "_"):
        return True  # punctuation and numbers
    return (tok in KEPT_WORDS or tok.startswith("__") or tok.startswith("cuda")
            or _VECTOR_TYPE.match(tok) is not None)


def abstract_tokens(toks: list[str]) -> list[str]:
    """Identifiers become ``$0, $1, ...`` numbered by first appearance (reference version).

    The vectorised signature code does the same on token hashes; tests check they agree.
    """
    names: dict[str, str] = {}
    out = []
    prev = ""
    for t in toks:
        if prev != "." and not is_kept_word(t):
            t = names.setdefault(t, f"${len(names)}")
        out.append(t)
        prev = t
    return out
