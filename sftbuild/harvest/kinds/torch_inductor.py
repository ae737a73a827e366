"""The `torch-inductor` kind: reference programs compiled by torch.compile, as validated pairs and kernels.

Each program compiled to one Dynamo graph yields:
- one program pair (language `kernelbench`, binding kind `kernelbench`): the reference is the
  program, the solution its output code made standalone with `class ModelNew`
  (sftbuild.inductor_code.solution); it validates through the module path like any
  KernelBench pair, with the sizes of `binding.sizes` varied;
- one record per generated Triton kernel (language `triton`, binding kind `inductor`): the
  binding carries the program's solution and the kernel's name, and validation runs that
  solution with the record's kernel spliced in (sftbuild.trial.pyrun.inductor_candidate).

A program that cannot stand alone (graph breaks, outputs other than tensors, placeholders read
from globals) yields nothing: it is skipped with the reason, so no record is ever unbound.
Compiles are kept by content under <cache>/inductor (inductor.compile_cached), and each program's
records are stored with their results at once: a harvest cut anywhere resumes at the programs it had
not reached.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from sftbuild import inductor_code as IC
from sftbuild.harvest import inductor
from sftbuild.harvest import kernelbench as KB
from sftbuild.harvest.kinds import KINDS, SourceKind
from sftbuild.harvest.sources import Source, SourceError, cache_dir
from sftbuild.record import Record


@KINDS.register
class TorchInductor(SourceKind):
    """Reference programs compiled by torch.compile: a validated program pair each, and its Triton
    kernels run inside the program's own host code (needs a GPU).

    Location "catalog" is every built-in catalog, mixed; "catalog:opdb", "catalog:fusions",
    "catalog:handwritten" (or several, comma-separated) picks some. `inductor:DIR` takes every
    KernelBench-format module directly in a folder (not recursive), of the benchmark named by
    the folder or by `?benchmark=NAME`; `inductor:PATH` or a path to a .py module with `Model`
    and `get_inputs` names one program. Parameters: `programs` (how many; default
    harvest.programs) and `seed` (default harvest.seed), e.g. `torch-inductor?programs=300&seed=1`.
    """
    name = "torch-inductor"
    version = 1
    order = 20
    spec_params = {"programs": int, "seed": int, "benchmark": str}

    def recognise(self, spec: str, path: Path) -> Source | None:
        if spec.startswith("inductor:"):
            loc = spec[len("inductor:"):]
            if not loc.startswith("catalog"):
                p = Path(loc).expanduser()
                loc = str(p.resolve()) if p.exists() else loc
            return Source(name=spec, kind=self.name, location=loc)
        if path.is_file() and path.suffix == ".py":
            return Source(name=spec, kind=self.name, location=str(path.resolve()))
        return None

    def harvest(self, h) -> None:
        import torch

        params = h.src.params  # the programs first: a bad location says so on any machine
        skipped: list = []
        catalog = h.src.location in ("", "catalog") or h.src.location.startswith("catalog:")
        progs = inductor.programs(h.src.location, count=params.get("programs", h.cfg.programs if catalog else None),
                                  seed=params.get("seed", h.cfg.seed), benchmark=params.get("benchmark"),
                                  skipped=skipped)
        for file, why in skipped:
            h.skip(file, "not_a_program", why)

        if not torch.cuda.is_available():
            raise SourceError(
                f"source {h.src.name!r} needs a CUDA GPU: torch.compile writes Triton kernels only for GPU "
                f"devices, and this machine has none (torch {torch.__version__}, CUDA "
                f"{torch.version.cuda or 'not built'}); run this source on a GPU machine")
        import triton

        from tqdm import tqdm

        versions = {"torch": torch.__version__, "triton": triton.__version__}
        cache = cache_dir(h.ctx.workspace, h.cfg) / "inductor"
        bar = tqdm(total=len(progs), desc=f"harvest {h.src.name}", unit=" programs", disable=not h.ctx.progress)
        for prog, comp in inductor.compile_cached(progs, cache):
            bar.update()
            if isinstance(comp, str):  # one program failing must not stop the catalog
                h.skip(prog.name, "compile_failed", comp)
                continue
            try:
                recs = records(h.src.name, prog, comp, versions, h.src.license, skip=h.skip)
            except IC.NotStandalone as e:
                h.skip(prog.name, e.reason, str(e))
                continue
            h.emit(recs, [(1, rec.code.count("\n") + 1) for rec in recs])
            h.run_.flush()  # a program's records and results stored together: a cut loses only programs in flight
        bar.close()


def _runs_as_a_pair(seen: dict) -> None:
    """A program is validated by comparing its outputs with the solution's for the same inputs: one that
    draws random numbers, updates its inputs or ignores them cannot be (inductor.behaviour)."""
    if seen.get("random"):
        raise IC.NotStandalone("the program draws random numbers, so no run of it can be compared with "
                               "another", "random")
    if seen.get("mutates"):
        raise IC.NotStandalone(f"the program updates its input(s) {seen['mutates']} in place", "mutates_inputs")
    if seen.get("constant"):
        raise IC.NotStandalone("the program's output is the same for different inputs", "constant_output")


# Library calls that do a program's main work: a pair whose output code leaves them to cuBLAS or cuDNN
# asks for no Triton of that work, and the validator would rightly call its solution a cheat
LIBRARY_WORK = ("convolution", "mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product", "_scaled_mm",
                "_int_mm", "convolution_backward", "mv", "addmv", "dot", "vdot", "_trilinear",
                "cudnn_convolution", "_cudnn_rnn", "_flash_attention_forward", "_efficient_attention_forward")


def records(source: str, prog, comp, versions: dict, license: str | None = None, skip=None) -> list[Record]:
    """The program pair and its per-kernel records, for one compiled program (`inductor.Compiled`).
    A pair whose output code leaves the main work to a library (LIBRARY_WORK) is left out, and
    `skip(name, reason, why)` told so; its kernels are still records, run inside their program."""
    if len(comp.graphs) != 1:
        raise IC.NotStandalone(f"the program compiles to {len(comp.graphs)} graphs, not one: a graph break")
    code = IC.pick_code(comp.codes, len(comp.graphs[0]))
    if code is None:
        raise IC.NotStandalone(f"none of the {len(comp.codes)} output modules has a call taking the graph's "
                               f"{len(comp.graphs[0])} inputs")
    if comp.returns is None:
        raise IC.NotStandalone("the program returns something other than a tensor or a tuple of tensors "
                               "the graph computes")
    if any(s is None for s in comp.graphs[0]):
        raise IC.NotStandalone("a graph placeholder has no source to rebuild it from")
    _runs_as_a_pair(comp.behaviour or {})
    reference = comp.reference or prog.src
    found = IC.kernels(code)
    if not found:
        raise IC.NotStandalone("the output code holds no Triton kernel (library calls only: "
                               f"{', '.join(IC.extern_calls(code)) or 'none'})", "no_triton_kernel")
    solution = IC.solution(reference, code, comp.graphs[0], comp.returns)
    extern = IC.extern_calls(code)
    sizes = comp.sizes if comp.sizes is not None else IC.free_sizes(reference)
    prov = {"source_kind": "torch-inductor", "url": "https://github.com/pytorch/pytorch",
            "commit": None, "path": prog.name, "package": "torch", "version": versions.get("torch"),
            "license": license or "unknown", "license_source": "registry" if license else "unknown",
            "catalog": prog.catalog, "benchmark": prog.benchmark}
    gen = {"gemm": comp.gemm, **({"gemm_why": comp.why} if comp.why else {}), "extern": extern, **versions}
    n = solution.count("\n") + 1
    pair = KB.pair_record(source, solution, reference, prog.name, {**prov, "lines": [1, n]})
    pair = dataclasses.replace(
        pair, entry={**pair.entry, "backend": "triton", "kernels": [k["name"] for k in found], "generator": "inductor",
                     **gen},
        binding=dataclasses.replace(pair.binding, target=prog.name, dtypes=(comp.dtype,),
                                    launch={**pair.binding.launch, "sizes": sizes}))
    out = [pair]
    library = sorted(set(extern) & set(LIBRARY_WORK))
    if library:
        out = []
        if skip is not None:
            skip(prog.name, "library_kernels", f"Inductor left {', '.join(library)} to a library (cuBLAS or cuDNN), "
                                               "so the pair asks for no Triton of its main work; its kernels are kept")
    for k in found:
        lines = k["code"].count("\n") + 1
        entry = {"kernels": [k["name"]], "params": [], "template": False, "launch_bounds": None,
                 "launch_sites": k["launch_sites"], "includes": [], "needs": [], "include_sets": [],
                 "generator": "inductor", "aten": k["aten"], "nodes": k["nodes"], **gen}
        binding = {"kind": "inductor", "how": "exact", "program": prog.name, "reference": reference,
                   "solution": solution, "kernel": k["name"], "dtypes": [comp.dtype], "sizes": sizes,
                   "dynamic": True}
        out.append(Record(language="triton", code=k["code"], source=source, entry=entry, binding=binding,
                          provenance={**prov, "lines": [1, lines]}))
    return out
