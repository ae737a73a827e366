"""Configuration: one typed model, read from an optional sftbuild.yaml.

Every section is a dataclass; unknown keys and wrongly typed values are errors
that name the key (``validate.compile_timeout: expected a number, got 'soon'``).
The defaults work offline with no file at all.
"""
from __future__ import annotations

import dataclasses
import os
import types
import typing
from pathlib import Path
from typing import Any

import yaml


class ConfigError(Exception):
    pass


@dataclasses.dataclass
class HarvestConfig:
    sources: list[str] = dataclasses.field(default_factory=lambda: ["torch-aten"])  # names or locations
    registries: list[str] = dataclasses.field(default_factory=list)  # extra registry YAML files
    allow_unpinned: bool = False
    max_file_bytes: int = 2_000_000
    min_kernel_lines: int = 3
    cache_dir: str = ""  # default: <workspace>/cache
    vendored_dirs: list[str] = dataclasses.field(default_factory=list)  # more folder names to skip as vendored


@dataclasses.dataclass
class DescribeConfig:
    seed: int = 0
    languages: list[str] = dataclasses.field(default_factory=lambda: ["en", "zh"])
    levels: list[str] = dataclasses.field(default_factory=lambda: ["brief", "detailed"])


@dataclasses.dataclass
class ValidateConfig:
    arch: str = "sm_90"
    compile_timeout: float = 30.0
    sample_timeout: float = 120.0
    max_registers: int = 255
    max_spill_bytes: int = 1024
    max_block_size: int = 1024
    shared_memory_budget: int = 232448  # bytes per block on sm_90 (227 KB opt-in)
    shapes: int = 3
    seeds: int = 2
    memcheck: str = "sample"  # off | sample | all
    memcheck_fraction: float = 0.1
    warmup: int = 10
    runs: int = 100
    timing: bool = True
    compile_baseline: bool = False  # also time torch.compile
    max_slowdown: float | None = None  # e.g. 1.5 drops kernels >1.5x slower than eager
    max_speedup: float = 50.0  # faster than this over eager is flagged for review
    max_stack_bytes: int = 65536
    racecheck: bool = False  # also run compute-sanitizer racecheck where memcheck runs
    memcheck_timeout: float = 300.0
    cpu_interpret: bool = True  # without a GPU, check Triton kernels in the interpreter (fp32, fp16)
    nvcc: str = ""  # path; default: found on PATH or in CUDA_HOME


@dataclasses.dataclass
class DedupeConfig:
    ngram: int = 5
    short_ngram: int = 3
    short_tokens: int = 50
    num_perm: int = 256
    bands: int = 32
    rows: int = 8
    threshold: float = 0.7
    abstract_threshold: float = 0.85
    seed: int = 1
    scheme: str = "oph"  # oph (one-permutation hashing) | affine32 (datasketch 2.0's scheme)
    chunk_size: int = 2000
    benchmarks: list[str] = dataclasses.field(default_factory=list)
    contamination_threshold: float = 0.5
    contamination_ngram: int = 10
    contamination_max_df: float = 0.05
    generated_exempt_sources: list[str] = dataclasses.field(default_factory=lambda: ["inductor"])
    min_tokens: int = 20
    max_line_length: int = 1000
    licenses: list[str] = dataclasses.field(default_factory=list)  # allowed SPDX ids; empty: any known


@dataclasses.dataclass
class ReviewConfig:
    fraction: float = 0.1
    seed: int = 0
    max_reject_rate: float = 0.05


@dataclasses.dataclass
class ExportConfig:
    out_dir: str = ""  # default: <workspace>/export
    formats: list[str] = dataclasses.field(default_factory=lambda: ["sft", "chat", "rlvr", "card"])


@dataclasses.dataclass
class ExecutorConfig:
    kind: str = "local"  # local | ray
    cpu_workers: int = 0  # 0: one per core
    gpus: str = "auto"  # auto | none | comma-separated ids
    ray_address: str = ""


@dataclasses.dataclass
class Config:
    harvest: HarvestConfig = dataclasses.field(default_factory=HarvestConfig)
    describe: DescribeConfig = dataclasses.field(default_factory=DescribeConfig)
    validate: ValidateConfig = dataclasses.field(default_factory=ValidateConfig)
    dedupe: DedupeConfig = dataclasses.field(default_factory=DedupeConfig)
    review: ReviewConfig = dataclasses.field(default_factory=ReviewConfig)
    export: ExportConfig = dataclasses.field(default_factory=ExportConfig)
    executor: ExecutorConfig = dataclasses.field(default_factory=ExecutorConfig)

    def section(self, stage: str) -> Any:
        return getattr(self, stage)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


CHOICES = {
    "executor.kind": ("local", "ray"),
    "validate.memcheck": ("off", "sample", "all"),
    "dedupe.scheme": ("oph", "affine32"),
}


