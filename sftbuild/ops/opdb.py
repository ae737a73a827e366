"""Ops backed by torch's own operator database (`torch.testing._internal.common_methods_invocations.op_db`).

Every op_db entry with float32, float16 or bfloat16 CUDA support whose sample inputs are plain
tensors becomes an op named `opdb.<name>[.<variant>]` (the prefix never clashes with a
hand-written op). Its reference is the entry's torch callable, run in float64 when the inputs
are float64 (float32 when the op has no float64 kernel); its input generator re-draws the entry's
`SampleInput`s on the CPU from the trial's seed and returns the one whose first tensor has the
pool shape, so it serves any device; the sample's non-tensor arguments travel in the params
(`call`), which the reference reads back. An elementwise op of one tensor (a unary ufunc) is also
offered at `ELEMENTWISE_SHAPES`, its inputs drawn from a sample's values (so they stay in its domain).
An op whose samples show fewer than three shapes is also offered at its sample shapes scaled, every
size above 1 doubled and tripled (`scaled_shapes`), so a probe can confirm it over three shapes; its
inputs are the sample's, grown the same way with values drawn from its own, and its call (dims,
indices, sizes) is kept, so a scaled sample whose call no longer fits makes the reference raise and
the shape is not used. Tolerance comes from the dtype, widened for long
accumulations (reductions, scans, losses x2; matmul, conv, attention x4) as the hand-written
families are; samples on which torch's own float32 result misses the float32 policy are dropped.

Loading is lazy and deterministic: nothing here imports op_db until `load()` (called by
`ops.get("opdb....")`, `ops.all_ops(opdb=True)` or `sftbuild list op`). The first load scans
op_db once (sample shapes, output counts, what is skipped and why) and caches the result per
torch version under $SFTBUILD_CACHE or ~/.cache/sftbuild; later loads only import op_db.
Hand-written ops win: an entry whose last name component is a hand-written op is skipped.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
import sys
import types
import unittest
import warnings
from pathlib import Path

import torch
from torch.utils import _pytree as pytree

from sftbuild.ops import DTYPES, Op, Tolerance

PREFIX = "opdb."
FORMAT = 7
MAX_SAMPLES = 12  # distinct primary shapes kept per op
MAX_EXAMINED = 60  # samples examined per op while building the catalogue
MAX_NUMEL = 1 << 22
# shapes an elementwise op (op_db's unary ufuncs, whose samples are mostly one small shape) is also
# checked at: odd sizes and sizes past a block, with values drawn from its own samples
ELEMENTWISE_SHAPES = [(7, 33), (64, 129), (3, 17, 65), (1000,), (257, 515)]
# an op whose samples have fewer than MIN_POOL distinct shapes (mm's one, (S, M) x (M, S)) is also
# offered at them scaled: every size above 1 times each of SCALES, sizes that must agree still agree
MIN_POOL, SCALES, MAX_SCALED = 3, (2, 3), 1 << 22

OPS: dict[str, Op] = {}
SKIPPED: dict[str, str] = {}  # op_db entry name -> why it has no op
UNAVAILABLE: list[str] = []  # why op_db could not be loaded at all (a torch without its test modules)
_loaded = False

RANDOM = ("bernoulli", "multinomial", "normal", "uniform", "rand", "dropout", "cauchy", "exponential", "geometric",
          "log_normal", "empty", "randn", "poisson", "rrelu")
SLOW_LINALG = re.compile(r"(^|_)(lu|svd|eig\w*|qr|cholesky|pinv\w*|inv|inverse|det|logdet|slogdet|lstsq|geqrf|ormqr|"
                         r"householder|solve|solve_ex|matrix_exp|matrix_power|matrix_rank|cond|tensorinv|tensorsolve|"
                         r"lowrank|symeig)(_|$)")
FAST_LINALG = {"linalg.vector_norm", "linalg.norm", "linalg.matrix_norm", "linalg.cross", "linalg.vecdot",
               "linalg.multi_dot", "linalg.diagonal", "linalg.vander"}
FAMILIES = [  # (family, name patterns), first match wins
    ("loss", r"loss|cross_entropy|kl_div|nll"),
    ("softmax", r"softmax|softmin"),
    ("attention", r"attention"),
    ("conv", r"conv|unfold|fold"),
    ("resample", r"pool|interpolate|upsample|grid_sample|pad|pixel_shuffle|pixel_unshuffle|affine_grid"),
    ("norm", r"^nn\.functional\.\w*norm|^native_\w*norm|batch_norm|layer_norm|group_norm|instance_norm|rms_norm"),
    ("matmul", r"(^|[._])(mm|bmm|addmm|addbmm|baddbmm|addmv|mv|addr|matmul|dot|vdot|inner|outer|linear|bilinear|"
               r"einsum|tensordot|kron|chain_matmul|multi_dot|cdist|pdist)($|[._])"),
    ("scan", r"^cum|logcumsumexp"),
    ("sort", r"sort|topk|kthvalue|unique|searchsorted|bucketize|histc|median|mode"),
    ("reduction", r"^(sum|prod|mean|amax|amin|max|min|std|var|argmax|argmin|all|any|norm|logsumexp|nansum|nanmean|"
                  r"count_nonzero|aminmax|var_mean|std_mean|linalg\.\w*norm|dist|renorm)($|\.)"),
    ("indexing", r"gather|scatter|index|take|embedding|masked|put|nonzero|select|narrow|where|diag|tril|triu"),
    ("layout", r"view|reshape|permute|transpose|^t$|^T$|^mT$|^mH$|^H$|cat|stack|flip|roll|rot90|split|chunk|squeeze|"
               r"expand|repeat|tile|flatten|movedim|swap|unbind|clone|contiguous|as_strided|broadcast|meshgrid|"
               r"column_stack|hstack|vstack|dstack|ravel|unflatten"),
]


def is_opdb(name: str) -> bool:
    return name.startswith(PREFIX)


def op_db() -> list:
    """torch's op_db. Its module imports `expecttest` (a test-only dependency) for a TestCase base
    class; where that is missing, unittest's TestCase stands in, which is all op_db needs.

    scipy stays hidden while op_db loads, where nothing has imported it yet: op_db takes from it only
    the numerical references of torch's own tests (`ref=scipy.special.erf`), which nothing here reads,
    and importing it was most of op_db's cost (4.4 -> 1.8 CPU-s in a worker that has torch loaded).
    The entries, their samples and their callables are the same without it."""
    if "expecttest" not in sys.modules:
        try:
            import expecttest  # noqa: F401
        except ImportError:
            shim = types.ModuleType("expecttest")
            shim.TestCase = unittest.TestCase
            sys.modules["expecttest"] = shim
    # once torch's test utilities are loaded they have decided whether scipy is there: leave it be
    hide = not any(m in sys.modules for m in ("scipy", "torch.testing._internal.common_utils"))
    if hide:
        sys.modules["scipy"] = None  # find_spec says "absent", an import raises ImportError
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_methods_invocations import op_db as db
    finally:
        if hide and "scipy" in sys.modules and sys.modules["scipy"] is None:
            del sys.modules["scipy"]  # a later `import scipy` (a candidate's, a reference's) works as before
    _no_test_lookup()
    return db


@functools.lru_cache(maxsize=1)
def aliases() -> dict[str, str]:
    """torch's other names for its ops, as op_db lists them: {"arctanh": "atanh", "absolute": "abs",
    "greater": "gt", "clip": "clamp", ...} (the op_db name, without prefix or variant); empty where
    op_db cannot be imported."""
    try:
        infos = op_db()
    except Exception:
        return {}
    out: dict[str, str] = {}
    for info in infos:
        for alias in getattr(info, "aliases", ()) or ():
            out.setdefault(alias.name, info.name)
    return out


def _no_test():
    return None


def _no_test_lookup() -> None:
    """op_db's sample iterators look for the unittest.TestCase running them, to note the input they
    are on, by reading every frame of the stack with its source (inspect.stack: a tenth of a second
    and more per draw, most of a draw's time). Samples here are drawn outside any TestCase, where that
    search finds none: its answer, None, is given at once, and the samples are the same."""
    import importlib

    for name in ("common_utils", "opinfo.core"):  # the latter imported the function by name
        mod = importlib.import_module(f"torch.testing._internal.{name}")
        if hasattr(mod, "extract_test_fn"):
            mod.extract_test_fn = _no_test


def full_name(info) -> str:
    return PREFIX + info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")


def load() -> dict[str, Op]:
    """Register every usable op_db entry (once per process); returns the opdb ops by name."""
    global _loaded
    if _loaded:
        return OPS
    _loaded = True
    from sftbuild import ops

    hand = set(ops.all_ops())
    try:
        infos = {full_name(i): i for i in op_db()}
    except Exception as e:  # torch's test modules are missing or broken here: no op_db ops, with the reason
        UNAVAILABLE.append(f"torch's op_db cannot be imported: {type(e).__name__}: {e}")
        return OPS
    cat = catalogue(infos)
    SKIPPED.update(cat["skipped"])
    for entry in cat["ops"]:
        if entry["name"] not in infos:
            continue
        covered = _covered(infos[entry["name"]], hand)
        if covered:
            SKIPPED[entry["name"]] = f"covered by the hand-written op {covered!r}"
            continue
        OPS[entry["name"]] = _op(infos[entry["name"]], entry)
    return OPS


def _covered(info, hand) -> str | None:
    """The hand-written op that computes what this entry does: same plain name, no variant."""
    if info.variant_test_name:
        return None
    name = info.name.removeprefix("nn.functional.")
    return name if name in hand else None


def counts() -> dict:
    """How many op_db entries became ops and how many were skipped, by reason."""
    load()
    why: dict[str, int] = {}
    for reason in SKIPPED.values():
        key = reason.split(":")[0] if not reason.startswith("covered") else "covered by a hand-written op"
        why[key] = why.get(key, 0) + 1
    return {"registered": len(OPS), "skipped": len(SKIPPED), "skipped_by_reason": dict(sorted(why.items()))}


# ---- the catalogue: one scan of op_db, cached per torch version ----------------------------------

def cache_path() -> Path:
    root = os.environ.get("SFTBUILD_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "sftbuild")
    return Path(root) / f"opdb-{FORMAT}-torch-{torch.__version__}.json"


SHIPPED = Path(__file__).with_name("opdb_catalogues")  # scans made for released torch versions


def shipped_path() -> Path:
    return SHIPPED / f"opdb-{FORMAT}-torch-{torch.__version__.split('+')[0]}.json"


def catalogue(infos: dict, rebuild: bool = False) -> dict:
    """The scan for this torch: the cached one, else the one shipped for its release, else a new scan
    (a minute of CPU), cached. `python -m sftbuild.ops.opdb --ship` writes the shipped file."""
    path = cache_path()
    for candidate, same in ((path, lambda v: v == torch.__version__),
                            (shipped_path(), lambda v: str(v).split("+")[0] == torch.__version__.split("+")[0])):
        if rebuild or not candidate.exists():
            continue
        try:
            cat = json.loads(candidate.read_text())
            if cat.get("format") == FORMAT and same(cat.get("torch")):
                return cat
        except (OSError, ValueError):
            pass
    cat = scan(infos)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cat, indent=0, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: scan again next time
    return cat


def scan(infos: dict) -> dict:
    """Decide, for every op_db entry in name order, whether it is an op and which samples it keeps."""
    out, skipped = [], {}
    for name in sorted(infos):
        info = infos[name]
        why = _skip_by_name(info)
        entry = None
        if not why:
            try:
                with warnings.catch_warnings():  # deprecations and beta notices from the sample calls
                    warnings.simplefilter("ignore")
                    entry, why = _scan_samples(info)
            except Exception as e:  # an entry whose samples cannot be drawn here: skipped, with the reason
                why = f"samples failed: {type(e).__name__}"
        if why:
            skipped[name] = why
        else:
            out.append({"name": name, **entry})
    return {"format": FORMAT, "torch": torch.__version__, "ops": out, "skipped": skipped}


def _dtypes(info) -> list[str]:
    have = {str(d).replace("torch.", "") for d in info.supported_dtypes("cuda")}
    return [d for d in DTYPES if d in have]


def _skip_by_name(info) -> str | None:
    n = info.name
    if n.startswith("_"):
        return "private or reflected operator: duplicates a public op"
    if n.endswith("_") or info.variant_test_name.endswith("_"):
        return "in-place variant"
    if "sparse" in n or "sparse" in info.variant_test_name:
        return "sparse layout"
    if any(t in n for t in RANDOM) or info.variant_test_name in ("with_train", "training"):
        return "random or uninitialised output"
    low = n.split(".")[-1]
    if (n.startswith("linalg.") and n not in FAST_LINALG) or SLOW_LINALG.search(low):
        return "linear-algebra decomposition or solve: slow, not a kernel target"
    if not _dtypes(info):
        return "no float32/float16/bfloat16 CUDA support"
    return None


def _leaves(sample) -> tuple[list, object]:
    return pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))


def _usable(t) -> bool:
    return (t.layout == torch.strided and not t.is_complex() and not t.requires_grad and not t.is_quantized
            and t.numel() <= MAX_NUMEL)


def _scan_samples(info):
    samples, other = draw(info, torch.float32, 0), draw(info, torch.float32, 1)
    kept, shapes, n_out, first_io, why = [], set(), None, None, "no sample of plain tensors"
    for i, s in enumerate(samples[:MAX_EXAMINED]):
        leaves, spec = _leaves(s)
        tens = [x for x in leaves if isinstance(x, torch.Tensor)]
        if not tens or not all(_usable(t) for t in tens):
            continue
        if any(isinstance(x, (torch.dtype, torch.device, torch.Generator)) or callable(x) for x in leaves
               if not isinstance(x, torch.Tensor)):
            continue  # dtypes and callables in the arguments cannot travel as plain params
        prim = tens[0]
        if prim.dim() == 0 or prim.numel() == 0 or tuple(prim.shape) in shapes:
            continue
        try:
            outs = _outputs(info, s, double=True)
        except Exception as e:
            why = f"reference failed on its samples: {type(e).__name__}"
            continue
        if outs is None:
            why = "returns something other than real tensors"
            continue
        if not _fits_float32(info, s, outs) or (i < len(other) and _prim_shape(other[i]) == tuple(prim.shape)
                                                and not _fits_float32(info, other[i])):
            why = "float32 result out of tolerance on its samples (ill-conditioned)"
            continue
        if n_out is None:
            again = _outputs(info, s, double=True, seed=1)
            if again is None or len(again) != len(outs) or not all(
                    a.shape == b.shape and torch.equal(a.nan_to_num(0.0) if a.is_floating_point() else a,
                                                       b.nan_to_num(0.0) if b.is_floating_point() else b)
                    for a, b in zip(outs, again)):
                return None, "random or uninitialised output: two runs differ"
            n_out, first_io = len(outs), (_names(s), [x for x in leaves], outs)
        if len(outs) != n_out:
            continue
        shapes.add(tuple(prim.shape))
        kept.append({"index": i, "shape": list(prim.shape)})
        if len(kept) >= MAX_SAMPLES:
            break
    if not kept:
        return None, why
    names, leaves, outs = first_io
    tensors = [(nm, x) for nm, x in zip(names, leaves) if isinstance(x, torch.Tensor)]
    dtypes = [d for d in _dtypes(info) if d == "float32" or _draws_shapes(info, d, shapes)]
    if not dtypes:
        return None, "its float16/bfloat16 samples have other shapes and it has no float32 kernel"
    return {"samples": kept, "outputs": n_out, "dtypes": dtypes,
            "inputs": [_describe(nm, t) for nm, t in tensors],
            "outs": [_describe("out" if n_out == 1 else f"out{j}", o) for j, o in enumerate(outs)],
            "family": _family(info.name, tensors, outs)}, None


def _tolerance(family: str) -> Tolerance:
    """The dtype policy, widened like the hand-written families for long accumulations."""
    return Tolerance(scale={"reduction": 2.0, "scan": 2.0, "loss": 2.0, "norm": 2.0, "softmax": 2.0,
                            "matmul": 4.0, "conv": 4.0, "attention": 4.0}.get(family, 1.0))


def _fits_float32(info, sample, ref64=None) -> bool:
    """Whether torch's own float32 result meets the float32 policy on this sample (a product that
    underflows in float32, say, is a sample no kernel can pass); checked on two draws of each sample."""
    from sftbuild.ops.tolerance import compare

    try:
        ref64 = ref64 if ref64 is not None else _outputs(info, sample, double=True)
        outs = _outputs(info, sample)
    except Exception:
        return False
    if ref64 is None:
        return False
    tol = _tolerance(_family(info.name, [], []))
    return outs is not None and len(outs) == len(ref64) and all(
        compare(o, r, "float32", tol, native=o)[0] for o, r in zip(outs, ref64))


def _draws_shapes(info, dtype: str, shapes: set) -> bool:
    """Whether the entry's samples at `dtype` have every kept shape (half FFTs, say, take other sizes)."""
    from sftbuild.ops.pools import TORCH_DTYPES

    try:
        have = {_prim_shape(s) for s in draw(info, TORCH_DTYPES[dtype], 0)[:MAX_EXAMINED]}
    except Exception:
        return False
    return shapes <= have


