"""Source specs: a registry name, a registry file, or a string a source kind recognises.

`load_registry` reads a vetted-source registry (registry.yaml or the user's own) and
`parse_spec` turns one command-line spec into sources, asking the kinds in their order.
"""
from __future__ import annotations

import os
from pathlib import Path

import yaml

from sftbuild.harvest.kinds import KINDS
from sftbuild.harvest.sources import REGISTRY, REGISTRY_EXT, Source, SourceError


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
        if s.kind not in KINDS:
            raise SourceError(f"{p}: sources[{i}]: source {s.name!r}: unknown kind {s.kind!r} "
                              f"(known: {', '.join(KINDS.names())})")
        out[s.name] = s
    return out


def parse_spec(spec: str, registry: dict[str, Source]) -> list[Source]:
    """A command-line source: a registry name, a registry file, or what the first source kind
    (by `order`) recognises: pip:, inductor:, git URLs, archives, dataset files, folders, ...
    Any spec that names nothing usable is a SourceError, also one no file system can look up."""
    if "\0" in spec:
        raise SourceError(f"source {spec!r} contains a NUL character")
    try:
        return _parse_spec(spec, registry)
    except (OSError, ValueError, RuntimeError) as e:  # a name too long, ~nobody, an unlistable folder
        raise SourceError(f"source {spec[:200]!r} cannot be looked up: {getattr(e, 'strerror', None) or e}") from None


def _parse_spec(spec: str, registry: dict[str, Source]) -> list[Source]:
    if spec in registry:
        return [registry[spec]]
    p = Path(spec).expanduser()
    if spec.endswith(REGISTRY_EXT) and p.is_file():
        return list(load_registry(p).values())
    for kind in KINDS.configured({}):
        src = kind.recognise(spec, p)
        if src is not None:
            return [src]
    if spec.endswith(REGISTRY_EXT):
        raise SourceError(f"registry file {spec} does not exist")
    if p.is_symlink() and not p.exists():
        raise SourceError(f"path {spec} is a broken symlink")
    if not p.exists():
        if "/" in spec or spec.startswith("."):
            raise SourceError(f"path {spec} does not exist")
        raise SourceError(f"unknown source {spec!r}: not a registry name ({', '.join(sorted(registry))}), "
                          f"path, URL, pip:NAME==VERSION or dataset file")
    raise SourceError(f"path {spec} is neither a folder, a .py module nor a dataset file")
