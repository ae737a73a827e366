"""Trial sizes past the example: element counts a size-specialised kernel cannot serve.

A kernel launched on a fixed grid with no stride loop is right up to its grid's capacity and
never writes the tail past it; the common capacities are 2^15, 2^16 and 2^20 elements. So
every candidate also runs on one size just past the largest of those caps that fits the
element budget, grown from the example (module pairs) or from the drawn pool shapes (ops,
harnesses), and the other variants use sizes of 1, primes and non-multiples of every block
size found in the candidate's code.

The work stays bounded: the grown size targets `ELEMENT_BUDGET` elements at most (2^21,
8 MiB per fp32 tensor), a grown module variant whose tensors come out larger than
`MAX_ELEMENTS` (2^22) is not used, and each candidate gets exactly one grown size.

  block_sizes(code)        block-size constants the code names (#define, constexpr, launches)
  past_caps(limit)         the element count just past the largest cap below `limit`
  grown_target(numel)      the element count a module pair's grown variant aims at
  awkward(v, blocks)       v nudged up to an odd value that is no multiple of any block size
  prime_below(v)           the largest prime at or below v
  grow_shape(shape, ...)   a pool shape grown past the caps, within the binding's constraints
  grow_constant(src, ...)  a reference source with one size constant grown past the caps
"""
from __future__ import annotations

import ast
import math
import re

CAPS = (1 << 15, 1 << 16, 1 << 20)  # grid capacities of common fixed-grid launches
ELEMENT_BUDGET = 1 << 21  # the grown size aims at no more elements than this per tensor
MAX_ELEMENTS = 1 << 22  # a grown module variant with a larger tensor is not used
GROWTH = 4  # a grown module variant is at least this many times the example

_BLOCK_NAME = r"[A-Z_]*(?:BLOCK|TILE|THREADS|WARPS?|TPB|NT|BS)[A-Z_0-9]*"
_PATTERNS = (
    re.compile(rf"#define\s+{_BLOCK_NAME}\s+\(?(\d+)"),  # #define BLOCK_SIZE 256
    re.compile(rf"\b{_BLOCK_NAME}\s*(?::\s*tl\.constexpr\s*)?=\s*(\d+)\b"),  # BLOCK = 1024, BLOCK: tl.constexpr = 64
    re.compile(rf"constexpr\s+\w+\s+{_BLOCK_NAME}\s*=\s*(\d+)"),  # constexpr int TILE = 16
    re.compile(r"<<<[^,>]*,\s*(\d+)\s*[,>]"),  # kernel<<<grid, 256>>>
    re.compile(r"\bdim3\s+\w+\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?(?:,\s*\d+\s*)?\)"),  # dim3 block(16, 16)
)


def block_sizes(code: str) -> set[int]:
    """Block-size-like constants in `code`: BLOCK_SIZE-style names (#define, assignments, tl.constexpr
    defaults, keyword arguments), C++ constexprs and literal launch block sizes; those above 1."""
    found: set[int] = set()
    for pat in _PATTERNS:
        for m in pat.finditer(code or ""):
            found.update(int(g) for g in m.groups() if g)
    return {b for b in found if 1 < b <= 1 << 16}


def past_caps(limit: int = ELEMENT_BUDGET) -> int:
    """One element past the largest cap below `limit` (2^20 + 1 under the budget); `limit` itself
    when no cap fits below it."""
    below = [c for c in CAPS if c < limit]
    return max(below) + 1 if below else max(1, limit)


def grown_target(numel: int, budget: int = ELEMENT_BUDGET) -> int:
    """The element count a module pair's grown variant aims at: past every cap that fits the budget and
    at least GROWTH times the example, within the budget; 0 when the example already fills it."""
    target = min(budget, max(past_caps(budget), GROWTH * numel))
    return target if target > numel else 0


def awkward(v: int, blocks=()) -> int:
    """`v` or the next value up that is odd and no multiple of any block size (1 stays 1)."""
    if v <= 1:
        return 1
    while v % 2 == 0 or any(b > 1 and v % b == 0 for b in blocks):
        v += 1
    return v


def prime_below(v: int) -> int:
    """The largest prime <= v (2 for anything smaller)."""
    for n in range(max(2, v), 1, -1):
        if all(n % d for d in range(2, math.isqrt(n) + 1)):
            return n
    return 2


