"""A file's own CPU reference, called through the file's own host launcher: the trials' plans.

Repos such as llm.c's `dev/cuda` keep, next to each kernel, a host launcher
(`gelu_forward1(out, inp, N, block_size)`) and a CPU function computing the same thing
(`gelu_forward_cpu(out, inp, N)`). Harvest finds the pair (`cuda_extract.file_reference`:
the launcher's signature is the CPU one's plus trailing block-size ints) and stores in
`entry["file_reference"]` what binding needs: both signatures, the CPU function's code,
`main()`'s scalar definitions, how main() fills each array the CPU call takes (generator,
size expression) and its `block_sizes[]`. The `file_reference` binder
(sftbuild.bind.binders.file_reference) turns that into a binding with
`how: file_reference`, validated by the `file_reference` harness and the file-reference
trials (`trial/trials.py`): call the launcher, and compare what it wrote with the CPU
function run on host copies of the same inputs, by main()'s own acceptance test for that array
where it can be read (`ref["acceptance"]`, sftbuild.trial.acceptance), else by the trials'
default tolerance.

The helpers below are pure (no torch) so sizes can be planned and tested anywhere:
`evaluate` reads a C integer expression over main()'s scalars, `plans` shrinks main()'s
large literal sizes so trials run fast, keeping the divisibility the file implies.
"""
from __future__ import annotations

import math
import re

from sftbuild.parsing import evaluate, param_info
from sftbuild.trial.element_types import dtype_of

MAX_ELEMENTS = 1 << 22  # all buffers of one trial together
MAX_SCRATCH = 1 << 26  # the launcher's device-only scratch buffers together (zeros, no CPU work)
SHRINKABLE = 16  # main() literals at least this big are sizes the trials may shrink
TILES = (128, 64)  # the divisibility shrunk sizes keep: a matmul's 128-wide tile where sizes fit, else 64
# cudaDeviceProp fields a repo's setup copies into globals (llm.c's common.h: cuda_num_SMs, ...),
# with the values sizes are planned with where no device is at hand (an H100/H200)
DEVICE_FIELDS = {"multiProcessorCount": 132, "maxThreadsPerMultiProcessor": 2048, "major": 9, "minor": 0,
                 "warpSize": 32, "maxThreadsPerBlock": 1024}
# the same fields as torch.cuda.get_device_properties names them
TORCH_PROPERTIES = {"multiProcessorCount": "multi_processor_count",
                    "maxThreadsPerMultiProcessor": "max_threads_per_multi_processor", "major": "major",
                    "minor": "minor", "warpSize": "warp_size", "maxThreadsPerBlock": "max_threads_per_block"}


def device_fields(dev) -> dict:
    """DEVICE_FIELDS' values on torch device `dev` ({} off a GPU, where the defaults hold)."""
    if dev.type != "cuda":
        return {}
    import torch

    p = torch.cuda.get_device_properties(dev)
    return {field: getattr(p, attr) for field, attr in TORCH_PROPERTIES.items() if getattr(p, attr, None) is not None}


def element_dtypes(launch: list[dict], texts: list[str]) -> list[str]:
    """The dtypes of the launcher's array arguments (its `slots`) as the file builds them (a `floatX*`
    is bf16 where the file defines ENABLE_BF16 for its header), in argument order; float32 where none
    resolves."""
    out = []
    for s in launch:
        if s.get("kind") == "ptr":
            dtype = dtype_of(s.get("ltype") or "", texts)
            if dtype and dtype not in out:
                out.append(dtype)
    return out or ["float32"]


