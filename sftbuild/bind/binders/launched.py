"""Bindings found by probing a CUDA record's host launcher: raw pointers and sizes, called from a harness.

Invariants:
  * `bind` answers None: only agreement on a GPU makes a binding (plan -> probe -> accept).
  * A launcher is probed when harvest found one for the record (`entry["launcher"]`: one launching its
    kernel and no other; else one launching the record's kernels together, `launches`; else one of
    harvest's own for a flat kernel, `generated`), and each of its parameters has a role (`roles`):
    a pointer (an input when `const`, else a written buffer: an output), a size, a float scalar, a
    stream or a block size.
  * Every written buffer is an output: the op's outputs are compared where the op defines them, the
    rest get scratch buffers (llm.c's `layernorm_forward` writes mean and rstd beside `out`).
  * The probe harness (`probe_harness`) calls the launcher with the pointers, sizes and scalars in
    its own order; which tensor and dimension each takes is decided by the probe (`mappings`), by
    name and role first, and kept as the binding's `harness_args` for the `host_launcher` harness.
  * The shortlist comes from the launcher's, kernel's and file's names, the registry's op names and
    aliases, and the data flow (an op is kept only when its inputs and outputs fit the pointers).
"""
from __future__ import annotations

import itertools
import re

from sftbuild import ops
from sftbuild.bind.binders import BINDERS, Binder
from sftbuild.bind.binders.probed import words
from sftbuild.bind.tasks import LauncherProbe
from sftbuild.parsing import param_info, split_args
from sftbuild.trial.launchers import (  # noqa: F401  (the probe's contract, shared with the harness)
    BLOCK, OUT_NAMES, STREAM_TYPES, STRIDE_TYPES, host_call_args as call_args, host_roles as roles)

PROBE_SECONDS = 180
SHORTLIST = 12
FLAT_FAMILIES = ("elementwise", "binary")
MAX_SIZE_MAPPINGS = 48  # size assignments tried per op and tensor mapping, best named first
PADDING = 4  # how many times its tensor's size the probe allocates each buffer: sizes stay within it
# size parameters by the dimension they usually name; `rows` is every dimension but the last
SIZE_ROLES = [
    (re.compile(r"^(c|channels?|cols|n_?cols|d|dim|d_?model|hidden(_size|_dim)?|k|in_features|head_dim|"
                r"intermediate(_size)?|features?)$", re.I), ("last",)),
    (re.compile(r"^(b|batch(_size)?|bs)$", re.I), ("first", "one")),
    (re.compile(r"^(t|seq(_len)?|l|len)$", re.I), ("second_last", "rows", "one")),
    (re.compile(r"^(v|vocab(_size)?|oc|out_features|p)$", re.I), ("out_last", "w_first", "last")),
    (re.compile(r"^(rows|n_?rows|m|num_rows|bt)$", re.I), ("rows",)),
    (re.compile(r"^(n|numel|count|size|num_elements|n_elements|total|len)$", re.I), ("numel", "rows", "last")),
    # a slice's stride (llm.c's `ptrdiff_t w_stride`): the whole buffer is one slice, or a row is one
    (re.compile(r"^(\w+_)?stride$", re.I), ("numel", "last")),
]
# pointer types that take an op's integer or bool tensor (token ids, masks), by any word of the type
INT_TYPES = {"int", "int32_t", "int64_t", "long", "unsigned", "uint32_t", "uint64_t", "int8_t", "uint8_t", "int16_t",
             "uint16_t", "short", "size_t", "char", "bool"}
DTYPES = {"float": ["float32"], "__half": ["float16"], "half": ["float16"], "__nv_bfloat16": ["bfloat16"],
          "nv_bfloat16": ["bfloat16"]}
REFUSED = -2  # a probe entry's answer where the launcher's own assert refused the sizes
DIVIDED_BY_ZERO = -3  # ... where the launcher's host code divided by zero at the sizes (SIGFPE)
# a host integer division by zero at a size guess (DeepSpeed's attn_softmax grid at a sequence of 1)
# answers DIVIDED_BY_ZERO instead of killing the probe's worker: the handler jumps back to the entry
FPE_GUARD = """#include <csetjmp>
#include <csignal>
static sigjmp_buf sftbuild_fpe_at;
static void sftbuild_on_fpe(int) { siglongjmp(sftbuild_fpe_at, 1); }
static void sftbuild_fpe_guard(struct sigaction* old) {
  struct sigaction sa = {};
  sa.sa_handler = sftbuild_on_fpe;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGFPE, &sa, old);
}"""
ANY_FLOAT = ["float32", "bfloat16", "float16"]  # a type the launcher's file names (`floatX`): the probe tries each