def _names(sample) -> list[str]:
    """One name per pytree leaf of (input, args, kwargs): input, arg1.., or the keyword."""
    names = []
    for label, part in [("input", sample.input)] + [(f"arg{i + 1}", a) for i, a in enumerate(sample.args)] + \
            [(k, v) for k, v in sample.kwargs.items()]:
        n = len(pytree.tree_leaves(part))
        names += [label] if n == 1 else [f"{label}[{j}]" for j in range(n)]
    return names


def _describe(name: str, t: torch.Tensor) -> str:
    kind = "" if t.is_floating_point() else f" {str(t.dtype).replace('torch.', '')}"
    return f"{name}: {list(t.shape)}{kind} (one sample's shape; shapes vary)"


def _family(name: str, tensors, outs) -> str:
    for fam, pat in FAMILIES:
        if re.search(pat, name):
            return fam
    if len(outs) == 1 and tensors and outs[0].shape == tensors[0][1].shape:
        return "elementwise" if len(tensors) == 1 else "binary"
    return "torch_op"


def _outputs(info, sample, double=False, seed=0):
    leaves, spec = _leaves(sample)
    tens = [x for x in leaves if isinstance(x, torch.Tensor)]
    ins = [t.double() if double and t.is_floating_point() else t for t in tens]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        res = _reference(info)(*ins, call=_call(leaves, spec))
    outs = list(res) if isinstance(res, tuple) else [res]
    if not outs or not all(isinstance(o, torch.Tensor) and o.layout == torch.strided and not o.is_complex()
                           for o in outs):
        return None
    return outs


