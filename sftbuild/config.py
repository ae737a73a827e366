"""Configuration: one typed model, read from an optional sftbuild.yaml.

Every section is a dataclass and every field is declared once, with `opt(default,
help, ...)`: its default, the comment `sftbuild init` writes beside it, and the range
or choices a value must respect. The template and the checks are generated from that
one declaration. Unknown keys and wrong values are errors that name the key
(``validate.compile_timeout: expected a number, got 'soon'``). The defaults work
offline with no file at all.

A field declared with `plugins=KIND` selects plug-ins of that kind by name: a mapping
from name to that plug-in's parameters (`false` turns one off); each plug-in owns and
checks its own parameters (see `sftbuild.plugins`).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import shutil
import subprocess
import types
import typing
from pathlib import Path
from typing import Any, Callable

import yaml


class ConfigError(Exception):
    pass


def opt(default: Any, help: str = "", *, choices: tuple | None = None, lo: float | None = None,
        hi: float | None = None, lo_open: bool = False, hi_open: bool = False, plugins: str | None = None,
        validator: Callable[[Any], str | None] | None = None) -> Any:
    """A config field: its default, its help line, and the values it accepts.

    `validator(value)` returns None for a good value, else what is allowed ("a CUDA arch such as
    sm_90"); numbers must be finite, and within `lo`/`hi` where given.
    """
    meta = {"help": help, "choices": choices, "lo": lo, "hi": hi, "lo_open": lo_open, "hi_open": hi_open,
            "plugins": plugins, "validator": validator}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


ARCH = re.compile(r"^(sm|compute)_(\d{2,3})[af]?$")


@functools.lru_cache(maxsize=1)
def nvcc_archs() -> frozenset[str] | None:
    """The virtual archs (compute_XX) the nvcc on PATH or in CUDA_HOME knows, or None without one."""
    for nvcc in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if nvcc and os.path.exists(nvcc):
            try:
                out = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, timeout=20).stdout
            except (OSError, subprocess.TimeoutExpired):
                return None
            archs = frozenset(line.strip() for line in out.splitlines() if ARCH.match(line.strip()))
            return archs or None
    return None


def check_arch(value: str) -> str | None:
    """sm_XX or compute_XX (an `a`/`f` suffix allowed) that the installed nvcc lists, when there is one."""
    m = ARCH.match(value)
    if not m:
        return "a CUDA arch such as sm_90 or compute_90"
    known = nvcc_archs()
    if known is not None and f"compute_{m.group(2)}" not in known:
        listed = sorted({a.split("_")[1].rstrip("af") for a in known}, key=int)
        return f"an arch this nvcc knows (sm_ or compute_ with {', '.join(listed)})"
    return None


def check_gpus(value: str) -> str | None:
    """auto, none, or comma-separated GPU indices; whether they exist is checked when the executor starts."""
    if value in ("auto", "none"):
        return None
    ids = [s.strip() for s in value.split(",")]
    if ids and all(i.isdigit() and i.isascii() for i in ids) and len(set(ids)) == len(ids):
        return None
    return "auto, none, or distinct comma-separated GPU indices such as 0,1"


def _non_empty(value: str) -> str | None:
    """An empty name would be read as the current folder."""
    return "a non-empty name (a registry entry, path, URL or pip:NAME==VERSION)" if not value.strip() else None


@dataclasses.dataclass
class HarvestConfig:
    """Where kernels come from and which files are read."""
    sources: list[str] = opt(["builtin"], "registry names, local paths, git URLs pinned with @REV, "
                             "pip:PACKAGE==VERSION or registry YAML files; builtin: torch-aten, and on a machine "
                             "with a GPU also the program catalog (torch-inductor) and the pinned packages, "
                             "those the package index can be reached for (registry.yaml's `default:`)",
                             validator=_non_empty)
    registries: list[str] = opt([], "extra vetted-source registry files", validator=_non_empty)
    allow_unpinned: bool = opt(False, "accept git URLs without @REV")
    file_filters: dict[str, Any] = opt({}, "which files are read: every file filter runs unless set to false; "
                                       "e.g. {oversize: {max_bytes: 10000000}, vendored: {dirs: [ext]}}",
                                       plugins="file_filter")
    min_kernel_lines: int = opt(3, "shorter kernels are dropped as 'trivial'", lo=0)
    cache_dir: str = opt("", "git clones and downloads; default: <workspace>/cache")
    programs: int = opt(2000, "programs the torch-inductor source compiles from its catalog (a source spec "
                        "overrides it: torch-inductor?programs=300); a folder's programs are all taken unless set there",
                        lo=1, hi=100000)
    seed: int = opt(0, "seed of the torch-inductor catalog: which fusions are generated and the mixed order "
                    "(a source spec overrides it: torch-inductor?seed=1)")
    include_dirs: list[str] = opt([], "extra include folders for CUDA sources, relative to each source's root "
                                  "(the file's folder, the root, include/ and csrc/ are always searched)")


@dataclasses.dataclass
class BindConfig:
    """How kernels that harvest did not bind are tied to a reference and a launch."""
    binders: dict[str, Any] = opt({}, "binding strategies tried, in order, on kernels without a declared or "
                                  "exact binding; NAME: false turns one off", plugins="binder")
    probe_timeout: float = opt(300.0, "seconds per record for binders that run the kernel (probing)",
                               lo=0, lo_open=True)
    probe_workers_per_gpu: int = opt(0, "probe worker processes sharing each GPU (probes time nothing; "
                                     "Triton's JIT and package imports on the CPU are their bottleneck); "
                                     "0: three quarters of the cores per GPU, at most 12", lo=0, hi=64)


@dataclasses.dataclass
class DescribeConfig:
    """Instructions written for each kernel."""
    seed: int = opt(0, "same record + seed -> same instruction text")
    languages: list[str] = opt(["en", "zh"], "instruction languages", choices=("en", "zh"))
    levels: list[str] = opt(["brief", "detailed"], "instruction levels", choices=("brief", "detailed"))
    describers: dict[str, Any] = opt({}, "techniques looked for in the code and named in the text",
                                     plugins="describer")


@dataclasses.dataclass
class ValidateConfig:
    """Compile gate, resource limits, correctness trials, memory checks and timing."""
    arch: str = opt("sm_90", "nvcc -arch and Triton target", validator=check_arch)
    compile_timeout: float = opt(30.0, "seconds per compile", lo=0, lo_open=True)
    sample_timeout: float = opt(120.0, "seconds per record on the GPU before the worker is recycled",
                                lo=0, lo_open=True)
    workers_per_gpu: int = opt(0, "GPU worker processes per GPU: their trials overlap (Triton JIT and "
                                  "autotuning keep one worker's GPU mostly idle); timed loops take the GPU "
                                  "one at a time; 0: half the cores per GPU, at most 8", lo=0, hi=32)
    max_registers: int = opt(255, "registers per thread", lo=1)
    max_spill_bytes: int = opt(1024, "register spill bytes", lo=0)
    max_block_size: int = opt(1024, "threads per block", lo=1)
    shared_memory_budget: int = opt(232448, "shared memory bytes per block (227 KB opt-in on sm_90)", lo=0)
    shapes: int = opt(3, "shapes drawn from each op's shape pool", lo=1)
    seeds: int = opt(2, "random seeds per shape", lo=1)
    dtypes: str = opt("declared", "dtypes a program (KernelBench pair, Inductor program) runs at: declared (those its "
                                  "get_inputs() makes, or its binding names) | all (also the other float dtypes where "
                                  "its reference runs)", choices=("declared", "all"))
    memcheck: str = opt("sample", "compute-sanitizer memcheck on no, a sample of, or all records",
                        choices=("off", "sample", "all"))
    memcheck_fraction: float = opt(0.1, "share of records memchecked when memcheck is 'sample'", lo=0, hi=1)
    warmup: int = opt(10, "timing warm-up runs", lo=0)
    runs: int = opt(100, "timed runs; the median is reported", lo=1)
    timing: bool = opt(True, "time kernels against torch")
    compile_baseline: bool = opt(False, "also time torch.compile")
    max_slowdown: float | None = opt(None, "e.g. 1.5 drops kernels more than 1.5x slower than eager",
                                     lo=0, lo_open=True)
    max_speedup: float = opt(50.0, "faster than this over eager is flagged for review", lo=0, lo_open=True)
    max_stack_bytes: int = opt(65536, "stack bytes per thread", lo=0)
    racecheck: bool = opt(False, "also run racecheck where memcheck runs (code with __shared__ memory always "
                                 "gets racecheck and synccheck)")
    memcheck_timeout: float = opt(300.0, "seconds per memcheck run", lo=0, lo_open=True)
    cpu_interpret: bool = opt(True, "without a GPU, check Triton kernels in the interpreter (fp32, fp16)")
    nvcc: str = opt("", "path to nvcc; default: nvcc on PATH or in CUDA_HOME")
    static_checks: dict[str, Any] = opt({}, "code checks run before compiling; NAME: false turns one off",
                                        plugins="static_check")
    runtime_checks: dict[str, Any] = opt({}, "checks of every trial run; NAME: false turns one off",
                                         plugins="runtime_check")


@dataclasses.dataclass
class DedupeConfig:
    """Exact and near-duplicate removal, decontamination and quality filters."""
    ngram: int = opt(5, "token shingle size", lo=1)
    short_ngram: int = opt(3, "shingle size for short documents", lo=1)
    short_tokens: int = opt(50, "documents with fewer tokens use short_ngram", lo=0)
    num_perm: int = opt(256, "MinHash permutations", lo=1)
    bands: int = opt(32, "LSH bands; bands * rows <= num_perm", lo=1)
    rows: int = opt(8, "LSH rows per band", lo=1)
    threshold: float = opt(0.7, "Jaccard similarity at which two samples are near duplicates", lo=0, hi=1)
    abstract_threshold: float = opt(0.85, "similarity with identifiers abstracted away", lo=0, hi=1)
    seed: int = opt(1, "MinHash seed")
    scheme: str = opt("oph", "oph (one-permutation hashing) | affine32 (datasketch 2.0's scheme)",
                      choices=("oph", "affine32"))
    chunk_size: int = opt(2000, "documents per signature task", lo=1)
    benchmarks: list[str] = opt([], "benchmarks to decontaminate against: a name (e.g. KernelBench) drops records "
                                "harvested for that benchmark (inductor:DIR?benchmark=NAME) and records whose code or "
                                "program matches one of its programs; a path is a KernelBench-format dir/file, "
                                "dataset or fingerprint file. Dropped records say 'contaminated'")
    contamination_threshold: float = opt(0.5, "share of a sample's n-grams found in a benchmark", lo=0, hi=1)
    contamination_ngram: int = opt(10, "n-gram size for decontamination", lo=1)
    contamination_max_df: float = opt(0.05, "n-grams in more benchmark documents than this share are ignored",
                                      lo=0, hi=1)
    before_validation: bool = opt(True, "cluster near duplicates before validation, so validate checks one "
                                  "record per cluster first and the next only if it fails; false checks every "
                                  "record")
    filters: dict[str, Any] = opt({}, "quality filters, all on by default; NAME: {param: value} sets one's "
                                  "parameters, NAME: false turns it off", plugins="filter")


@dataclasses.dataclass
class ReviewConfig:
    """The human spot-check that gates export."""
    fraction: float = opt(0.1, "share of records sampled for human review", lo=0, hi=1, lo_open=True)
    seed: int = opt(0, "sample seed")
    max_reject_rate: float = opt(0.05, "export is blocked when more of the sample is rejected", lo=0, hi=1)
    defect_rate: float = opt(0.05, "the defect rate the sample must be able to rule out: it holds at least "
                             "ln(1-confidence)/ln(1-defect_rate) records (59 at 5%, 95%)",
                             lo=0, hi=1, lo_open=True, hi_open=True)
    confidence: float = opt(0.95, "confidence of that statement", lo=0, hi=1, lo_open=True, hi_open=True)
    overlap: float = opt(0.0, "share of the sample reviewed by two reviewers, for Cohen's kappa", lo=0, hi=1)


@dataclasses.dataclass
class ExportConfig:
    """What is written out."""
    out_dir: str = opt("", "default: <workspace>/export")
    formats: list[str] = opt([], "exporters to run (sftbuild list exporter); empty: every registered one")
    interpreter_only: str = opt("exclude", "records checked only in the CPU Triton interpreter: left out, or "
                                "exported in their own split `cpu_interpreter`", choices=("exclude", "split"))
    include_unbound: bool = opt(False, "export records with no reference (their instructions cannot say what "
                                "they compute)")


@dataclasses.dataclass
class ExecutorConfig:
    """Where tasks run."""
    kind: str = opt("local", "local process pools, or ray", choices=("local", "ray"))
    cpu_workers: int = opt(0, "processes for CPU work (parsing, compiling, Triton's interpreter); "
                           "0 = one per core", lo=0)
    gpus: str = opt("auto", "auto | none | comma-separated ids, e.g. 0,1", validator=check_gpus)
    ray_address: str = opt("", "an existing Ray cluster; empty starts a local one")


@dataclasses.dataclass
class SandboxConfig:
    """How compiles and runs of untrusted code are contained (see docs/threat-model.md)."""
    isolation: str = opt("auto", "OS isolation: auto (bubblewrap, else unshare with a read-only mount view "
                         "and Landlock, else Landlock alone; said once and recorded in each run manifest) | bwrap | "
                         "unshare | landlock (an error when unavailable) | none",
                         choices=("auto", "bwrap", "unshare", "landlock", "none"))
    network: bool = opt(False, "let untrusted code reach the network (never needed to validate)")
    cpu_seconds: int = opt(900, "CPU seconds per sandboxed process", lo=1)
    memory_gb: float = opt(16.0, "address space per sandboxed process, in GB (GPU runs are exempt: CUDA "
                           "reserves far more than it uses); compiles use at most 8", lo=0, lo_open=True)
    file_mb: int = opt(4096, "largest file a sandboxed process may write, in MB", lo=1)
    min_free_mb: int = opt(1024, "free space, in MB, below which a sandboxed command that may write to that disk "
                           "is ended (file_mb bounds one file, not how many); 0: never", lo=0)
    processes: int = opt(4096, "processes and threads of this user beyond which a sandboxed process may not "
                         "start more (CPU work only; not enforced for root)", lo=1)
    output_kb: int = opt(256, "stdout and stderr kept per sandboxed process, in KB (the rest is dropped)", lo=1)
    read_only: list[str] = opt([], "extra folders untrusted code may read, e.g. a CUDA toolkit "
                               "outside /usr and /opt")
    allow_unconfined: bool = opt(False, "run untrusted code even where no layer confines its files (no bubblewrap, "
                                 "no Landlock, no mount namespace); it can then read and write this user's files")


@dataclasses.dataclass
class Config:
    harvest: HarvestConfig = dataclasses.field(default_factory=HarvestConfig)
    bind: BindConfig = dataclasses.field(default_factory=BindConfig)
    describe: DescribeConfig = dataclasses.field(default_factory=DescribeConfig)
    validate: ValidateConfig = dataclasses.field(default_factory=ValidateConfig)
    dedupe: DedupeConfig = dataclasses.field(default_factory=DedupeConfig)
    review: ReviewConfig = dataclasses.field(default_factory=ReviewConfig)
    export: ExportConfig = dataclasses.field(default_factory=ExportConfig)
    executor: ExecutorConfig = dataclasses.field(default_factory=ExecutorConfig)
    sandbox: SandboxConfig = dataclasses.field(default_factory=SandboxConfig)

    def section(self, stage: str) -> Any:
        return getattr(self, stage)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def load(path: str | os.PathLike | None = None) -> Config:
    """Load a config file, or the defaults when `path` is None and no ./sftbuild.yaml exists."""
    if path is None:
        if not Path("sftbuild.yaml").exists():
            return Config()
        path = "sftbuild.yaml"
    p = Path(path)
    try:
        exists = p.is_file()
    except (OSError, ValueError) as e:
        raise ConfigError(f"config file {str(p)[:200]!r} cannot be looked up: {getattr(e, 'strerror', None) or e}")
    if not exists:
        raise ConfigError(f"config file {p} does not exist")
    try:
        data = load_yaml(p.read_text(encoding="utf-8"))
    except DuplicateKey as e:
        raise ConfigError(f"{p}: {e}") from None
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as e:
        raise ConfigError(f"{p} is not valid YAML: {e}") from e
    if data is None:
        return Config()
    return from_dict(data, source=str(p))


class DuplicateKey(yaml.YAMLError):
    """A mapping that names one key twice: plain YAML keeps the last and loses the first unsaid."""


class _StrictLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key, _ in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                line = key.start_mark.line + 1
                if (key.tag, key.value) in seen:
                    first = seen[key.tag, key.value]
                    where = f"line {line}" if first == line else f"lines {first} and {line}"
                    raise DuplicateKey(f"key {key.value!r} is written twice ({where}): YAML would keep only "
                                       f"the second; write it once")
                seen[key.tag, key.value] = line
        return super().construct_mapping(node, deep)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, except that a key written twice in one mapping raises DuplicateKey."""
    return yaml.load(text, Loader=_StrictLoader)


def from_dict(data: Any, source: str = "config") -> Config:
    try:
        cfg = build_section(Config, data, prefix="")
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    if cfg.dedupe.bands * cfg.dedupe.rows > cfg.dedupe.num_perm:
        d = cfg.dedupe
        raise ConfigError(f"{source}: dedupe.bands * dedupe.rows must not exceed dedupe.num_perm, got "
                          f"{d.bands} * {d.rows} = {d.bands * d.rows} > {d.num_perm}")
    return cfg


def override(cfg: Config, key: str, value: Any, flag: str = "") -> None:
    """Set `key` (section.field) in `cfg` from a command-line option, with the checks a file gets."""
    section, field = key.split(".")
    sec = getattr(cfg, section)
    f = {f.name: f for f in dataclasses.fields(sec)}[field]
    try:
        value = _coerce(typing.get_type_hints(type(sec))[field], value, key)
        _check(f.metadata, value, key)
    except ConfigError as e:
        raise ConfigError(f"{flag}: {e}" if flag else str(e)) from None
    setattr(sec, field, value)


# keys that became a plug-in's own parameters
MOVED = {
    "dedupe.min_tokens": "dedupe.filters.too_simple.min_tokens",
    "dedupe.max_line_length": "dedupe.filters.malformed.max_line_length",
    "dedupe.generated_exempt_sources": "dedupe.filters.generated.exempt_sources",
    "dedupe.licenses": "dedupe.filters.license.allowed",
    "harvest.max_file_bytes": "harvest.file_filters.oversize.max_bytes",
    "harvest.vendored_dirs": "harvest.file_filters.vendored.dirs",
    "describe.binders": "bind.binders",
}


def build_section(cls, data: Any, prefix: str):
    """An instance of dataclass `cls` from a mapping; errors name the key (`prefix` + field)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if key not in fields:
            hint = f"; it moved to {MOVED[name]}" if name in MOVED else ""
            raise ConfigError(f"{name}: unknown key{hint} (known: {', '.join(sorted(fields))})")
        kwargs[key] = _coerce(hints[key], value, name)
        _check(fields[key].metadata, kwargs[key], name)
    return cls(**kwargs)


def _check(meta, value: Any, name: str) -> None:
    """The field's declared range or choices."""
    if value is None or not meta:
        return
    if isinstance(value, list) and meta.get("choices") and not value:
        raise ConfigError(f"{name}: expected at least one of {', '.join(meta['choices'])}, got an empty list")
    for v in value if isinstance(value, list) else [value]:
        if meta.get("choices") and v not in meta["choices"]:
            raise ConfigError(f"{name}: expected one of {', '.join(meta['choices'])}, got {v!r}")
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{name}: must be a finite number, got {v}")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            lo, hi = meta.get("lo"), meta.get("hi")
            if lo is not None and (v <= lo if meta.get("lo_open") else v < lo):
                raise ConfigError(f"{name}: must be {'>' if meta.get('lo_open') else '>='} {lo}, got {v}")
            if hi is not None and (v >= hi if meta.get("hi_open") else v > hi):
                raise ConfigError(f"{name}: must be {'<' if meta.get('hi_open') else '<='} {hi}, got {v}")
        if meta.get("validator"):
            allowed = meta["validator"](v)
            if allowed:
                raise ConfigError(f"{name}: expected {allowed}, got {v!r}")


def _coerce(hint, value: Any, name: str):
    if dataclasses.is_dataclass(hint):
        return build_section(hint, value, prefix=f"{name}.")
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
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping, got {value!r}")
        key_t, val_t = typing.get_args(hint)
        return {_coerce(key_t, k, f"{name}"): (v if val_t is Any else _coerce(val_t, v, f"{name}.{k}"))
                for k, v in value.items()}
    if hint is Any:
        return value
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


# (name, default params, summary) of each plug-in of a kind, for the template's comments
PluginLister = Callable[[str], list[tuple[str, dict, str]]]


def template(plugins: PluginLister | None = None) -> str:
    """The commented config file `sftbuild init` writes: every field at its default, with its help.

    Plug-in selections are written as comments listing each plug-in of that kind with its
    parameters, so the file still loads to exactly the defaults.
    """
    lines = ["# sftbuild configuration. Every key is optional; the values shown are the defaults."]
    for section in dataclasses.fields(Config):
        cls = section.type if isinstance(section.type, type) else typing.get_type_hints(Config)[section.name]
        lines += ["", f"{section.name}:  # {(cls.__doc__ or '').strip()}"]
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            help_ = f.metadata.get("help", "")
            lines.append(f"  {f.name}: {_yaml(default)}" + (f"  # {help_}" if help_ else ""))
            if f.metadata.get("plugins") and plugins:
                for name, params, summary in plugins(f.metadata["plugins"]):
                    lines.append(f"  #   {name}: {_yaml(params)}  # {summary}")
    return "\n".join(lines) + "\n"


def _yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 20).strip().removesuffix("\n...").strip()


TEMPLATE = template()