@BINDERS.register
class HostLauncher(Binder):
    """Call the record's host launcher (raw pointers and sizes) on each shortlisted op's inputs and keep
    the op its outputs match over >= 3 shapes (and every dtype its pointer types allow)."""
    name = "host_launcher"
    version = 2
    order = 85
    languages = ("cuda",)
    task_fn = "sftbuild.bind.launcher_probe:probe"

    def why_not(self, record) -> str:
        launcher = (record.entry or {}).get("launcher")
        if not launcher:
            return "no host function launches this kernel alone"
        return unprobeable(launcher) or ""

    def plan(self, record, seconds: float = PROBE_SECONDS) -> LauncherProbe | None:
        launcher = (record.entry or {}).get("launcher")
        if record.language != "cuda" or not launcher or unprobeable(launcher):
            return None
        found = roles(launcher["params"], written(record) or None)  # none seen: const-ness decides
        candidates = shortlist(record, found)
        if not candidates:
            return None
        entry = record.entry
        dtypes = dtypes_of(found, launcher)
        # one harness for every dtype, and one per dtype for where not every instantiation compiles
        harnesses = {d: probe_harness(launcher, found, [d]) for d in dtypes} if len(dtypes) > 1 else {}
        return LauncherProbe(id=record.id, code=record.code, harness=probe_harness(launcher, found, dtypes),
                             harnesses=harnesses, roles=found, shortlist=candidates, dtypes=dtypes, shapes=3,
                             time_limit=seconds, kernels=entry.get("kernels") or [],
                             headers=entry.get("headers") or {}, include_dirs=entry.get("include_dirs") or [],
                             include_sets=entry.get("include_sets") or [])

    def accept(self, record, result) -> dict | None:
        if not isinstance(result, dict) or not result.get("binding"):
            return None
        ev = result.get("evidence") or {}
        return {**result["binding"], "how": "probed",
                "evidence": {k: ev.get(k) for k in ("shapes", "dtypes", "worst_error", "candidates_tried",
                                                    "candidates_rejected", "seconds") if ev.get(k) is not None}}


def written(record) -> set[str] | None:
    """The launcher's parameters that its kernel writes through: each argument of the launch, by the
    kernel parameter it lands in, which the kernel stores to (directly, or through a pointer it derives
    from it: llm.c's `floatX* o = out + idx * C; __stcs(o + c, ...)`). None when the launch is not found."""
    launcher, entry = record.entry["launcher"], record.entry
    kname = (entry.get("kernels") or [""])[0]
    m = re.search(rf"\b{re.escape(kname)}\s*(?:<[^;]*?>)?\s*<<<.*?>>>\s*\(", launcher["code"], re.S)
    args = split_args(launcher["code"], m.end(), "(<[", ")>]") if m else None
    kparams = [param_info(d) for d in entry.get("params") or []]
    if not args or len(args) != len(kparams) or any(p is None for p in kparams):
        return None
    mine = {r["name"] for r in roles(launcher["params"])}
    out = set()
    for arg, p in zip(args, kparams):
        if p["ptr"] and stores_to(record.code, p["name"]):
            out |= set(re.findall(r"[A-Za-z_]\w*", arg)) & mine
    return out


def stores_to(code: str, name: str) -> bool:
    """Whether `code` stores through pointer `name` or a pointer derived from it."""
    names, todo = {name}, [name]
    while todo:  # `T* o = name + k;`, `auto* row = (T*)name;`: derived pointers
        n = todo.pop()
        for m in re.finditer(rf"(?:\*|\bauto)\s*(\w+)\s*=\s*(?:(?:reinterpret|static|const)_cast\s*<[^;]*?>\s*)?"
                             rf"(?:\([^()]*\)\s*)*\(?\s*{re.escape(n)}\b", code):
            if m.group(1) not in names:
                names.add(m.group(1))
                todo.append(m.group(1))
    alt = "|".join(map(re.escape, names))
    store = (rf"\b(?:{alt})\s*\[[^;]*?\]\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)"  # p[i] = / p[i] +=
             rf"|(?:^|[;{{}})])\s*\*\s*\(?\s*(?:{alt})\b[^;=(){{}}]*\)?\s*[-+*/]?=(?!=)"  # *p = / *(p + i) =
             rf"|\b(?:__st\w+|atomic\w+|\w*store\w*|memcpy\w*)\s*(?:<[^;()]*>)?\s*\(\s*&?\s*\(?\s*(?:{alt})\b"
             rf"|\b(?:{alt})\s*\[[^;]*?\]\s*\.\s*\w+\s*=(?!=)")
    return re.search(store, code) is not None