# ---- the op ------------------------------------------------------------------------------------

def _reference(info):
    f64 = torch.float64 in info.supported_dtypes("cpu") and torch.float64 in info.supported_dtypes("cuda")

    def reference(*inputs, call=None, **_):
        if call is None:
            raise ValueError(f"{full_name(info)}: the reference needs the `call` params its input generator sets")
        down = not f64 and any(t.dtype == torch.float64 for t in inputs)
        args, kwargs = rebuild([t.float() if down and t.dtype == torch.float64 else t for t in inputs], call)
        x, args = args[0], args[1:]
        with warnings.catch_warnings():  # deprecation and beta notices, once per call otherwise
            warnings.simplefilter("ignore")
            res = info.op(x, *args, **kwargs)
        outs = pytree.tree_leaves(res) if isinstance(res, (tuple, list)) else [res]
        if down:
            outs = [o.double() if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in outs]
        return tuple(outs) if len(outs) > 1 else outs[0]
    return reference


def elementwise(info, entry) -> bool:
    """An elementwise op of one tensor (op_db's UnaryUfuncInfo): any shape is one of its samples."""
    return type(info).__name__ == "UnaryUfuncInfo" and len(entry["inputs"]) == 1 and entry["outputs"] == 1


def _tiled(x: torch.Tensor, shape: tuple, gen) -> torch.Tensor:
    """A tensor of `shape` whose values are drawn (with replacement) from sample tensor `x`, so they
    stay in the op's domain."""
    flat = x.reshape(-1)
    idx = torch.randint(0, flat.numel(), (max(1, int(torch.tensor(shape).prod())),), generator=gen)
    return flat[idx].reshape(shape).clone()


