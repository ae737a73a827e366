"""What every exported row carries, and which split a record goes to.

A `Sample` is one record on its way out: its code byte for byte as validated, its
instructions, the validate stage's payload and environment, and its review row. `meta`
gives the columns every row of every table carries (id, language, op or program, source,
licence, validation summary, review verdict), with a fixed schema so that every parquet file
has the same one whether or not a value is known. Schemas are written as plain type names
("string", "int64", nested dicts and one-item lists) and become `datasets` features only when
a table is written (`to_features`), so listing the exporters never imports `datasets`.

Splits: `train` holds records whose correctness was checked on a GPU; `cpu_interpreter`
holds records checked only in the CPU Triton interpreter (exported only when
`export.interpreter_only` is `split`); unbound records (nothing to check them against) are
exported only with `export.include_unbound`, as split `unbound`.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from sftbuild.binding import Binding
from sftbuild.record import Record

SPLITS = ("train", "cpu_interpreter", "unbound")
ERRORS = ("max_abs", "max_rel", "norm_rel")

VALIDATION = {
    "where": "string",  # "gpu" or "cpu_interpreter"
    "gpu": "string", "driver": "string", "cuda": "string", "torch": "string", "triton": "string", "nvcc": "string",
    "trials": "int64", "shapes": "int64", "dtypes": "string",
    **{f"worst_{k}": "float64" for k in ERRORS},
    "speedup": "float64",
}
REVIEW = {"sampled": "bool", "verdict": "string", "reviewer": "string", "reason": "string"}
META = {
    "id": "string", "language": "string", "kernel": "string", "op": "string", "program": "string",
    "binding": "string", "source": "string", "license": "string", "url": "string", "path": "string",
    "validation": VALIDATION, "review": REVIEW,
}
MESSAGE = [{"role": "string", "content": "string"}]


@dataclasses.dataclass
class Sample:
    """One exported record and what earlier stages said of it."""

    record: Record
    instructions: dict[str, str]  # "en:detailed" -> text, as the describe stage stored them
    validation: dict[str, Any]  # the validate stage's payload
    env: dict[str, Any] = dataclasses.field(default_factory=dict)  # the validate verdict's environment
    review: dict[str, Any] | None = None  # the record's review row, when it was sampled
    split: str = "train"

    def variants(self) -> list[str]:
        """Instruction keys ("en:brief", ...) in a fixed order."""
        return sorted(self.instructions)

    def prompt(self) -> str:
        """The one instruction an RLVR task shows: English and detailed where there is one."""
        return self.instructions.get("en:detailed") or next(iter(self.instructions.values()), "")


@dataclasses.dataclass
class LocalPaths:
    """Rewrites the builder's own paths out of exported values, the code excepted (it is emitted as
    validated): a path under a local source's root becomes relative to that root (the root itself,
    its folder's name), one under the workspace relative to it, one under the home folder `~/...`;
    a `file://` URL is no URL of the published row and becomes None."""

    roots: list[tuple[str, str]]  # (absolute prefix, what stands for it), longest first

    @classmethod
    def of(cls, records, workspace) -> LocalPaths:
        roots = {str(Path(workspace).absolute()): "", str(Path.home()): "~"}
        for rec in records:
            url = str(rec.provenance.get("url") or "")
            for local in (url[len("file://"):] if url.startswith("file://") else "", rec.source):
                if local.startswith("/") and len(local) > 1:
                    roots[unquote(local).rstrip("/")] = Path(unquote(local)).name
        roots.pop("/", None)
        return cls(sorted(roots.items(), key=lambda kv: -len(kv[0])))

    def __call__(self, value):
        if isinstance(value, str):
            for root, name in self.roots:
                if root in value:  # the root as a whole path component, not the start of a longer name
                    value = re.sub(re.escape(root) + r"(/|(?![\w.-]))",
                                   lambda m: (name or ".") + m.group(1) if name or not m.group(1) else "", value)
            return value
        if isinstance(value, dict):
            return {self(k): self(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        return value

    def record(self, rec: Record) -> Record:
        """The record as it is published: the same code and id, its other fields without local paths."""
        prov = {k: v for k, v in rec.provenance.items() if k != "tree"}  # the workspace's copy of the source
        if str(prov.get("url") or "").startswith("file://"):
            prov["url"] = None
        binding = Binding.from_dict(self(rec.binding.to_dict())) if rec.binding else None
        return dataclasses.replace(rec, source=self(rec.source), entry=self(rec.entry), binding=binding,
                                   provenance=self(prov))


def where(payload: dict) -> str:
    """Where correctness ran: a GPU worker records its GPU in the payload's env; the CPU interpreter does not."""
    return "gpu" if (payload.get("env") or {}).get("gpu") else "cpu_interpreter"


