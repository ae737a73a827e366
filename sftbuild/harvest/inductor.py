"""PyTorch Inductor programs and output code, read by the `torch-inductor` source kind.

Each program is a KernelBench-format module (`Model`, `get_inputs`,
`get_init_inputs`): the built-in catalogs (sftbuild/harvest/catalog/), a folder of reference modules,
or a user module given by path. `compile_program` compiles it with dynamic shapes under a backend
that records each Dynamo graph's placeholder sources (the expressions that rebuild
`call(args)`'s arguments from the model and its inputs) and captures the output
code with `torch._inductor.utils.run_and_get_code`; matmuls and convolutions are
Triton templates where Inductor can make them so. `compile_isolated` runs the
compiles in sandbox processes, never in the caller's. What the output code becomes
(a program pair and per-kernel records) is sftbuild.inductor_code's and
the kind's business. Inductor writes Triton only for GPU devices (C++ with the same
`call(args)` for the CPU), so the source needs CUDA.
"""
from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path

from sftbuild.harvest.catalog import Program, folder, is_program, parse_location, select, static_inputs
from sftbuild.harvest.sources import SourceError

__all__ = ["Program", "programs", "compile_program"]


def programs(location: str, count: int | None = None, seed: int = 0, benchmark: str | None = None,
             skipped: list | None = None) -> list[Program]:
    """The programs a location names; a folder's files that are not programs go to `skipped` as
    (file name, reason):
    - "catalog" (every catalog) or "catalog:NAME[,NAME...]": the first `count` programs of the seeded
      mix of those catalogs (sftbuild.harvest.catalog);
    - a folder: every KernelBench-format module directly in it (not recursive), of benchmark
      `benchmark` (default: the folder's name);
    - a .py module with `Model` and `get_inputs`: that one program.
    Nothing here runs a program."""
    names = parse_location(location)
    if names is not None:
        return select(names, count, seed)
    p = Path(location)
    if p.is_dir():
        progs, others = folder(p, benchmark)
        if skipped is not None:
            skipped.extend(others)
        if not progs:
            why = "; ".join(f"{n}: {r}" for n, r in others[:3]) or "it holds no .py file"
            raise SourceError(f"folder {location} holds no reference program (a .py module defining "
                              f"`class Model` and `def get_inputs()`): {why}")
        return progs[:count] if count else progs
    if not p.is_file():
        raise SourceError(f"program module {location} does not exist")
    try:
        src = p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError) as e:
        raise SourceError(f"program module {location} cannot be read: {e}") from None
    why = is_program(src)
    if why:
        raise SourceError(f"{location}: a program module needs `class Model` and `def get_inputs()` ({why})")
    return [Program(str(p.resolve()), src, catalog="file", benchmark=benchmark,
                    meta={"family": p.stem, **static_inputs(src)})]


@dataclasses.dataclass
class Compiled:
    """One program compiled: the output code of each Dynamo graph, each graph's placeholder sources,
    what the program returns ("tensor", the number of tensors of its tuple, or None for anything
    else), the float dtype of its inputs, and how matmuls were generated (`gemm`: "triton", or
    "extern" with `why`)."""

    codes: list
    graphs: list
    returns: object
    dtype: str
    gemm: str = "triton"
    why: str = ""
    reference: str = ""  # the program compiled: its literal input sizes hoisted (inductor_code.hoist_sizes)
    sizes: list | None = None  # size constants the output code was seen to take at other values
    behaviour: dict = dataclasses.field(default_factory=dict)  # what the program does when run (`behaviour`)


def _source_name(s) -> str | None:
    if s is None:
        return None
    n = s.name
    return n() if callable(n) else n


def _returns(out, n_outputs: int):
    import torch

    if isinstance(out, torch.Tensor):
        return "tensor" if n_outputs == 1 else None
    if isinstance(out, (tuple, list)) and out and all(isinstance(t, torch.Tensor) for t in out) \
            and len(out) == n_outputs:
        return len(out)
    return None


# matmuls and convolutions as Triton templates, few configs so autotuning stays cheap
TRITON_GEMM = {"max_autotune_gemm": True, "max_autotune_gemm_backends": "TRITON",
               "max_autotune_conv_backends": "TRITON", "test_configs.max_mm_configs": 4}


