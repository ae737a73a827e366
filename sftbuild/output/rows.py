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
from typing import Any

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


def where(payload: dict) -> str:
    """Where correctness ran: a GPU worker records its GPU in the payload's env; the CPU interpreter does not."""
    return "gpu" if (payload.get("env") or {}).get("gpu") else "cpu_interpreter"


def bound(record: Record) -> bool:
    """The bind stage gave it a reference: an op, a program, or its file's CPU function."""
    return bool(record.binding)


def program(record: Record) -> str | None:
    b = record.binding or {}
    if b.get("kind") == "inductor":
        return b.get("program") or record.name
    if b.get("kind") == "kernelbench":
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
    b = rec.binding or {}
    return {
        "id": rec.id, "language": _language(rec), "kernel": rec.name, "op": b.get("op"), "program": program(rec),
        "binding": b.get("kind") or ("op" if b.get("op") else None), "source": rec.source,
        "license": rec.provenance.get("license"), "url": rec.provenance.get("url"),
        "path": rec.provenance.get("path"), "validation": validation(sample),
        "review": {"sampled": review is not None, "verdict": (review or {}).get("verdict"),
                   "reviewer": (review or {}).get("reviewer"), "reason": (review or {}).get("reason") or None},
    }


def task_json(sample: Sample) -> str:
    """The RLVR task `sftbuild.validate.reward.reward` takes: what to check a candidate against."""
    rec, timing = sample.record, sample.validation.get("timing") or {}
    return json.dumps({"task_id": rec.id, "language": rec.language, "binding": rec.binding, "entry": rec.entry,
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
