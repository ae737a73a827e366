"""Single-op programs from torch's operator database (`op_db`), one per op and sample signature.

Contract: `programs()` returns `Program`s in a fixed order (op_db entry name, then sample), each a
KernelBench-format module (`class Model`, `get_inputs()`, `get_init_inputs()`) whose `forward`
makes the op's call as plain source, e.g. `torch.nn.functional.gelu(x0, approximate='tanh')`.
It reads the shipped spec file `opdb_programs.json` (no op_db import, milliseconds).

The spec file is written once per torch release by `python -m sftbuild.harvest.catalog.opdb --ship`
(a few minutes of CPU). That scan takes each op the op registry's op_db catalogue keeps
(sftbuild/ops/opdb.py: float CUDA support, plain-tensor samples, deterministic), renders up to
`PER_OP` of its float32 samples (distinct signature: shapes, dtypes and literal arguments), plus one
float16/bfloat16 copy where the op supports it, and keeps a program only when, in a child process,
(a) its `forward` on the sample's own tensors equals op_db's op, (b) `get_inputs()` under one seed
gives the same finite output twice, (c) it runs in under a second on the CPU, and (d) its output
is not only views of its inputs (a reshape, a transpose: Inductor writes no kernel for it). Samples whose
arguments cannot be written as literals, and programs failing a check, are counted by reason in the
file's `skipped`. Input values keep the sample's range (`torch.rand(shape) * span + low`), so domain
ops (log, acos, ...) stay in their domain; integer and bool tensors up to `MAX_LITERAL` elements
are written out literally, so index arguments stay valid.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

from sftbuild.harvest.catalog import CATALOGS, Catalog, Program

SPEC_FILE = Path(__file__).with_name("opdb_programs.json")
PER_OP = 4  # float32 sample signatures kept per op (plus one half-precision copy)
MAX_LITERAL = 256  # integer/bool tensors up to this many elements are written out literally
MAX_INPUT_NUMEL = 1 << 20
TIME_LIMIT = 1.0  # seconds one program may take on the CPU

HEADER = "import torch\nimport torch.nn as nn\n"


@CATALOGS.register
class OpDB(Catalog):
    """Single-op programs from torch's operator database (op_db): one per op and sample signature,
    read from the shipped spec file (no op_db import)."""

    name = "opdb"
    version = 1
    order = 20

    def programs(self, count: int, seed: int) -> list[Program]:
        return programs()


def render(spec: dict) -> str:
    """The program source of one spec (what the harvest compiles and the reference records carry)."""
    args = ", ".join(f"x{i}" for i in range(len(spec["inputs"])))
    return (f'{HEADER}\n\nclass Model(nn.Module):\n'
            f'    """{spec["doc"]}"""\n\n'
            f'    def __init__(self):\n        super().__init__()\n\n'
            f'    def forward(self{", " if args else ""}{args}):\n        return {spec["call"]}\n\n\n'
            f'def get_inputs():\n    return [{", ".join(spec["inputs"])}]\n\n\n'
            f'def get_init_inputs():\n    return []\n')


def load_specs() -> dict:
    try:
        return json.loads(SPEC_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"programs": [], "skipped": {}, "torch": None}


def programs() -> list[Program]:
    return [Program(s["name"], render(s), catalog="opdb",
                    meta={"family": s["op"], "shapes": s["shapes"], "dtypes": s["dtypes"]})
            for s in load_specs()["programs"]]


# ---- rendering a sample as source -------------------------------------------------------------------

class Unrenderable(Exception):
    """A sample argument with no literal spelling (the message is the reason counted)."""


def literal(v) -> str:
    import torch

    if v is None or isinstance(v, (bool, str)):
        return repr(v)
    if isinstance(v, int):
        return repr(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "-float('inf')"
        return repr(v)
    if isinstance(v, torch.Size):
        return repr(tuple(v))
    if isinstance(v, (list, tuple)):
        inner = [literal(x) for x in v]
        if isinstance(v, tuple):
            return f"({inner[0]},)" if len(inner) == 1 else f"({', '.join(inner)})"
        return f"[{', '.join(inner)}]"
    if isinstance(v, torch.memory_format):
        return str(v)
    raise Unrenderable(f"argument of type {type(v).__name__}")


def tensor_expr(t) -> str:
    """A `get_inputs` expression drawing a tensor like `t`: same shape and dtype, values in its range."""
    import torch

    shape = repr(tuple(t.shape))
    dt = str(t.dtype)
    if t.dtype == torch.bool:
        if t.numel() <= MAX_LITERAL:
            return f"torch.tensor({t.tolist()!r}, dtype=torch.bool)"
        return f"torch.rand({shape}) < {round(float(t.float().mean()), 3)}"
    if not t.is_floating_point():
        if t.numel() <= MAX_LITERAL:
            return f"torch.tensor({t.tolist()!r}, dtype={dt})"
        lo, hi = int(t.min()), int(t.max())
        return f"torch.randint({lo}, {hi + 1}, {shape}, dtype={dt})"
    f = t.double()
    if t.numel() == 0:
        return f"torch.empty({shape}, dtype={dt})"
    fin = f[torch.isfinite(f)]
    if fin.numel() == 0:
        raise Unrenderable("a tensor with no finite value")
    lo, hi = float(fin.min()), float(fin.max())
    lo, hi = math.ceil(lo * 100) / 100, math.floor(hi * 100) / 100
    cast = "" if t.dtype == torch.float32 else f".to({dt})"
    if hi - lo < 0.01:
        return f"torch.full({shape}, {round((lo + hi) / 2, 2)!r}){cast}"
    span, low = round(hi - lo, 2), round(lo, 2)
    off = f" + {low!r}" if low > 0 else (f" - {-low!r}" if low < 0 else "")
    return f"(torch.rand({shape}) * {span!r}{off}){cast}"


def render_call(fn: str, method: bool, sample, names: dict) -> str:
    """`fn(input, *args, **kwargs)` with each tensor written as its input name (`names[id(t)]`)."""
    import torch

    def arg(v):
        if isinstance(v, torch.Tensor):
            return names[id(v)]
        if isinstance(v, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in v):
            inner = ", ".join(arg(x) for x in v)
            return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
        return literal(v)
    parts = [arg(a) for a in sample.args] + [f"{k}={arg(v)}" for k, v in sample.kwargs.items()]
    if method:
        return f"{arg(sample.input)}.{fn}({', '.join(parts)})"
    return f"{fn}({', '.join([arg(sample.input)] + parts)})"


def callables(info) -> list[tuple[str, bool]]:
    """Spellings of an op_db entry's call to try: `torch.<name>(...)`, then the tensor method."""
    import torch

    out = []
    obj = torch
    for part in info.name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if obj is not None and callable(obj) and not isinstance(obj, type):
        out.append((f"torch.{info.name}", False))
    last = info.name.split(".")[-1]
    if "." not in info.name and callable(getattr(torch.Tensor, last, None)):
        out.append((last, True))
    return out


