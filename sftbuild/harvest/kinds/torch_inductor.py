"""The `torch-inductor` kind: Triton kernels torch.compile writes for reference programs."""
from __future__ import annotations

from pathlib import Path

from sftbuild.harvest import inductor
from sftbuild.harvest.kinds import KINDS, SourceKind
from sftbuild.harvest.sources import Source, SourceError
from sftbuild.record import Record


@KINDS.register
class TorchInductor(SourceKind):
    """Triton kernels torch.compile generates from reference programs, each bound exactly to its program (needs a GPU).

    Location "catalog" is every built-in catalog, mixed; "catalog:opdb", "catalog:fusions",
    "catalog:handwritten" (or several, comma-separated) picks some. `inductor:DIR` takes every
    KernelBench-format module directly in a folder (not recursive), of the benchmark named by
    the folder or by `?benchmark=NAME`; `inductor:PATH` or a path to a .py module with `Model`
    and `get_inputs` names one program. Parameters: `programs` (how many; default
    harvest.programs) and `seed` (default harvest.seed), e.g. `torch-inductor?programs=300&seed=1`.
    """
    name = "torch-inductor"
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

        for prog in progs:
            name, src = prog.name, prog.src
            try:
                outputs = inductor.compile_program(name, src)
            except Exception as e:  # one program failing must not stop the catalog
                h.skip(name, "compile_failed", f"{type(e).__name__}: {str(e)[:300]}")
                continue
            for out in outputs:
                for k in inductor.kernels_in_output(out):
                    n = k["code"].count("\n") + 1
                    entry = {"kernels": [k["name"]], "params": [], "template": False, "launch_bounds": None,
                             "launch_sites": k["launch_sites"], "includes": [], "needs": [], "include_sets": []}
                    binding = {"kind": "inductor", "how": "exact", "program": name, "reference": src,
                               "dynamic": True, "torch": torch.__version__, "triton": triton.__version__}
                    prov = {"source_kind": self.name, "url": "https://github.com/pytorch/pytorch",
                            "commit": getattr(torch.version, "git_version", None), "path": name, "lines": [1, n],
                            "package": "torch", "version": torch.__version__,
                            "license": h.src.license or "unknown",
                            "license_source": "registry" if h.src.license else "unknown",
                            "catalog": prog.catalog, "benchmark": prog.benchmark}
                    rec = Record(language="triton", code=k["code"], source=h.src.name, entry=entry,
                                 binding=binding, provenance=prov)
                    h.emit([rec], [(1, n)])