def compile_program(name: str, src: str, device: str = "cuda") -> Compiled:
    """Run a program under torch.compile(dynamic=True) with a backend that records each Dynamo graph's
    placeholder sources before Inductor compiles it. On CUDA, matmuls and convolutions are generated
    as Triton templates; where that fails they go to library kernels, and `gemm`/`why` say so."""
    try:
        return _compile(name, src, device, TRITON_GEMM if device == "cuda" else {})
    except Exception as e:
        if device != "cuda":
            raise
        out = _compile(name, src, device, {})
        out.gemm, out.why = "extern", f"Triton templates failed: {type(e).__name__}: {str(e)[:200]}"
        return out


def _compile(name: str, src: str, device: str, config: dict) -> Compiled:
    import torch

    # the program and its inputs first: one that fails there costs no import of Dynamo and Inductor
    ns, _, model = _load(src, device, name)
    inputs = _draw(ns, device)
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    floats = [x.dtype for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    graphs, n_out = [], []

    def backend(gm, example_inputs):
        sources = [_source_name(getattr(n.meta.get("grapharg"), "source", None))
                   for n in gm.graph.nodes if n.op == "placeholder"]
        outs = [n for n in gm.graph.nodes if n.op == "output"]
        fn = compile_fx(gm, example_inputs)  # raises when Dynamo must restart: that graph is not kept
        graphs.append(sources)
        n_out.append(len(outs[0].args[0]) if outs and isinstance(outs[0].args[0], (tuple, list)) else 1)
        return fn

    known = {k: v for k, v in config.items() if _has_config(inductor_config, k)}
    # Python floats (a module's scale, eps, slope) stay constants: unspecialised, they become 0-d tensor
    # graph inputs that `call` expects as tensors where ModelNew's sources yield plain floats
    dynamo = {"specialize_float": True} if hasattr(torch._dynamo.config, "specialize_float") else {}
    torch._dynamo.reset()
    with inductor_config.patch(known), torch._dynamo.config.patch(dynamo):
        compiled = torch.compile(model, backend=backend, dynamic=True)
        with torch.no_grad():
            out, codes = run_and_get_code(compiled, *inputs)
    torch._dynamo.reset()
    dtype = str(floats[0]).replace("torch.", "") if floats else "float32"
    return Compiled(list(codes), graphs, _returns(out, n_out[0]) if len(n_out) == 1 else None, dtype)


def _load(src: str, device: str, name: str = "program"):
    """Run a program's source: (its namespace, its init inputs, its Model built from seed 0 on `device`)."""
    import torch

    ns: dict = {"__name__": f"sftbuild_program_{abs(hash(name))}"}
    exec(compile(src, name, "exec"), ns)
    init = ns.get("get_init_inputs", lambda: [])()
    torch.manual_seed(0)
    return ns, init, ns["Model"](*init).to(device).eval()


def _draw(ns: dict, device: str, seed: int | None = None) -> list:
    """The program's `get_inputs()` on `device`, from `seed` when given."""
    import torch

    if seed is not None:
        torch.manual_seed(seed)
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in ns["get_inputs"]()]


def _has_config(cfg, key: str) -> bool:
    obj = cfg
    for part in key.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


COMPILE_TIMEOUT = 600.0  # seconds per program, Triton-template autotuning included
BATCH = 16  # programs per compile process: one torch import serves them all
PROCESS_FAILED = "the compile process failed"  # how a program's reason starts when its process died or hung


# CUDA errors that poison the process's context: every later call fails with them too
STICKY = ("device-side assert", "illegal memory access", "misaligned address", "unspecified launch failure",
          "illegal instruction")


def compile_many(task: dict) -> dict:
    """The sandbox's entry: prepare each (name, source) of `task["programs"]` on `task["device"]`;
    {"compiled": {name: Compiled, or the error as one line}}. After a sticky CUDA error the rest are
    left out, with `poisoned` naming the program that met it: the caller compiles them afresh (one
    program's out-of-range index had failed the 22 programs after it in its process)."""
    out: dict = {}
    for name, src in task["programs"]:
        try:
            out[name] = prepare(name, src, task.get("device", "cuda"))
        except Exception as e:  # one program failing must not stop the others
            why = f"{type(e).__name__}: {str(e)[:300]}"
            if any(s in str(e) for s in STICKY):
                return {"compiled": out, "poisoned": name, "why": why}
            out[name] = why
    return {"compiled": out}


def prepare(name: str, src: str, device: str = "cuda") -> Compiled:
    """Compile a program with its literal input sizes hoisted into constants, then find which size
    constants its output code takes as arguments: those at which the standalone solution still
    matches the program (`sizes`). Runs the generated code: call it in a sandbox process."""
    from sftbuild import inductor_code as IC

    reference = IC.hoist_sizes(src)
    comp = compile_program(name, reference, device)
    comp.reference = reference
    comp.behaviour = behaviour(reference, device)
    comp.sizes = dynamic_sizes(reference, comp, device)
    return comp