def device_globals(texts: list[str]) -> dict[str, str]:
    """Integer globals a repo's setup fills from its device's properties ({name: cudaDeviceProp field}):
    `int cuda_num_SMs = 0;` at file scope, then `cuda_num_SMs = deviceProp.multiProcessorCount;`.
    The harness fills them as that setup would before calling the launcher (which sizes its grid and
    scratch with them), and sizes are planned with the device's values."""
    text = "\n".join(texts)
    declared = set(re.findall(r"(?m)^(?:static\s+)?(?:unsigned\s+)?int\s+(\w+)\s*(?:=\s*[-\w]+\s*)?;", text))
    props = set(re.findall(r"\bcudaDeviceProp\s+(\w+)\s*;", text))
    fields = "|".join(DEVICE_FIELDS)
    out = {}
    for name, var, field in re.findall(rf"(?m)^\s*(\w+)\s*=\s*(\w+)\s*\.\s*({fields})\s*;", text):
        if name in declared and var in props:
            out.setdefault(name, field)
    return out


def kernel_reads(params: list[str]) -> list[str]:
    """Names of the kernel's pointer parameters declared const: arrays it only reads."""
    return [p["name"] for p in map(param_info, params) if p and p["ptr"] and p["const"]]


def slots(ref: dict) -> list[dict]:
    """Where the harness finds each leading launcher argument: {kind: ptr, slot, ltype, ctype, const}
    (slot: the CPU call's pointers in order, then the scratch buffers), {kind: int|float, slot} (the
    CPU call's scalars of that kind in order, then the sizes main() passes beyond them, `exprs`)."""
    cpu = ref["cpu_params"]
    ptr_slot, int_slot, float_slot = {}, {}, {}
    for i, c in enumerate(cpu):
        table = ptr_slot if c["ptr"] else int_slot if c["kind"] == "int" else float_slot
        table[i] = len(table)
    out, scratch = [], len(ptr_slot)
    extra = {"int": len(int_slot), "float": len(float_slot)}  # sizes main() passes beyond the CPU call's
    for m, g in zip(ref.get("launcher_map") or [{"cpu": i} for i in range(len(cpu))], ref["launcher_params"]):
        if "expr" in m:
            kind = "int" if g["kind"] == "int" else "float"
            out.append({"kind": kind, "slot": extra[kind], "ltype": g["type"]})
            extra[kind] += 1
        elif "scratch" in m:
            out.append({"kind": "ptr", "slot": scratch, "ltype": g["type"], "ctype": "float", "const": g["const"]})
            scratch += 1
        elif g["ptr"]:
            out.append({"kind": "ptr", "slot": ptr_slot[m["cpu"]], "ltype": g["type"], "ctype": cpu[m["cpu"]]["type"],
                        "const": g["const"]})
        else:
            out.append({"kind": g["kind"], "slot": (int_slot if g["kind"] == "int" else float_slot)[m["cpu"]],
                        "ltype": g["type"]})
    return out


def global_slots(ref: dict) -> list[dict]:
    """Where the harness finds each file-scope device buffer main() allocates (harvest's
    `device_buffers`): {name, type, slot}, slots after the launcher's scratch buffers. The harness
    points the global at its buffer before the launcher call and back at NULL after it."""
    first = sum(1 for c in ref["cpu_params"] if c["ptr"]) + sum(1 for m in ref.get("launcher_map") or []
                                                                if "scratch" in m)
    return [{"name": b["name"], "type": b["type"], "slot": first + i}
            for i, b in enumerate(ref.get("device_buffers") or [])]


def scratch_names(ref: dict) -> list[str]:
    """Names of the device-only buffers in slot order: the launcher's scratch parameters, then the
    file-scope device buffers."""
    lp = ref["launcher_params"]
    own = [g["name"] for m, g in zip(ref.get("launcher_map") or [], lp) if "scratch" in m]
    return own + [b["name"] for b in ref.get("device_buffers") or []]


def scratch_zeroed(ref: dict) -> list[bool]:
    """Per device-only buffer (`scratch_names`' order): whether main() clears it before the launcher
    calls, so each call starts from zeros (else only the first does, as from a fresh allocation)."""
    own = list(ref.get("zeroed") or [])
    own += [False] * (sum(1 for m in ref.get("launcher_map") or [] if "scratch" in m) - len(own))
    return own + [bool(b.get("zeroed")) for b in ref.get("device_buffers") or []]