def load(path: str | os.PathLike | None = None) -> Config:
    """Load a config file, or the defaults when `path` is None and no ./sftbuild.yaml exists."""
    if path is None:
        if not Path("sftbuild.yaml").exists():
            return Config()
        path = "sftbuild.yaml"
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p} is not valid YAML: {e}") from e
    if data is None:
        return Config()
    return from_dict(data, source=str(p))


def from_dict(data: Any, source: str = "config") -> Config:
    cfg = _build(Config, data, prefix="")
    for key, allowed in CHOICES.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value not in allowed:
            raise ConfigError(f"{source}: {key}: expected one of {', '.join(allowed)}, got {value!r}")
    if not 0 < cfg.review.fraction <= 1:
        raise ConfigError(f"{source}: review.fraction: must be in (0, 1], got {cfg.review.fraction}")
    if cfg.dedupe.bands * cfg.dedupe.rows > cfg.dedupe.num_perm:
        raise ConfigError(f"{source}: dedupe.bands * dedupe.rows must not exceed dedupe.num_perm")
    return cfg


def _build(cls, data: Any, prefix: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if key not in fields:
            raise ConfigError(f"{name}: unknown key (known: {', '.join(sorted(fields))})")
        kwargs[key] = _coerce(hints[key], value, name)
    return cls(**kwargs)


def _coerce(hint, value: Any, name: str):
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, prefix=f"{name}.")
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _coerce(args[0], value, name)
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise ConfigError(f"{name}: expected a list, got {value!r}")
        return [_coerce(item, v, f"{name}[{i}]") for i, v in enumerate(value)]
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{name}: unsupported type {hint}")


TEMPLATE = """\
# sftbuild configuration. Every key is optional; the values shown are the defaults.

harvest:
  # Sources: built-in registry names (torch-aten, torch-inductor, ...), local paths,
  # git URLs pinned with @REV, pip:PACKAGE==VERSION, or registry YAML files.
  sources: [torch-aten]
  registries: []          # extra vetted-source registry files
  allow_unpinned: false   # refuse git URLs without @REV
  max_file_bytes: 2000000 # larger files are skipped with reason 'oversize'
  min_kernel_lines: 3     # shorter kernels are dropped as 'trivial'
  cache_dir: ""           # default: <workspace>/cache (git clones, downloads)
  vendored_dirs: []       # folder names skipped as vendored, besides third_party/, cutlass/, ...

describe:
  seed: 0                 # same record + seed -> same instruction text
  languages: [en, zh]
  levels: [brief, detailed]

validate:
  arch: sm_90             # nvcc -arch / Triton target
  compile_timeout: 30     # seconds per compile
  sample_timeout: 120     # seconds per record on the GPU before the worker is recycled
  max_registers: 255
  max_spill_bytes: 1024
  max_block_size: 1024
  shared_memory_budget: 232448
  shapes: 3               # shapes drawn from each op's shape pool
  seeds: 2
  memcheck: sample        # off | sample | all  (compute-sanitizer memcheck)
  memcheck_fraction: 0.1
  warmup: 10
  runs: 100
  timing: true
  compile_baseline: false # also time torch.compile
  max_slowdown: null      # e.g. 1.5 drops kernels more than 1.5x slower than eager
  max_speedup: 50         # faster than this over eager is flagged for review
  max_stack_bytes: 65536
  racecheck: false        # also run racecheck where memcheck runs
  memcheck_timeout: 300
  cpu_interpret: true     # without a GPU, check Triton kernels in the interpreter (fp32, fp16)
  nvcc: ""                # default: nvcc on PATH or in CUDA_HOME

dedupe:
  ngram: 5
  short_ngram: 3
  short_tokens: 50
  num_perm: 256
  bands: 32
  rows: 8
  threshold: 0.7
  abstract_threshold: 0.85
  seed: 1
  scheme: oph             # oph (one-permutation hashing) | affine32 (datasketch 2.0's scheme)
  chunk_size: 2000        # documents per signature task
  benchmarks: []          # KernelBench-format dirs/files or fingerprint files to decontaminate against
  contamination_threshold: 0.5
  contamination_ngram: 10
  contamination_max_df: 0.05
  generated_exempt_sources: [inductor]
  min_tokens: 20
  max_line_length: 1000
  licenses: []            # allowed SPDX ids, empty = any known licence

review:
  fraction: 0.1           # share of records sampled for human review
  seed: 0
  max_reject_rate: 0.05   # export is blocked when more of the sample is rejected

export:
  out_dir: ""             # default: <workspace>/export
  formats: [sft, chat, rlvr, card]

executor:
  kind: local             # local | ray
  cpu_workers: 0          # 0 = one per core
  gpus: auto              # auto | none | 0,1
  ray_address: ""
"""