def bound(record: Record) -> bool:
    """The bind stage gave it a reference: an op, a program, or its file's CPU function."""
    return bool(record.binding)


def program(record: Record) -> str | None:
    b = record.binding
    if b and b.kind == "inductor":
        return b.program or record.name
    if b and b.kind == "kernelbench":
        return (record.provenance.get("path") or record.name)
    return None


def validation(sample: Sample) -> dict:
    p, env = sample.validation, {**sample.env, **(sample.validation.get("env") or {})}
    trials = p.get("trials") or []
    shapes = {json.dumps(t.get("shape"), sort_keys=True) for t in trials if t.get("shape") is not None}
    errors = p.get("errors") or {}
    return {
        "where": where(p), "gpu": (p.get("env") or {}).get("gpu"),  # the GPU the trials ran on, none in the interpreter
        "driver": _str(env.get("driver") or _smi_driver(env.get("gpus"))), "cuda": _str(env.get("cuda")), "torch": _str(env.get("torch")),
        "triton": _str(env.get("triton")), "nvcc": _str(env.get("nvcc")),
        "trials": len(trials), "shapes": len(shapes),
        "dtypes": ",".join(sorted({t["dtype"] for t in trials if t.get("dtype")})),
        **{f"worst_{k}": _float(errors.get(k)) for k in ERRORS},
        "speedup": _float(p.get("speedup")),
    }


def meta(sample: Sample) -> dict:
    """The columns every row carries."""
    rec, review = sample.record, sample.review
    b = rec.binding
    return {
        "id": rec.id, "language": _language(rec), "kernel": rec.name, "op": b.op if b else None,
        "program": program(rec), "binding": b.kind if b else None, "source": rec.source,
        "license": rec.provenance.get("license"), "url": rec.provenance.get("url"),
        "path": rec.provenance.get("path"), "validation": validation(sample),
        "review": {"sampled": review is not None, "verdict": (review or {}).get("verdict"),
                   "reviewer": (review or {}).get("reviewer"), "reason": (review or {}).get("reason") or None},
    }


def task_json(sample: Sample) -> str:
    """The RLVR task `sftbuild.validate.reward.reward` takes: what to check a candidate against."""
    rec, timing = sample.record, sample.validation.get("timing") or {}
    binding = rec.binding.to_dict() if rec.binding else None
    return json.dumps({"task_id": rec.id, "language": rec.language, "binding": binding, "entry": rec.entry,
                       "baseline_ms": {k: (v.get("eager_ms") or {}).get("median") for k, v in timing.items()}},
                      sort_keys=True)


def features(**columns) -> dict:
    """The schema of a table: its own columns, then the metadata every row carries."""
    return {**columns, **META}


def to_features(schema):
    """`datasets` features for a schema of type names, nested dicts and one-item lists."""
    import datasets  # imported by the writing only: it brings pandas and torch (seconds)

    def convert(x):
        if isinstance(x, dict):
            return {k: convert(v) for k, v in x.items()}
        if isinstance(x, list):
            return [convert(x[0])]
        return datasets.Value(x)
    return datasets.Features(convert(schema))


def _language(rec: Record) -> str:
    """cuda or triton; a KernelBench module by the backend its kernels use."""
    if rec.language == "kernelbench":
        return rec.entry.get("backend") if rec.entry.get("backend") in ("cuda", "triton") else rec.language
    return rec.language


def _smi_driver(gpus) -> str | None:
    """The driver from the host environment's `nvidia-smi` line ("NVIDIA H200, 570.86.15")."""
    first = (gpus or [""])[0]
    return first.split(",")[-1].strip() if "," in first else None


def _str(v) -> str | None:
    return None if v is None else str(v)


def _float(v) -> float | None:
    return None if v is None else float(v)