def roles(ref: dict) -> list[str]:
    """Per CPU pointer argument: input | staged | output | inout (what the launcher does with it, and
    whether main() fills it first), host (the launcher does not take it) or null (main() passes NULL).
    `staged`: the launcher only reads an array the CPU function may write (one step of a larger CPU
    function, e.g. a softmax backward that reads the `datt` the CPU computed first): the launcher gets
    the CPU's final values, so both sides start the step from the same data. The launcher only reads
    it when it takes it const, or passes it to a kernel that declares it const (`kernel_reads`)."""
    cpu = ref["cpu_params"]
    fed = {m["cpu"]: g for m, g in zip(ref.get("launcher_map") or [{"cpu": i} for i in range(len(cpu))],
                                       ref["launcher_params"]) if "cpu" in m}
    out = []
    for i, b in zip([i for i, c in enumerate(cpu) if c["ptr"]], ref["buffers"]):
        g = fed.get(i)
        reads = g is not None and (g["const"] or g.get("name") in (ref.get("kernel_reads") or ()))
        out.append("null" if b["gen"] == "null" else "host" if g is None
                   else ("input" if cpu[i]["const"] else "staged") if reads
                   else "output" if b["gen"] == "empty" else "inout")
    return out


def scalars(ref: dict, halvings: int = 0, device: dict | None = None, tile: int = 64) -> dict[str, float]:
    """main()'s scalars, literal sizes halved `halvings` times (all together) while each stays a
    multiple of the power of two it already is (up to `tile` for sizes from 4 * `tile`, up to 64
    for sizes from 256, up to 8 below); the
    device globals (`device_globals`) take `device`'s values ({cudaDeviceProp field: value}), else
    DEVICE_FIELDS'."""
    device = {**DEVICE_FIELDS, **(device or {})}
    env: dict[str, float] = {name: device[field] for name, field in (ref.get("device_globals") or {}).items()}
    for name, expr, kind in ref.get("scalars") or []:
        try:
            v = evaluate(expr, env)
        except ValueError:
            continue
        if kind == "int":
            if not isinstance(v, int):
                continue
            if re.fullmatch(r"[\d\s*+()]+", expr) and v >= SHRINKABLE:
                # big sizes stay multiples of `tile` or 64 (warps, vector widths), small ones of 8:
                # a kernel may assume the divisibility main()'s sizes have
                unit = min(v & -v, tile if v >= 4 * tile else 64 if v >= 256 else 8)
                for _ in range(halvings):
                    nv = v // 2
                    if nv < unit or nv % unit:
                        break
                    v = nv
        env[name] = v
    return env


def _count(expr: str, env: dict) -> int | None:
    """An element count: the expression's value when it is a positive int, else None."""
    try:
        n = evaluate(expr, env)
    except ValueError:
        return None
    return n if isinstance(n, int) and n > 0 else None


def _scalar(expr: str, env: dict, kind: str) -> int | float | None:
    """A scalar argument's value as its C kind ("int" or "float"), else None (it cannot be evaluated)."""
    try:
        v = evaluate(expr, env)
    except ValueError:
        return None
    return int(v) if kind == "int" else float(v)