def scaled_shapes(pool: list[tuple]) -> dict[tuple, tuple]:
    """Shapes for an op whose samples offer fewer than MIN_POOL distinct ones: each sample shape with
    every dimension above 1 multiplied by a factor in SCALES -> (the sample shape, the factor)."""
    if len(set(pool)) >= MIN_POOL:
        return {}
    out: dict[tuple, tuple] = {}
    for shape in dict.fromkeys(pool):
        for k in SCALES:
            grown = tuple(d * k if d > 1 else d for d in shape)
            if grown != shape and grown not in pool and math.prod(grown) <= MAX_SCALED:
                out.setdefault(grown, (shape, k))
    return out


def _scaled(x: torch.Tensor, k: int, gen) -> torch.Tensor:
    """Sample tensor `x` with every dimension above 1 multiplied by k, its values drawn from x's own
    (indices stay in range, values in the op's domain)."""
    return _tiled(x, tuple(d * k if d > 1 else d for d in x.shape), gen) if x.numel() else x.clone()


def _inputs(info, entry):
    by_shape = {tuple(s["shape"]): s["index"] for s in entry["samples"]}
    tile = elementwise(info, entry)
    scaled = {} if tile else scaled_shapes([tuple(s["shape"]) for s in entry["samples"]])

    def make_inputs(shape, dtype, layout, gen, params):
        from sftbuild.ops.pools import TORCH_DTYPES

        if tuple(shape) in scaled:  # the sample at its own shape, every size above 1 times k, its call kept
            base, k = scaled[tuple(shape)]
            return [_scaled(x, k, gen) for x in make_inputs(base, dtype, layout, gen, params)]
        if tile and tuple(shape) not in by_shape and entry["samples"]:
            # an elementwise op at a shape its samples lack: a sample's values, drawn into that shape
            (x,) = make_inputs(entry["samples"][0]["shape"], dtype, layout, gen, params)
            return [_tiled(x, tuple(shape), gen)]
        samples = draw(info, TORCH_DTYPES[dtype], int(torch.randint(0, 2 ** 31 - 1, (1,), generator=gen)))
        want, idx, kept = tuple(shape), by_shape.get(tuple(shape)), params.get("call")
        pick = _pick(samples, idx, want, kept)
        if pick is None:  # this seed drew other shapes: the catalogue's own draw has them
            pick = _pick(draw(info, TORCH_DTYPES[dtype], 0), idx, want, kept)
        if pick is None:
            raise ValueError(f"{full_name(info)}: no sample input of shape {list(want)} for {dtype}"
                             + (" with the call of its first draw" if kept else ""))
        leaves, spec = _leaves(pick)
        if kept is None:
            params["call"] = _call(leaves, spec)
        return [x.detach().clone() for x in leaves if isinstance(x, torch.Tensor)]
    return make_inputs


