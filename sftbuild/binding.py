"""A binding: what a record is checked against, how it was found, and the evidence for it.

A binding is derived, never part of the record: the store keeps one current binding per record
in its `bindings` table (or an `unbound` row with the reason), as the JSON of `Binding.to_dict()`,
and fills `record.binding` with the Binding when it reads records. Readers take the Binding and
read its attributes (`op`, `harness`, `call`, ...); dicts are converted at the store's and the
sources' boundary only (`from_dict`, `to_dict`).

kind    op | inductor | kernelbench | program
target  the op's name (kind op) or the program's id (inductor, kernelbench, program)
how     declared | exact | inferred | probed | package_reference | file_reference
by      who found it: the binder's name, or `source:<name>` for a source manifest
launch  the launch contract: harness and harness_args for CUDA, the Python entry (`call`) for
        Triton, `reference`/`program` for programs; its keys are spread into `to_dict()`
evidence shapes and dtypes tried, worst error, candidates rejected, and a `why` sentence
values  (in the launch, optional) the value classes the binding's domain allows (sftbuild.ops.values);
        absent: the op's own, [] for its own draw only

`key` hashes everything that changes what validate checks (kind, target, launch, params,
dtypes, constraints, also), not how it was found nor the evidence: describe and validate key
their results on it, so a record whose binding changes is described and validated again.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

KINDS = ("op", "inductor", "kernelbench", "program")
HOWS = ("declared", "exact", "inferred", "probed", "package_reference", "file_reference")
LEGACY_HOW = {"manifest": "declared"}  # the names stored before bindings were typed
_OWN = ("kind", "op", "program", "target", "how", "by", "params", "dtypes", "constraints", "also",
        "evidence", "key")


def _launch(name: str, doc: str) -> property:
    """A key of the launch contract, read as an attribute (None where the binding has none)."""
    return property(lambda self: self.launch.get(name), doc=doc)


@dataclasses.dataclass(frozen=True)
class Binding:
    kind: str
    target: str
    how: str
    by: str = ""
    launch: dict = dataclasses.field(default_factory=dict)
    params: dict = dataclasses.field(default_factory=dict)
    dtypes: tuple = ()
    constraints: dict = dataclasses.field(default_factory=dict)
    also: tuple = ()
    evidence: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"binding kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.how not in HOWS:
            raise ValueError(f"binding how {self.how!r} is not one of {', '.join(HOWS)}")
        object.__setattr__(self, "dtypes", tuple(self.dtypes or ()))
        object.__setattr__(self, "also", tuple(self.also or ()))

    # the launch contract's keys that validate, describe, dedupe, review and export read
    harness = _launch("harness", "the CUDA harness template that calls the kernel (validate/templates)")
    harness_args = _launch("harness_args", "the harness template's values")
    call = _launch("call", "how a Triton kernel's Python entry is called (probe.call_contract)")
    reference = _launch("reference", "a program binding's reference source (KernelBench Model, Inductor graph)")
    launcher = _launch("launcher", "the host launcher a CUDA harness calls")
    layouts = _launch("layouts", "the layouts the trials may use")
    sizes = _launch("sizes", "a program's size constants that vary (None: every one)")
    values = _launch("values", "the value classes the binding's domain allows (sftbuild.ops.values)")
    package_reference = _launch("package_reference", "the package's own reference the op was probed against")
    solution = _launch("solution", "an Inductor kernel's whole output program")
    kernel = _launch("kernel", "the kernel an Inductor binding runs inside its program")

    @property
    def op(self) -> str | None:
        """The op's name, for a binding of kind op."""
        return self.target if self.kind == "op" else None

    @property
    def program(self) -> str | None:
        """The program's id, for a binding of any other kind."""
        return None if self.kind == "op" else (self.target or None)

    @property
    def key(self) -> str:
        """A hash of what validate checks: equal keys, equal verdicts."""
        checked = {"kind": self.kind, "target": self.target, "launch": self.launch, "params": self.params,
                   "dtypes": list(self.dtypes), "constraints": self.constraints, "also": list(self.also)}
        blob = json.dumps(checked, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        """The dict validate reads (`record.binding`), with `by`, `evidence` and `key`."""
        out: dict[str, Any] = {**self.launch, "kind": self.kind, "how": self.how}
        if self.kind == "op":
            out["op"] = self.target
        elif self.target:
            out.setdefault("program", self.target)
        for name in ("by", "params", "constraints", "evidence"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        if self.dtypes:
            out["dtypes"] = list(self.dtypes)
        if self.also:
            out["also"] = list(self.also)
        out["key"] = self.key
        return out

    @classmethod
    def from_dict(cls, d: dict, how: str = "declared", by: str = "", evidence: dict | None = None) -> "Binding":
        """A Binding from a binding dict as sources, binders and older workspaces write it.

        `how` and `by` fill in what the dict does not say; `manifest` reads as `declared`, and a
        binder's name that is no `how` reads as `inferred`, with the name kept in `by`."""
        if not isinstance(d, dict):
            raise ValueError(f"a binding must be a mapping, got {type(d).__name__}")
        kind = d.get("kind") or "op"
        raw = d.get("how") or how
        found = LEGACY_HOW.get(raw, raw)
        if found not in HOWS:
            found, by = "inferred", by or raw
        by = d.get("by") or by or (raw if raw != found else "")
        target = d.get("op") if kind == "op" else (d.get("program") or d.get("target") or "")
        if kind == "op" and not target:
            raise ValueError("an op binding names no op")
        return cls(kind=kind, target=target or "", how=found, by=by,
                   launch={k: v for k, v in d.items() if k not in _OWN},
                   params=dict(d.get("params") or {}), dtypes=tuple(d.get("dtypes") or ()),
                   constraints=dict(d.get("constraints") or {}), also=tuple(d.get("also") or ()),
                   evidence=dict(d.get("evidence") or evidence or {}))


def key_of(binding: Binding | None) -> str:
    """The key of a record's binding, '' when unbound (the key results of unbound records carry)."""
    return binding.key if binding else ""


def summary(evidence: dict | None) -> str:
    """One line of evidence for `sftbuild bindings`: shapes, dtypes, worst error, why."""
    ev = evidence or {}
    parts = []
    if ev.get("shapes"):
        parts.append(f"{len(ev['shapes'])} shapes")
    if ev.get("dtypes"):
        parts.append("dtypes " + ",".join(map(str, ev["dtypes"])))
    if ev.get("worst_error") is not None:
        parts.append(f"worst error {ev['worst_error']:.3g}" if isinstance(ev["worst_error"], (int, float))
                     else f"worst error {ev['worst_error']}")
    for name in ("candidates_rejected", "candidates_tried"):
        if ev.get(name):
            n = ev[name] if isinstance(ev[name], int) else len(ev[name])
            parts.append(f"{n} {name.replace('_', ' ')}")
    if ev.get("why"):
        parts.append(str(ev["why"]))
    return "; ".join(parts)


# why a record stays unbound: the cause codes binders report, furthest reached last
CAUSES = ("no_entry_point", "no_op_matched", "compile_error", "missing_header", "toolchain", "import_failed",
          "needs_gpu_to_probe")


# a failed compile's reason (the compile gate's, validate's drop reason) -> its cause
COMPILE_CAUSES = {"toolchain": "toolchain", "closure_error": "toolchain", "missing_header": "missing_header",
                  "compile_error": "compile_error", "compile_timeout": "compile_error",
                  "unsafe_include": "compile_error"}


def furthest(causes) -> str:
    """The cause that got furthest of `causes` (no_op_matched when there is none)."""
    return max(causes, key=CAUSES.index, default="no_op_matched")