def plan(ref: dict, halvings: int, device: dict | None = None, tile: int = 64) -> dict | None:
    """One trial's sizes: {env, args (the CPU call's values), counts (elements per buffer)}."""
    env = scalars(ref, halvings, device, tile)
    args, counts = [], []
    bufs = iter(ref["buffers"])
    for p, a in zip(ref["cpu_params"], ref["call_args"]):
        if p["ptr"]:
            b = next(bufs)
            if b["gen"] == "null":
                counts.append(0)
                args.append(None)
                continue
            n = _count(b["size"], env)
            if n is None:
                return None
            counts.append(n)
            args.append(None)
        else:
            v = _scalar(a, env, p["kind"])
            if v is None:
                return None
            args.append(v)
    high = []
    for b in ref["buffers"]:
        if b["gen"] == "int":
            try:
                high.append(int(evaluate(b["high"], env)))
            except ValueError:
                return None
        else:
            high.append(None)
    scratch = []
    sizes = [m["scratch"] for m in ref.get("launcher_map") or [] if "scratch" in m]
    for size in sizes + [b["size"] for b in ref.get("device_buffers") or []]:
        n = _count(size, env)
        if n is None:
            return None
        scratch.append(n)
    exprs = []  # what main() passes for launcher sizes the CPU call does not take, in launcher order
    for m, g in zip(ref.get("launcher_map") or [], ref["launcher_params"]):
        if "expr" in m:
            v = _scalar(m["expr"], env, g["kind"])
            if v is None:
                return None
            exprs.append(v)
    prepare = None
    if ref.get("prepare"):
        prepare = {"counts": [], "args": []}
        for b in ref["prepare"]["extra"]:
            n = _count(b["size"], env)
            if n is None:
                return None
            prepare["counts"].append(n)
        for q, a in zip(ref["prepare"]["params"], ref["prepare"]["args"]):
            if not q["ptr"]:
                v = _scalar(a, env, q["kind"])
                if v is None:
                    return None
                prepare["args"].append(v)
    return {"env": env, "args": args, "counts": counts, "scratch": scratch, "high": high, "halvings": halvings,
            "prepare": prepare, "exprs": exprs}


def launcher_scalars(ref: dict, p: dict) -> tuple[list, list]:
    """The harness's ints and floats for plan `p`: the CPU call's scalars of each kind in order,
    then the sizes main() passes beyond them (`slots`)."""
    ints = [a for a, c in zip(p["args"], ref["cpu_params"]) if c["kind"] == "int"]
    floats = [a for a, c in zip(p["args"], ref["cpu_params"]) if c["kind"] == "float"]
    kinds = [g["kind"] for m, g in zip(ref.get("launcher_map") or [], ref["launcher_params"]) if "expr" in m]
    for v, k in zip(p.get("exprs") or [], kinds):
        (ints if k == "int" else floats).append(v)
    return ints, floats


def prepare_arrays(ref: dict) -> list[tuple[str, int]]:
    """Where the earlier CPU step (harvest's `prepare_call`) finds each of its arrays, in its
    parameter order: ("host", i) for the reference call's i-th array, ("extra", j) for the j-th array
    only it takes."""
    ptr_args = [a for a, c in zip(ref["call_args"], ref["cpu_params"]) if c["ptr"]]
    prep, out, j = ref["prepare"], [], 0
    for q, a in zip(prep["params"], prep["args"]):
        if q["ptr"]:
            if a in ptr_args:
                out.append(("host", ptr_args.index(a)))
            else:
                out.append(("extra", j))
                j += 1
    return out


def plans(ref: dict, count: int = 2, limit: int = MAX_ELEMENTS, device: dict | None = None) -> list[dict]:
    """`count` trial sizes: the largest whose buffers hold at most `limit` elements together (and
    scratch at most MAX_SCRATCH), then smaller ones (distinct). A `limit` below every size the file
    allows (a memcheck run's) gives its smallest size under MAX_ELEMENTS instead, so a small run
    still runs. Sizes keep the most divisibility that fits (TILES: a tiled matmul writes whole
    128-wide tiles, so shrinking a multiple of 128 to 192 would cut its last tile); `device`: see
    `scalars`. A size main() only runs at multiples of every block size it tries (`block_bound`)
    shrinks as the others do; `pairs` then gives each plan only the block sizes it is a multiple of
    (keeping it a multiple of main()'s largest block size instead would rarely fit: llm.c's
    attention_backward at T=1024 needs 150M elements)."""
    for tile in TILES:
        out = _plans(ref, count, limit, device, tile)
        if out:
            return out
    return []