def sample_spec(info, sample, fn: str, method: bool, half: str | None = None) -> dict:
    """The spec of one sample: its call, input expressions, shapes and dtypes."""
    import torch
    from torch.utils import _pytree as pytree

    leaves = pytree.tree_leaves((sample.input, tuple(sample.args), dict(sample.kwargs)))
    tensors, names = [], {}
    for x in leaves:
        if isinstance(x, torch.Tensor) and id(x) not in names:
            names[id(x)] = f"x{len(tensors)}"
            tensors.append(x)
    if any(t.numel() > MAX_INPUT_NUMEL for t in tensors):
        raise Unrenderable("inputs too large")
    if half:
        tensors = [t.to(getattr(torch, half)) if t.is_floating_point() else t for t in tensors]
    call = render_call(fn, method, sample, names)
    label = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
    return {"op": label, "call": call, "inputs": [tensor_expr(t) for t in tensors],
            "shapes": [list(t.shape) for t in tensors],
            "dtypes": sorted({str(t.dtype).replace("torch.", "") for t in tensors}),
            "doc": f"`{fn if not method else 'Tensor.' + fn}` on a sample input of torch's op_db entry "
                   f"{label}"}


# ---- the scan (python -m sftbuild.harvest.catalog.opdb --ship) ----------------------------------------

def _check(item):
    """In a child process: whether a rendered program matches op_db's op, is deterministic and fast."""
    import signal
    import time
    import warnings

    import torch
    from torch.utils import _pytree as pytree

    src, sample_inputs, expected = item

    def alarm(*_):
        raise TimeoutError("slower than the time limit")
    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(10)
    warnings.simplefilter("ignore")
    try:
        ns: dict = {"__name__": "sftbuild_opdb_check"}
        exec(compile(src, "<opdb program>", "exec"), ns)
        model = ns["Model"](*ns["get_init_inputs"]())
        with torch.no_grad():
            if expected is not None:
                got = pytree.tree_leaves(model(*sample_inputs))
                if len(got) != len(expected) or not all(
                        isinstance(g, torch.Tensor) and g.shape == e.shape and g.dtype == e.dtype
                        and torch.equal(g.nan_to_num(0.0) if g.is_floating_point() else g,
                                        e.nan_to_num(0.0) if e.is_floating_point() else e)
                        for g, e in zip(got, expected)):
                    return "rendered call differs from op_db's op"
            outs = []
            t0 = time.perf_counter()
            for _ in range(2):
                torch.manual_seed(0)
                ins = ns["get_inputs"]()
                outs.append(pytree.tree_leaves(model(*ins)))
            if time.perf_counter() - t0 > 2 * TIME_LIMIT:
                return "slower than a second on the CPU"
        a, b = outs
        held = {t.untyped_storage().data_ptr() for t in ins if isinstance(t, torch.Tensor) and t.numel()}
        if b and all(isinstance(x, torch.Tensor) and x.numel() and x.untyped_storage().data_ptr() in held
                     for x in b):  # b: the outputs of the last inputs drawn
            return "returns views of its inputs: nothing for a kernel to compute"
        if not a or not all(isinstance(x, torch.Tensor) and not x.is_complex() for x in a):
            return "returns something other than real tensors"
        if not all(torch.equal(x, y) for x, y in zip(a, b)):
            return "not deterministic"
        if any(x.is_floating_point() and not torch.isfinite(x).all() for x in a):
            return "non-finite output on its drawn inputs"
        return None
    except TimeoutError:
        return "slower than a second on the CPU"
    except Exception as e:
        return f"fails on its drawn inputs: {type(e).__name__}"
    finally:
        signal.alarm(0)