def behaviour(program: str, device: str) -> dict:
    """What running the program eagerly shows, for the harvest to skip what cannot be validated as a pair:
    `random` (it draws from torch's generators: its output cannot match another run's), `mutates` (the
    positions of inputs it updates in place, as training-mode batch norm does its running statistics),
    `constant` (its output is the same for two different input draws: nothing to compute)."""
    import torch

    ns, _, model = _load(program, device)

    def rng():
        return [torch.get_rng_state(), *([torch.cuda.get_rng_state()] if device == "cuda" else [])]

    a, b = _draw(ns, device, 1), _draw(ns, device, 2)
    before = [x.clone() if isinstance(x, torch.Tensor) else x for x in a]
    state = rng()
    with torch.no_grad():
        out_a = model(*a)
        random = any(not torch.equal(x, y) for x, y in zip(state, rng()))
        out_b = model(*b)
    mutates = [i for i, (x, y) in enumerate(zip(a, before))
               if isinstance(x, torch.Tensor) and not torch.equal(x.nan_to_num(), y.nan_to_num())]
    flat_a, flat_b = _tensors(out_a), _tensors(out_b)
    changed_inputs = any(isinstance(x, torch.Tensor) and x.numel() and not torch.equal(x, y) for x, y in zip(a, b))
    constant = changed_inputs and len(flat_a) == len(flat_b) and \
        all(x.shape == y.shape and torch.equal(x.nan_to_num(), y.nan_to_num()) for x, y in zip(flat_a, flat_b))
    return {"random": random, "mutates": mutates, "constant": bool(constant)}


def _tensors(out) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in (out if isinstance(out, (tuple, list)) else []) if isinstance(t, torch.Tensor)]