def unprobeable(launcher: dict) -> str | None:
    """Why a launcher's signature cannot be called from generated tensors, or None."""
    found = roles(launcher.get("params") or [])
    other = [r["name"] or r["type"] for r in found if r["role"] == "other"]
    if any("Tensor" in r["type"] for r in found if r["role"] == "other"):
        return f"launcher {launcher['name']} takes tensors (an extension function): not called as a raw launcher"
    if other:
        return f"launcher {launcher['name']} takes a parameter with no role: {other[0]}"
    if not any(r["role"] == "out" for r in found):
        return f"launcher {launcher['name']} writes no pointer it is given"
    if not launcher.get("template") and not launcher.get("call") and \
            re.search(rf"template\s*<[^>]*>\s*[\w:<>\s*]*\b{re.escape(launcher['name'])}\s*\(", launcher["code"]):
        return f"launcher {launcher['name']} is a template over values"
    return None


def dtypes_of(found: list[dict], launcher: dict | None = None) -> list[str]:
    """The dtypes the launcher's pointers allow: their one floating type's; for a template over types,
    those it is instantiated with in its file (else each float dtype); each float dtype where the type
    is the file's own name (`floatX`) or the pointers mix types (the probe finds out)."""
    tparams = set((launcher or {}).get("template") or ())
    types = {r["type"] for r in found if r["role"] in ("in", "out") and r["type"] not in ("int", "long", "int64_t")}
    if tparams and types & tparams:
        made = [d for t in (launcher or {}).get("instantiated") or () for d in DTYPES.get(t, ())]
        return [d for d in ANY_FLOAT if d in made] or ANY_FLOAT
    known = [DTYPES[t] for t in types if t in DTYPES]
    if len(types) == 1 and known:
        return known[0]
    return ANY_FLOAT


CTYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}