def scan(workers: int = 2) -> dict:
    """Every op of the op registry's op_db catalogue rendered and checked (slow: imports op_db)."""
    import concurrent.futures as cf
    import multiprocessing
    import warnings

    import torch
    from torch.utils import _pytree as pytree

    from sftbuild.ops import opdb

    infos = {opdb.full_name(i): i for i in opdb.op_db()}
    cat = opdb.catalogue(infos)
    skipped: Counter = Counter()
    candidates = []  # (op key, spec, sample tensors, expected outputs, fallbacks)
    for entry in cat["ops"]:
        info = infos.get(entry["name"])
        if info is None:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                draws = opdb.draw(info, torch.float32, 0)
            except Exception:
                skipped["samples cannot be drawn"] += 1
                continue
        spellings = callables(info)
        if not spellings:
            skipped["no public torch callable of that name"] += 1
            continue
        seen = set()
        for s in entry["samples"]:
            if s["index"] >= len(draws):
                continue
            sample = draws[s["index"]]
            halves = [None] + [h for h in ("float16", "bfloat16") if h in entry["dtypes"]][:1]
            for half in halves if not seen else [None]:
                try:
                    specs = [sample_spec(info, sample, fn, m, half) for fn, m in spellings]
                except Unrenderable as e:
                    skipped[f"sample not renderable: {e}"] += 1
                    break
                key = (specs[0]["call"], tuple(map(tuple, map(tuple, specs[0]["shapes"]))), half)
                if key in seen:
                    continue
                seen.add(key)
                leaves = pytree.tree_leaves((sample.input, tuple(sample.args), dict(sample.kwargs)))
                tens = list({id(x): x for x in leaves if isinstance(x, torch.Tensor)}.values())
                expected = None
                if half is None:
                    try:
                        with warnings.catch_warnings(), torch.no_grad():
                            warnings.simplefilter("ignore")
                            expected = pytree.tree_leaves(info.op(sample.input, *sample.args, **sample.kwargs))
                    except Exception:
                        skipped["op_db's op fails on its sample"] += 1
                        continue
                    if not all(isinstance(x, torch.Tensor) for x in expected):
                        skipped["returns something other than tensors"] += 1
                        continue
                candidates.append((entry["name"], specs, tens, expected))
            if len([k for k in seen if k[2] is None]) >= PER_OP:
                break
    print(f"checking {len(candidates)} rendered samples", flush=True)
    ctx = multiprocessing.get_context("spawn")
    kept = []
    with cf.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        futures = []
        for name, specs, tens, expected in candidates:
            futures.append([pool.submit(_check, (render(sp), tens, expected)) for sp in specs])
        for (name, specs, _, _), futs in zip(candidates, futures):
            why = None
            for sp, fut in zip(specs, futs):
                try:
                    why = fut.result()
                except Exception as e:  # a worker that died on this program
                    why = f"check process failed: {type(e).__name__}"
                if why is None:
                    kept.append(sp)
                    break
            if why is not None:
                skipped[why] += 1
    counts: Counter = Counter()
    out = []
    for sp in kept:
        counts[sp["op"]] += 1
        base = "opdb." + sp["op"].replace("nn.functional.", "F.")
        out.append({"name": f"{base}.{counts[sp['op']] - 1}", **sp})
    return {"torch": torch.__version__, "programs": out, "skipped": dict(sorted(skipped.items()))}


if __name__ == "__main__":  # python -m sftbuild.harvest.catalog.opdb [--ship]
    import sys

    result = scan()
    if "--ship" in sys.argv:
        SPEC_FILE.write_text(json.dumps(result, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    ops = {p["op"] for p in result["programs"]}
    print(json.dumps({"programs": len(result["programs"]), "ops": len(ops), "skipped": result["skipped"]},
                     indent=1))