def rebuild(inputs: list, call: tuple) -> tuple[list, dict]:
    """The sample's full call (positional args, keyword args) with `inputs` in its tensor slots:
    `call` is the `params["call"]` an op_db op's input generator sets. A harness that calls a
    candidate entry point the way torch's op is called (non-tensor arguments included) uses this."""
    spec, consts, slots = call
    it = iter(inputs)
    x, args, kwargs = pytree.tree_unflatten([next(it) if slot else c for c, slot in zip(consts, slots)], spec)
    return [x, *args], dict(kwargs)


def _call(leaves, spec) -> tuple:
    """How the reference rebuilds the sample's call: (pytree spec, non-tensor leaves, tensor slots)."""
    slots = tuple(isinstance(x, torch.Tensor) for x in leaves)
    return spec, tuple(None if t else x for x, t in zip(leaves, slots)), slots


def _pick(samples: list, idx: int | None, want: tuple, kept: tuple | None = None):
    """The catalogued sample (its index in the draw) where it has the shape, else the first of that shape.
    With `kept` (the call of the variant's first draw, whose non-tensor arguments every later draw of
    the variant keeps: sftbuild.trial.pyrun.OpProblem.inputs), only a sample whose call has the same
    structure and tensor slots fits."""
    def fits(s) -> bool:
        if _prim_shape(s) != want:
            return False
        if kept is None:
            return True
        spec, _, slots = _call(*_leaves(s))
        return spec == kept[0] and slots == kept[2]

    if idx is not None and idx < len(samples) and fits(samples[idx]):
        return samples[idx]
    return next((s for s in samples[:MAX_EXAMINED] if fits(s)), None)