def grow_shape(shape, cons: dict | None = None, limit: int = ELEMENT_BUDGET, blocks=()) -> tuple | None:
    """`shape` with one free axis grown so the element count passes `past_caps(limit)` and stays
    within `limit`: the outermost axis a binding does not fix (`dims`) nor bound (`max_dims`), and not
    the last axis when the binding caps its size (`max_cols`). None when no axis may grow or the result
    would not fit."""
    from sftbuild.ops import fits

    cons = cons or {}
    shape = tuple(shape)
    fixed = {int(a) for a in (cons.get("dims") or {})} | {int(a) for a in (cons.get("max_dims") or {})}
    if "max_cols" in cons and len(shape) > 1:
        fixed.add(len(shape) - 1)
    free = [a for a in range(len(shape)) if a not in fixed]
    target = past_caps(limit)
    if not free or target > limit:
        return None
    axis = free[0]
    rest = max(1, math.prod(s for i, s in enumerate(shape) if i != axis))
    size = awkward(-(-target // rest), blocks)
    grown = shape[:axis] + (size,) + shape[axis + 1:]
    if math.prod(grown) > limit:
        size = limit // rest
        grown = shape[:axis] + (size,) + shape[axis + 1:]
    if math.prod(grown) <= math.prod(shape) or not fits(grown, cons, limit):
        return None
    return grown


SKIP_NAMES = re.compile(r"kernel|stride|pad|dilation|group|head|channel|feature|dim_?head|in_|out_", re.I)


def size_constants(src: str, only=None) -> list[ast.Assign]:
    """Module-level `NAME = <int > 1>` assignments of a reference source (with `only`, those it names)."""
    tree = ast.parse(src)
    return [node for node in tree.body if isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant)
            and type(node.value.value) is int and node.value.value > 1
            and (only is None or node.targets[0].id in only)]


def replace_constant(src: str, node: ast.Assign, value: int) -> str:
    lines = src.splitlines(keepends=True)
    v = node.value.value
    lines[node.lineno - 1] = re.sub(rf"=\s*{v}\b", f"= {value}", lines[node.lineno - 1], count=1)
    return "".join(lines)


def grow_constant(src: str, numel: int, blocks=(), budget: int = ELEMENT_BUDGET, only=None,
                  numel_at=None) -> str | None:
    """The reference source with one size constant grown so its largest input passes the caps:
    a batch-like constant when there is one, else the largest that does not name a kernel, stride,
    padding or channel count. None when nothing can grow or the example already fills the budget.

    Without `numel_at` input sizes are assumed linear in the constant. `numel_at(src)` measures
    the largest input of a source (None: it cannot tell); with it the growth is fitted to how the
    inputs really scale (a square input grows with the constant's square), and a source whose
    inputs still come out past MAX_ELEMENTS, or no larger than the example, is not returned."""
    target = grown_target(numel, budget)
    consts = size_constants(src, only)
    if not target or not consts or numel <= 0:
        return None
    batch = [c for c in consts if "batch" in c.targets[0].id.lower()]
    plain = [c for c in consts if not SKIP_NAMES.search(c.targets[0].id)]
    pick = (batch or sorted(plain, key=lambda c: -c.value.value))[:1]
    if not pick:
        return None
    node = pick[0]
    v = node.value.value
    value = awkward(-(-target * v // numel), blocks)
    out = replace_constant(src, node, value)
    if numel_at is None:
        return out
    n = numel_at(out)
    if n is not None and n > budget:  # faster than linear: n ~ value^k, fitted from the two points
        k = math.log(n / numel) / math.log(value / v)
        value = awkward(int(v * (target / numel) ** (1 / k)), blocks)
        out = replace_constant(src, node, value)
        n = numel_at(out) if value > v else None
    return out if n is not None and numel < n <= MAX_ELEMENTS else None


def limit_for(max_numel: int | None, on_cpu: bool = False) -> int:
    """The element limit of grown sizes: the budget, a task's own cap, and 2^16 under the CPU
    interpreter (past 2^15 there; each program runs in Python)."""
    limit = min(ELEMENT_BUDGET, max_numel or ELEMENT_BUDGET)
    return min(limit, 1 << 16) if on_cpu else limit


def add_grown(shapes: list, cons: dict | None, limit: int, blocks=(), works=lambda shape: True) -> list:
    """`shapes` plus one grown past the caps from the largest of them (see `grow_shape`), unless one
    already passes them; `works(shape)` may refuse it (the op cannot make inputs of that shape)."""
    shapes = [tuple(s) for s in shapes]
    if not shapes or any(math.prod(s) >= past_caps(limit) for s in shapes):
        return shapes
    grown = grow_shape(max(shapes, key=math.prod), cons, limit, blocks)
    if grown is None or grown in shapes:
        return shapes
    try:
        ok = works(grown)
    except Exception:
        ok = False
    return shapes + [grown] if ok else shapes
