"""Sources: where kernels live. Each yields (relative path, bytes) plus provenance.

A source is described by a registry entry (see registry.yaml). Only the
installed-torch source is needed offline; other kinds plug in here.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import importlib.metadata
import os
from pathlib import Path
from typing import Any, Iterator

import yaml

REGISTRY = Path(__file__).with_name("registry.yaml")


class SourceError(Exception):
    """A source that cannot be read; the harvest reports it and goes on with the others."""


@dataclasses.dataclass
class Source:
    name: str
    kind: str
    location: str = ""
    revision: str = ""
    license: str = ""
    include: list[str] = dataclasses.field(default_factory=list)
    exclude: list[str] = dataclasses.field(default_factory=list)
    bindings: list[dict] = dataclasses.field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict, where: str) -> "Source":
        if not isinstance(d, dict):
            raise SourceError(f"{where}: each source must be a mapping")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - fields
        if unknown:
            raise SourceError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} in source {d.get('name')!r}")
        for key in ("name", "kind"):
            if not isinstance(d.get(key), str):
                raise SourceError(f"{where}: source is missing {key!r}")
        return cls(**d)


def load_registry(path: str | os.PathLike = REGISTRY) -> dict[str, Source]:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise SourceError(f"registry {p} does not exist") from e
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise SourceError(f"registry {p} is not valid YAML: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("sources"), list):
        raise SourceError(f"registry {p}: expected a top-level 'sources:' list")
    out = {}
    for i, d in enumerate(data["sources"]):
        s = Source.from_dict(d, f"{p}: sources[{i}]")
        out[s.name] = s
    return out


def torch_root() -> Path:
    import torch

    return Path(torch.__file__).parent


def torch_provenance() -> dict[str, Any]:
    import torch

    return {
        "source_kind": "torch-aten",
        "url": "https://github.com/pytorch/pytorch",
        "commit": getattr(torch.version, "git_version", None),
        "package": "torch",
        "version": torch.__version__,
    }


def files(source: Source) -> Iterator[tuple[str, Path]]:
    """Files of a source, as (path relative to its root, absolute path)."""
    if source.kind == "torch-aten":
        root = torch_root() / "include"
    else:
        raise SourceError(f"source {source.name!r}: kind {source.kind!r} is not supported here")
    if not root.is_dir():
        raise SourceError(f"source {source.name!r}: {root} is not a directory")
    for pattern in source.include or ["**/*"]:
        for p in sorted(root.glob(pattern)):
            rel = p.relative_to(root).as_posix()
            if p.is_file() and not any(fnmatch.fnmatch(rel, x) for x in source.exclude):
                yield rel, p


def package_license(dist: str) -> str | None:
    try:
        meta = importlib.metadata.metadata(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    return meta.get("License-Expression") or meta.get("License") or None