def draw(info, dtype, seed: int) -> list:
    """The entry's CPU samples with values from `seed` (op_db reseeds each sample by default, which
    would give every trial the same values)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            return list(info.sample_inputs("cpu", dtype, set_seed=False))
        except TypeError:  # a torch whose sample iterator has no set_seed
            return list(info.sample_inputs("cpu", dtype))


def _prim_shape(sample):
    leaves, _ = _leaves(sample)
    first = next((x for x in leaves if isinstance(x, torch.Tensor)), None)
    return tuple(first.shape) if first is not None else None


def _callable_name(info) -> str:
    obj = torch
    for part in info.name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if obj is not None:
        return f"torch.{info.name}"
    return f"torch.Tensor.{info.name}" if hasattr(torch.Tensor, info.name) else info.name


# words that instructions read as claims about a kernel's technique (describe's fidelity check):
# a doc sentence that has one is left out rather than claim what the kernel may not do
TECHNIQUE_WORDS = re.compile(r"tensor core|mma\b|atomic|vectori[sz]ed|shared[- ]memory|warp|grid[- ]stride|autotun|"
                             r"\bCUB\b|cooperative|launch bounds|masked loads|cp\.async|asynchronous|float4|half2|"
                             r"float32|float16|bfloat16|threads per block", re.I)


def first_sentence(doc: str | None) -> str | None:
    """The first prose sentence of a torch docstring, without its signature line or reST markup."""
    if not doc:
        return None
    for para in re.split(r"\n\s*\n", doc.strip()):
        para = " ".join(para.split())
        if not para or "->" in para.split(".")[0] or re.match(r"^[\w.]+\(.*\)\s*$", para) or para.startswith(".."):
            continue
        para = re.sub(r":\w+:`~?([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", para)
        para = re.sub(r"`_{1,2}", "`", re.sub(r"\s*<https?://[^>]*>", "", para)).replace("`", "")
        m = re.match(r"(.+?[.:])(\s|$)", para)
        sent = (m.group(1) if m else para).rstrip(".:").strip()
        if TECHNIQUE_WORDS.search(sent):
            return None
        if 8 <= len(sent) <= 240 and not sent.lower().startswith(("warning", "note", "args", "example", "see ")):
            return sent[0].lower() + sent[1:] if sent[:2] != sent[:2].upper() else sent
    return None


def _semantics(info) -> dict[str, str]:
    call = _callable_name(info)
    var = f" (variant `{info.variant_test_name}`)" if info.variant_test_name else ""
    var_zh = f"（变体`{info.variant_test_name}`）" if info.variant_test_name else ""
    sent = first_sentence(getattr(info.op, "__doc__", None))
    if sent:
        return {"en": f"what `{call}`{var} computes: {sent}",
                "zh": f"`{call}`{var_zh}的计算（torch文档：{sent}）"}
    return {"en": f"what `{call}`{var} computes, on the arguments of its torch test samples",
            "zh": f"`{call}`{var_zh}的计算，参数取自其torch测试样例"}


def _op(info, entry) -> Op:
    pool = [tuple(s["shape"]) for s in entry["samples"]]
    if elementwise(info, entry):
        pool += [s for s in ELEMENTWISE_SHAPES if s not in pool]
    else:
        pool += list(scaled_shapes(pool))
    return Op(name=entry["name"], family=entry["family"], semantics=_semantics(info), reference=_reference(info),
              make_inputs=_inputs(info, entry), shape_pool=pool,
              io={"inputs": entry["inputs"], "outputs": entry["outs"]}, dtypes=tuple(entry["dtypes"]),
              layouts=("contiguous",), tolerance=_tolerance(entry["family"]), launch="tensors",
              outputs=entry["outputs"])


if __name__ == "__main__":  # python -m sftbuild.ops.opdb [--ship]: rebuild the catalogue, print the counts
    import sys

    cat = catalogue({full_name(i): i for i in op_db()}, rebuild=True)
    if "--ship" in sys.argv:  # the scan for this torch release, shipped with the package
        SHIPPED.mkdir(exist_ok=True)
        shipped_path().write_text(json.dumps(cat, indent=0, sort_keys=True))
    print(json.dumps(counts(), indent=1))
