"""Source specs: a registry name, a registry file, or a string a source kind recognises.

`load_registry` reads a vetted-source registry (registry.yaml or the user's own) and
`parse_spec` turns one command-line spec into sources, asking the kinds in their order.
"""
from __future__ import annotations

import dataclasses
import os
import urllib.parse
from pathlib import Path

import yaml

from sftbuild.config import DuplicateKey, load_yaml
from sftbuild.harvest.kinds import KINDS
from sftbuild.harvest.sources import REGISTRY, REGISTRY_EXT, Source, SourceError


BUILTIN = "builtin"  # the spec naming the registry's default sources for this machine


def builtin(registry: dict[str, Source], gpu: bool) -> list[Source]:
    """The sources `builtin` names here: those whose `default` is "everywhere", and on a machine with
    a GPU those whose `default` is "gpu" too (the catalog's programs, the pinned packages)."""
    wanted = ("everywhere", "gpu") if gpu else ("everywhere",)
    return [s for s in registry.values() if s.default in wanted]


def load_registry(path: str | os.PathLike = REGISTRY) -> dict[str, Source]:
    p = Path(path)
    try:
        data = load_yaml(p.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise SourceError(f"registry {p} does not exist") from e
    except DuplicateKey as e:
        raise SourceError(f"registry {p}: {e}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise SourceError(f"registry {p} is not valid YAML: {e}") from e
    except OSError as e:  # a folder, an unreadable file
        raise SourceError(f"registry {p} cannot be read: {e.strerror or e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("sources"), list):
        raise SourceError(f"registry {p}: expected a top-level 'sources:' list")
    out = {}
    for i, d in enumerate(data["sources"]):
        s = Source.from_dict(d, f"{p}: sources[{i}]")
        if s.kind not in KINDS:
            raise SourceError(f"{p}: sources[{i}]: source {s.name!r}: unknown kind {s.kind!r} "
                              f"(known: {', '.join(KINDS.names())})")
        if s.params:
            s.params = KINDS.create(s.kind).check_params(s.params, f"{p}: sources[{i}]: source {s.name!r}")
        out[s.name] = s
    return out


def parse_spec(spec: str, registry: dict[str, Source]) -> list[Source]:
    """A command-line source: a registry name, a registry file, or what the first source kind
    (by `order`) recognises: pip:, inductor:, git URLs, archives, dataset files, folders, ...;
    any of them may end in `?key=value&...`, parameters of its kind (`torch-inductor?programs=300`).
    Any spec that names nothing usable is a SourceError, also one no file system can look up."""
    if "\0" in spec:
        raise SourceError(f"source {spec!r} contains a NUL character")
    if not spec.strip():  # Path("") is the current folder
        raise SourceError("a source named by an empty string is refused: name a registry entry, path, URL or "
                          "pip:NAME==VERSION")
    base, given = split_params(spec)
    if given is None:
        return _lookup(spec, registry)
    out = []
    for src in _lookup(base, registry):
        params = {**src.params, **given}
        out.append(dataclasses.replace(src, params=KINDS.create(src.kind).check_params(params, f"source {spec}")))
    return out


def _lookup(spec: str, registry: dict[str, Source]) -> list[Source]:
    try:
        return _parse(spec, registry)
    except (OSError, ValueError, RuntimeError) as e:  # a name too long, ~nobody, an unlistable folder
        raise SourceError(f"source {spec[:200]!r} cannot be looked up: {getattr(e, 'strerror', None) or e}") from None


def split_params(spec: str) -> tuple[str, dict | None]:
    """(spec, None) when it has no `?key=value&...` tail (or is an existing path); else (base, params)."""
    if "?" not in spec:
        return spec, None
    try:
        if Path(spec).expanduser().exists():
            return spec, None
    except (OSError, ValueError):
        pass
    base, _, query = spec.rpartition("?")
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise SourceError(f"source {spec}: parameters after '?' must be key=value pairs joined by '&'") from None
    params = dict(pairs)
    if len(params) != len(pairs):
        raise SourceError(f"source {spec}: a parameter is given twice")
    return base, params


def _parse(spec: str, registry: dict[str, Source]) -> list[Source]:
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