def _plans(ref: dict, count: int, limit: int, device: dict | None, tile: int) -> list[dict]:
    out, seen, smallest = [], set(), None
    for h in range(0, 24):
        p = plan(ref, h, device, tile)
        if p is None:
            return []
        total = sum(p["counts"])
        if sum(p["scratch"]) > MAX_SCRATCH:
            continue
        if total <= MAX_ELEMENTS and (smallest is None or total < smallest[0]):
            smallest = (total, p)
        if total > min(limit, MAX_ELEMENTS):
            continue
        key = tuple(p["counts"]) + tuple(a for a in p["args"] if a is not None)
        if key in seen:
            break
        seen.add(key)
        out.append(p)
        if len(out) == count:
            break
    return out or ([smallest[1]] if smallest else [])


def block_sizes(ref: dict, count: int = 3, p: dict | None = None, bound_at: list[int] | None = None) -> list[int]:
    """Block sizes to try: the file's own `block_sizes[]` (smallest, middle, largest), else 128 and 256.
    With plan `p`, only those its block-bound sizes (`block_bound`, or the positions `bound_at` it
    gave) are multiples of, as main() pairs them: the usual picks that fit, then the largest others
    that fit, up to `count`; [] when none fits."""
    blocks = sorted(set(ref.get("block_sizes") or [])) or [128, 256]
    picks = blocks if len(blocks) <= count else sorted({blocks[0], blocks[len(blocks) // 2], blocks[-1]})
    if p is None:
        return picks
    sizes = _int_sizes(ref, p)
    at = block_bound(ref) if bound_at is None else bound_at
    bound = [sizes[i] for i in at if i < len(sizes) and isinstance(sizes[i], int)]
    fits = [b for b in blocks if all(v % b == 0 for v in bound)]
    chosen = [b for b in picks if b in fits]
    for b in reversed(fits):
        if len(chosen) < count and b not in chosen:
            chosen.append(b)
    return sorted(chosen)


def pairs(ref: dict, plans_: list[dict], count: int = 3) -> list[tuple[dict, int]]:
    """The (plan, block size) pairs the trials run: each plan with the block sizes it fits
    (`block_sizes`)."""
    at = block_bound(ref)
    return [(p, block) for p in plans_ for block in block_sizes(ref, count, p, at)]


def _int_sizes(ref: dict, p: dict) -> list:
    """The integer sizes a launcher call gets in plan `p`, in one order: the CPU call's int scalars
    (None for its other arguments, so positions match `ref["call_args"]`), then the sizes main()
    passes beyond them."""
    out = [a if c["kind"] == "int" and not c["ptr"] else None for a, c in zip(p["args"], ref["cpu_params"])]
    kinds = [g["kind"] for m, g in zip(ref.get("launcher_map") or [], ref["launcher_params"]) if "expr" in m]
    return out + [v if k == "int" else None for v, k in zip(p.get("exprs") or [], kinds)]


def block_bound(ref: dict, device: dict | None = None) -> list[int]:
    """Positions (in `_int_sizes` order, Nones counted) of the integer sizes main() only ever runs at a
    multiple of every block size it tries with the launcher (its `block_sizes[]`): llm.c's
    attention_backward runs T=1024 with blocks 32 to 1024. A kernel may assume that divisibility (it
    writes whole blocks up to the next multiple), so a trial pairs such a size only with the block
    sizes it is a multiple of. [] when the launcher takes no block size or main() names none."""
    blocks = sorted(set(ref.get("block_sizes") or []))
    if not ref.get("trailing") or not blocks:
        return []
    unit = math.lcm(*blocks)
    p = plan(ref, 0, device)
    if p is None:
        return []
    return [i for i, v in enumerate(_int_sizes(ref, p)) if isinstance(v, int) and v > 0 and v % unit == 0]

