"""The pipeline's stages, in the order data flows through them.

This one table drives `sftbuild run`, the store's stage names, the funnel that
`status` prints and the order of `sftbuild --help`. A stage is a module with
`run(ctx, ...) -> dict` (its stats); the CLI command of the same name calls it.
A stage `keyed_on_binding` checks a record against its binding: each result carries the
binding key it was reached under, and counts only while that is the record's current one.
A stage's `first` names a module whose run(ctx) the stage's command and `sftbuild run` call just
before it: validate's clusters near-identical records, so the GPU checks one of each first.
A stage's key (sftbuild.context.StageRun) holds its config and what else decides its results: the
names and versions of the plug-ins of its `plugins` kinds, the contents of the package files its
`reads` patterns match, and the project's version. What another stage decides stays out: validate
reads the binding, whose key its results already carry, and none of describe's output.
"""
from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    module: str  # the module whose run(ctx) runs the stage
    summary: str
    # a stage that later stages' commands run first when it has work, so `sftbuild harvest && sftbuild
    # validate` binds and describes what harvest found before validating it (idempotent: done work is skipped)
    prepares: bool = False
    keyed_on_binding: bool = False
    first: str = ""
    plugins: tuple[str, ...] = ()  # plug-in kinds (sftbuild.plugins.POINTS) whose names and versions key it
    reads: tuple[str, ...] = ()  # glob patterns under sftbuild/: templates and tables whose contents key it
    untrusted: bool = False  # runs harvested code (in the sandbox): refused where nothing confines its files


STAGES = (
    Stage("harvest", "sftbuild.harvest.stage", "extract kernels from sources, with provenance and licence",
          plugins=("source", "catalog", "file_filter"), reads=("harvest/registry.yaml", "harvest/catalog/*.json"),
          untrusted=True),
    Stage("bind", "sftbuild.bind.stage", "tie each kernel to a reference and a launch, or say why not",
          prepares=True, plugins=("binder",), reads=("ops/aten_bindings.yaml", "ops/opdb_catalogues/*.json"),
          untrusted=True),
    Stage("describe", "sftbuild.describe.stage", "static features and instructions in English and Chinese",
          keyed_on_binding=True, prepares=True, plugins=("describer",), reads=("describe/templates/*.j2",)),
    Stage("validate", "sftbuild.validate.stage", "compile, resources, correctness, anti-cheat, memcheck, timing",
          keyed_on_binding=True, first="sftbuild.dedupe.prevalidate",
          plugins=("static_check", "runtime_check", "candidate_kind"),
          reads=("trial/templates/*.j2", "trial/torch_lean.cuh", "trial/cuda_shim/**/*.h",
                 "ops/tolerance.py", "ops/opdb_catalogues/*.json"), untrusted=True),
    Stage("dedupe", "sftbuild.dedupe.stage", "exact and near duplicates, decontamination, quality filters",
          plugins=("filter",)),
    Stage("review", "sftbuild.review.stage", "seeded, stratified sample for human review"),
    Stage("export", "sftbuild.output.stage", "SFT tables, RLVR tasks (verl, TRL) and the dataset card",
          plugins=("exporter",)),
)
NAMES = tuple(s.name for s in STAGES)
BINDING_KEYED = tuple(s.name for s in STAGES if s.keyed_on_binding)


def get(name: str) -> Stage:
    for s in STAGES:
        if s.name == name:
            return s
    raise KeyError(f"unknown stage {name!r} (stages: {', '.join(NAMES)})")


def module(name: str) -> ModuleType:
    """The module that runs stage `name`, imported on first use (a stage imports what its records need,
    torch and the op registry included, when they need it)."""
    return importlib.import_module(get(name).module)


def first(name: str) -> ModuleType | None:
    """The module whose run(ctx) runs just before stage `name`, or None."""
    st = get(name)
    return importlib.import_module(st.first) if st.first else None