def dynamic_sizes(program: str, comp: Compiled, device: str) -> list[str]:
    """The size constants only `get_inputs` reads (inductor_code.free_sizes) at whose changed values
    (odd, smaller: as validation varies them) the solution still matches the program; [] when the
    output code cannot stand alone or does not match even at the example size."""
    import importlib.util
    import sys
    import tempfile

    from sftbuild import inductor_code as IC

    if len(comp.graphs) != 1 or comp.returns is None or None in comp.graphs[0]:
        return []
    code = IC.pick_code(comp.codes, len(comp.graphs[0]))
    try:
        sol = IC.solution(program, code, comp.graphs[0], comp.returns) if code else None
    except IC.NotStandalone:
        sol = None
    if sol is None:
        return []
    with tempfile.TemporaryDirectory(prefix="sftbuild_inductor_") as d:
        path = Path(d, "solution.py")
        path.write_text(sol, encoding="utf-8")
        spec = importlib.util.spec_from_file_location(f"sftbuild_solution_{abs(hash(program))}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        try:
            spec.loader.exec_module(mod)
            if not _matches(program, mod, {}, device):
                return []
            consts = _constants(program)
            return [c for c in IC.free_sizes(program)
                    if all(_matches(program, mod, {c: v}, device) for v in _trial_values(consts[c]))]
        finally:
            sys.modules.pop(spec.name, None)


def _constants(program: str) -> dict[str, int]:
    return {n.targets[0].id: n.value.value for n in ast.parse(program).body
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
            and isinstance(n.value, ast.Constant) and type(n.value.value) is int}


def _trial_values(v: int) -> list[int]:
    """Odd values below v, as the validator's size variants pick them: a little smaller, and a quarter."""
    below = v - 3 if v > 8 else v
    below = below if below % 2 else max(1, below - 1)
    quarter = max(3, v // 4)
    quarter = quarter + 1 if quarter % 2 == 0 else quarter
    return sorted({x for x in (below, quarter) if x != v and x > 1})


def _matches(program: str, mod, change: dict, device: str) -> bool:
    """Model and the solution's ModelNew, seeded alike, agree on fresh inputs with `change` applied
    to the program's size constants."""
    import torch

    lines = program.splitlines(keepends=True)
    for n in ast.parse(program).body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and n.targets[0].id in change:
            lines[n.lineno - 1] = f"{n.targets[0].id} = {change[n.targets[0].id]}\n"
    try:
        ns, init, ref = _load("".join(lines), device)
        torch.manual_seed(0)
        cand = mod.ModelNew(*init).to(device).eval()
        inputs = _draw(ns, device, 1)
        with torch.no_grad():
            want = ref(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            got = cand(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
    except Exception:
        return False
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    return len(want) == len(got) and all(
        isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
        and torch.allclose(a.double(), b.double(), rtol=1e-3, atol=1e-3, equal_nan=True)
        for a, b in zip(want, got))


def compile_isolated(progs: list[Program], device: str = "cuda", batch: int = BATCH, processes: int = 0):
    """(program, Compiled or the reason it failed) for each program, compiled off the main process:
    torch.compile runs the program and the code it generates, so each batch goes to a fresh process
    (sftbuild.sandbox), `processes` of them at once (default: half the cores, Inductor's own compile
    threads fill the rest); a batch whose process dies or hangs is retried one program at a time, so a
    bad program costs only itself. Results come as batches finish."""
    import concurrent.futures as cf

    from sftbuild.executor import WorkerFailure
    from sftbuild.sandbox import run_isolated

    processes = processes or max(1, (os.cpu_count() or 2) // 2)
    batch = max(1, min(batch, -(-len(progs) // processes)))  # every process gets work
    from sftbuild.sandbox import inductor_cache, triton_cache

    triton, built = triton_cache(), inductor_cache()  # validation's GPU workers find these kernels compiled
    env = {"TORCHINDUCTOR_COMPILE_THREADS": str(max(1, (os.cpu_count() or 2) // processes)), "TRITON_CACHE_DIR": triton,
           "TORCHINDUCTOR_CACHE_DIR": built}

    def one(group):
        return group, run_isolated("sftbuild.harvest.inductor:compile_many",
                                   {"programs": [(p.name, p.src) for p in group], "device": device},
                                   COMPILE_TIMEOUT * len(group), env=env, gpu=device == "cuda", rw=[triton, built])

    with cf.ThreadPoolExecutor(processes) as pool:  # threads only wait on their processes
        pending = {pool.submit(one, progs[i:i + batch]) for i in range(0, len(progs), batch)}
        while pending:
            done, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                group, res = fut.result()
                if isinstance(res, WorkerFailure) or "compiled" not in res:
                    why = f"{res.kind}: {res.detail[-300:]}" if isinstance(res, WorkerFailure) else \
                        str(res.get("detail", res))[:300]
                    if len(group) > 1:
                        pending |= {pool.submit(one, [p]) for p in group}
                        continue
                    yield group[0], f"{PROCESS_FAILED} ({why})"
                    continue
                left = [p for p in group if p.name not in res["compiled"]]
                if res.get("poisoned") and len(group) > 1:  # the one that met the error alone, the rest together
                    pending |= {pool.submit(one, g) for g in ([p for p in left if p.name == res["poisoned"]],
                                                              [p for p in left if p.name != res["poisoned"]]) if g}
                    group = [p for p in group if p.name in res["compiled"]]
                for p in group:  # results cross the sandbox as plain data
                    c = res["compiled"].get(p.name) or res.get("why") or "no result"
                    yield p, Compiled(**c) if isinstance(c, dict) else c


def compile_cached(progs: list[Program], cache: Path, device: str = "cuda"):
    """As `compile_isolated`, kept by content under `cache`: a program compiled before with the same
    source, device, torch, Triton and compile code comes from there, so a harvest cut anywhere resumes
    with the programs it had not reached. A compile process that died or hung is not kept (it may
    have been the machine's fault); a reason the compile itself gave is."""
    import hashlib
    import pickle

    import torch
    import triton

    from sftbuild.sandbox import load_result

    code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()  # the compile code is part of the key
    salt = f"{device}\0{torch.__version__}\0{triton.__version__}\0{code}\0"
    paths = {p.name: cache / f"{hashlib.sha256((salt + p.name + chr(0) + p.src).encode()).hexdigest()[:32]}.pkl"
             for p in progs}
    todo = []
    for p in progs:
        try:
            got = load_result(str(paths[p.name]))
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            todo.append(p)  # absent, or cut while it was written
            continue
        yield p, Compiled(**got) if isinstance(got, dict) else str(got)
    cache.mkdir(parents=True, exist_ok=True)
    for p, comp in compile_isolated(todo, device):
        if not (isinstance(comp, str) and comp.startswith(PROCESS_FAILED)):
            tmp = paths[p.name].with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(pickle.dumps(dataclasses.asdict(comp) if isinstance(comp, Compiled) else comp))
            os.replace(tmp, paths[p.name])
        yield p, comp