def shortlist(record, found: list[dict], k: int = SHORTLIST) -> list[str]:
    """Candidate ops, best first: named like the launcher or kernel, then the registry's ranking by
    names and parameters, then the elementwise ops; kept only where the data flow fits (`fits_flow`)."""
    launcher = record.entry["launcher"]
    names = [launcher["name"], *(record.entry.get("kernels") or [])]
    path = ((record.provenance or {}).get("path") or "").rsplit("/", 1)[-1].split(".")[0]
    params = [r["name"] for r in found]
    ranked: list[str] = []
    for query in (launcher["name"], " ".join(names), " ".join([*names, path])):
        try:
            ranked += [n for n in ops.shortlist(query, params, k * 3, opdb=False) if n not in ranked]
        except Exception:
            continue
    have = {re.sub(r"\d+$", "", w) for n in names for w in words(n)}  # `fused_add2` names add
    named = [n for n in ops.all_ops() if words(n) and words(n) <= have]
    order = [n for n in dict.fromkeys(sorted(named, key=lambda n: -len(words(n))) + ranked)
             if fits_flow(ops.get(n), found)][:k // 2]
    # then by data flow alone: the elementwise ops whose inputs and outputs fit the pointers
    order += [n for n, op in ops.all_ops().items() if op.family in FLAT_FAMILIES and n not in order
              and fits_flow(op, found)]
    return order[:k]


def fits_flow(op, found: list[dict]) -> bool:
    """Whether the op's tensors can fill the launcher's pointers: as many inputs as const pointers, and
    no more outputs than written ones."""
    n_in = sum(r["role"] == "in" for r in found)
    n_out = sum(r["role"] == "out" for r in found)
    ins = len(op.io.get("inputs") or ())
    return not op.mutates and ins == n_in and op.outputs <= n_out


def probe_harness(launcher: dict, found: list[dict], dtypes: list[str]) -> str:
    """C++ that includes the record's code (`kernel.cuh`), then its launcher, and exports
    `sftbuild_raw_call_<dtype>(ptrs, ints, floats)` for each of `dtypes`: the launcher (instantiated at
    the dtype's C type, for a template over types) called with its pointers, sizes (and block sizes)
    and float scalars in its own parameter order; the stream is the default one."""
    tparams = launcher.get("template") or []
    # the launcher's own asserts (llm.c's `assert(N % (block_size * x128::size) == 0)`) refuse one try of
    # sizes (the entry returns REFUSED) rather than abort the probe's worker
    out = ['#include "kernel.cuh"', "struct sftbuild_refused {};", "#undef assert",
           "#define assert(e) ((e) ? (void)0 : throw sftbuild_refused())", launcher["code"], "#undef assert",
           FPE_GUARD]
    for dtype in dtypes:
        ctype = CTYPES[dtype]
        args, n = [], {"p": 0, "i": 0, "f": 0}
        for r in found:
            if r["role"] in ("in", "out"):  # a const parameter takes the pointer as it is
                args.append(f"({ctype if r['type'] in tparams else r['type']}*)ptrs[{n['p']}]")
                n["p"] += 1
            elif r["role"] in ("size", "block", "flag"):
                args.append(f"({r['type']})ints[{n['i']}]")
                n["i"] += 1
            elif r["role"] == "float":
                args.append(f"({r['type']})floats[{n['f']}]")
                n["f"] += 1
            else:
                args.append("sftbuild_stream")
        inst = f"<{', '.join([ctype] * len(tparams))}>" if tparams else ""
        name = launcher.get("call") or launcher["name"]  # a full specialization is called by its own name
        out.append(f'extern "C" int sftbuild_raw_call_{dtype}(void** ptrs, const long long* ints, '
                   f"const double* floats) {{\n  cudaStream_t sftbuild_stream = 0;\n"
                   f"  if (sigsetjmp(sftbuild_fpe_at, 1)) return {DIVIDED_BY_ZERO};\n"
                   "  struct sigaction sftbuild_old;\n  sftbuild_fpe_guard(&sftbuild_old);\n"
                   f"  try {{ {name}{inst}({', '.join(args)}); }} catch (sftbuild_refused&) {{\n"
                   f"    sigaction(SIGFPE, &sftbuild_old, nullptr);\n    return {REFUSED};\n  }}\n"
                   "  sigaction(SIGFPE, &sftbuild_old, nullptr);\n"
                   "  return (int)cudaGetLastError();\n}")
    return "\n".join(out) + "\n"


def mappings(found: list[dict], inputs: list[dict], outputs: list[dict], params: dict):
    """Ways to call the launcher with an op's tensors, best named first: dicts of
    {ptrs: ["t:k" | "scratch"], ints: [size expressions], floats: [values]}, where k counts the op's
    outputs then inputs (the `tensors` contract's order) and "scratch" is a written buffer the op
    does not define. Sizes whose product runs past PADDING times the largest tensor are left out
    (a launch past its buffers may fault the GPU for every later trial); those covering a tensor
    exactly come first.

    `inputs` and `outputs`: {name, shape} of the op's tensors (outputs unnamed); sizes are read from
    them (`dimension_values`), block sizes take 256, float scalars the op's parameter of their name."""
    outs = [r for r in found if r["role"] == "out"]
    ins = [r for r in found if r["role"] == "in"]
    floats = []
    for r in found:
        if r["role"] == "float":
            if r["name"] not in params:
                return
            floats.append(float(params[r["name"]]))
    # the op's first output goes to the written pointer named like an output, then in order
    out_order = sorted(range(len(outs)), key=lambda i: (not OUT_NAMES.match(outs[i]["name"]), i))
    out_slot = {i: f"t:{n}" for n, i in enumerate(out_order[:len(outputs)])}
    shapes = [_Shape(t["shape"]) for t in [*outputs, *inputs]]
    numels = {_numel(t.shape) for t in shapes}
    bound = PADDING * max(numels, default=1)  # the probe's buffers are PADDING times their tensors' size
    found_maps = []
    for rank, perm in enumerate(_input_orders(ins, inputs)):
        ptr_of = {}
        for i, r in enumerate(outs):
            ptr_of[id(r)] = out_slot.get(i, "scratch")
        for r, j in zip(ins, perm):
            ptr_of[id(r)] = f"t:{len(outputs) + j}"
        ptrs = [ptr_of[id(r)] for r in found if r["role"] in ("in", "out")]
        sizes = [r for r in found if r["role"] in ("size", "block", "flag")]
        first = inputs[perm[0]]["shape"] if perm else []
        choices = [["const:256"] if r["role"] == "block" else ["const:0", "const:1"] if r["role"] == "flag" else
                   [e for e in dimension_values(r["name"], first, len(outputs) + (perm[0] if perm else 0), inputs,
                                                outputs) if _names_a_dimension(e, shapes)]
                   for r in sizes]
        for n, ints in enumerate(itertools.islice(itertools.product(*choices), MAX_SIZE_MAPPINGS)):
            total = _numel([size_value(e, shapes) for e, r in zip(ints, sizes) if r["role"] == "size"])
            if total > bound:
                continue  # sizes past every buffer: the launcher would run off its memory
            # sizes that cover a tensor exactly first: a wrong guess past the buffers may fault the GPU
            found_maps.append(((total not in numels, rank, n), {"ptrs": ptrs, "ints": list(ints), "floats": floats}))
    for _, m in sorted(found_maps, key=lambda x: x[0]):
        yield m


class _Shape:
    def __init__(self, shape):
        self.shape = list(shape)


def _names_a_dimension(expr: str, shapes: list) -> bool:
    """Whether a size expression reads a tensor and dimension there are (a 0-d input has no last one)."""
    try:
        size_value(expr, shapes)
        return True
    except (IndexError, ValueError):
        return False


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _input_orders(ins: list[dict], inputs: list[dict]):
    """Permutations of the op's inputs onto the const pointers: by shared name first, then the rest."""
    def named(r, t):
        return r["name"].lower() == t["name"].lower() or r["name"].lower().startswith(t["name"].lower())

    def typed(r, t):  # token ids go to an integer pointer, values to a float one
        return "int" not in t or t["int"] == bool(set(r["type"].split()) & INT_TYPES)

    perms = list(itertools.permutations(range(len(inputs)))) if len(inputs) <= 4 else [tuple(range(len(inputs)))]
    perms = [p for p in perms if all(typed(r, inputs[j]) for r, j in zip(ins, p))]
    perms.sort(key=lambda p: (-sum(named(r, inputs[j]) for r, j in zip(ins, p)), p))
    return perms


def dimension_values(name: str, shape: list[int], t: int, inputs: list[dict], outputs: list[dict]) -> list[str]:
    """Size expressions for a size parameter, best named first: `dim:t:k` (tensor t's dimension k, t
    counting outputs then inputs as the `tensors` contract does; `t` here is the first pointer's
    input, of `shape`), `rows:t`, `numel:t`, `const:1`."""
    nd = len(shape)
    by_role = {"last": [f"dim:{t}:-1"], "first": [f"dim:{t}:0"] if nd >= 2 else [],
               "second_last": [f"dim:{t}:-2"] if nd >= 2 else [], "rows": [f"rows:{t}"], "numel": [f"numel:{t}"],
               "one": ["const:1"], "out_last": [f"dim:0:-1"] if outputs else [],
               "w_first": [f"dim:{t + 1}:0"] if len(inputs) > 1 else []}
    out: list[str] = []
    for pattern, wanted in SIZE_ROLES:
        if pattern.match(name):
            for role in wanted:
                out += [v for v in by_role[role] if v not in out]
            break
    rest = [f"numel:{t}", f"rows:{t}", *(f"dim:{t}:{k}" for k in range(nd)), "const:1"]
    return out + [v for v in rest if v not in out]


def size_value(expr: str, tensors: list) -> int:
    """The value of a size expression on the outputs-then-inputs tensors (anything with `.shape`)."""
    kind, *rest = expr.split(":")
    if kind == "const":
        return int(rest[0])
    shape = list(tensors[int(rest[0])].shape)
    if kind == "dim":
        return shape[int(rest[1])]
    if kind == "rows":
        n = 1
        for d in shape[:-1]:
            n *= d
        return n
    n = 1
    for d in shape:
        n *= d
    return n
