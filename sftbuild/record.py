"""The kernel record: the one object that flows through every stage.

A record is immutable once harvested (a frozen dataclass: a change is a new record, built with
`dataclasses.replace`). Its id hashes the language and the exact
code, so a one-byte change is a new record and every stage result keyed to the
id is a statement about exactly the bytes that will be emitted.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from sftbuild.binding import Binding

LANGUAGES = ("cuda", "triton", "kernelbench")


def code_hash(language: str, code: str) -> str:
    h = hashlib.sha256()
    h.update(language.encode())
    h.update(b"\0")
    h.update(code.encode("utf-8"))
    return h.hexdigest()[:24]


@dataclasses.dataclass(frozen=True)
class Record:
    """One harvested kernel.

    entry:      what to launch: {"kernels": [names], "launch_sites": [...], ...}
    binding:    what it is checked against (a `sftbuild.binding.Binding`), or None when unbound: a
                source sets it at harvest (declared or exact; a dict given here is read by
                `Binding.from_dict` as the source's declaration); read from the store, it is the
                current one from the bindings table
    unbound:    read from the store: why the bind stage found no binding (None otherwise)
    provenance: {"source_kind", "url", "commit", "path", "lines": [a, b],
                 "package", "version", "license"}
    """

    language: str
    code: str
    source: str
    entry: dict[str, Any] = dataclasses.field(default_factory=dict)
    binding: Binding | None = None
    provenance: dict[str, Any] = dataclasses.field(default_factory=dict)
    id: str = ""
    unbound: str | None = None

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise ValueError(f"unknown language {self.language!r}; expected one of {LANGUAGES}")
        expected = code_hash(self.language, self.code)
        if self.id and self.id != expected:
            raise ValueError(f"record id {self.id} does not match its code hash {expected}")
        object.__setattr__(self, "id", expected)
        if isinstance(self.binding, dict):  # a source's declaration, as its manifest writes it
            object.__setattr__(self, "binding", Binding.from_dict(self.binding, how="declared",
                                                                  by=f"source:{self.source}"))

    @property
    def name(self) -> str:
        kernels = self.entry.get("kernels") or []
        return kernels[0] if kernels else self.id[:12]

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "binding": self.binding.to_dict() if self.binding else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Record":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})


def stable_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def config_hash(obj: Any) -> str:
    return hashlib.sha256(stable_json(obj).encode()).hexdigest()[:16]
