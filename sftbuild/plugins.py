"""Plug-ins: one idiom for every extension point.

An extension point is a `Registry`: a kind ("source", "filter", "check", ...), a base
class, and the package that holds its plug-ins. A plug-in is a subclass of the base
with a `name`, a `version`, a docstring that says what it does, and optionally a `Params`
dataclass that owns its settings:

    from sftbuild.dedupe.filters import Filter, FILTERS

    @FILTERS.register
    class MaxLines(Filter):
        '''Drop samples longer than `lines` lines.'''
        name = "max_lines"
        version = 1  # raise it when a change could change a result: its stage redoes them

        @dataclasses.dataclass
        class Params:
            lines: int = 400

        def check(self, doc): ...

Adding one is one new file in the registry's package: the registry imports every
module of that package the first time it is asked for its members, so nothing else is
edited. Config picks plug-ins by name and passes their parameters, which are checked
against `Params` with the same rules as the rest of the config. Packages installed
beside sftbuild add plug-ins through the entry-point group `sftbuild.<kind>`.
`sftbuild list [KIND]` prints every registry and its members with their docstrings.

A stage's key holds the names and versions of the plug-ins it runs (`sftbuild.stages`), so
results stored under an older version are redone; tests/core/test_plugin_contract.py holds
every registered plug-in to its kind's contract.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import inspect
import pkgutil
from typing import Any, Generic, Iterator, TypeVar

from sftbuild.config import ConfigError, build_section

# Every extension point: its kind and the module that defines its registry. `sftbuild list`
# imports these; a stage imports its own registry directly.
POINTS = {
    "source": "sftbuild.harvest.kinds",
    "catalog": "sftbuild.harvest.catalog",
    "file_filter": "sftbuild.harvest.filters",
    "binder": "sftbuild.bind.binders",
    "describer": "sftbuild.describe.describers",
    "static_check": "sftbuild.validate.static",
    "runtime_check": "sftbuild.trial.checks",
    "candidate_kind": "sftbuild.trial.kinds",
    "filter": "sftbuild.dedupe.filters",
    "exporter": "sftbuild.output.exporters",
}


class PluginError(Exception):
    """An unknown plug-in name or a bad parameter; the message names both and the known choices."""


class Plugin:
    """Base of every plug-in: a name, a docstring, and parameters in `self.params`."""

    name: str = ""
    version: int = 0  # each plug-in declares its own (the contract test asks): part of its stage's key
    order: int = 100  # where it runs among its kind's plug-ins; ties go by name

    @dataclasses.dataclass
    class Params:
        pass

    def __init__(self, params: Any = None, **kw):
        self.params = params if params is not None else self.Params(**kw)

    @classmethod
    def summary(cls) -> str:
        doc = inspect.getdoc(cls) or ""
        return doc.strip().split("\n\n")[0].replace("\n", " ")


P = TypeVar("P", bound=Plugin)

REGISTRIES: dict[str, "Registry"] = {}


class Registry(Generic[P]):
    """The plug-ins of one kind, by name, in registration order."""

    def __init__(self, kind: str, base: type[P], package: str | None = None, doc: str = ""):
        self.kind, self.base, self.package, self.doc = kind, base, package, doc
        self._members: dict[str, type[P]] = {}
        self._loaded = package is None
        REGISTRIES[kind] = self

    def register(self, cls: type[P]) -> type[P]:
        """Class decorator: add `cls` under `cls.name`; two plug-ins may not share a name."""
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise TypeError(f"{cls!r} is not a {self.base.__name__}")
        if not cls.name:
            raise TypeError(f"{cls.__name__} has no name")
        old = self._members.get(cls.name)
        if old is not None and old.__qualname__ != cls.__qualname__:
            raise TypeError(f"{self.kind} {cls.name!r} registered twice ({old.__qualname__}, {cls.__qualname__})")
        self._members[cls.name] = cls
        return cls

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        pkg = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{self.package}.{info.name}")
        for ep in importlib.metadata.entry_points(group=f"sftbuild.{self.kind}"):
            ep.load()

    def names(self) -> list[str]:
        self._load()
        return list(self._members)

    def __iter__(self) -> Iterator[type[P]]:
        self._load()
        return iter(list(self._members.values()))

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._members

    def get(self, name: str) -> type[P]:
        self._load()
        try:
            return self._members[name]
        except KeyError:
            raise PluginError(f"unknown {self.kind} {name!r} (known: {', '.join(self._members)})") from None

    def create(self, name: str, params: dict | None = None, where: str = "") -> P:
        """An instance of plug-in `name` with `params` checked against its `Params` dataclass."""
        cls = self.get(name)
        try:
            return cls(build_section(cls.Params, params or {}, f"{where or self.kind}.{name}."))
        except ConfigError as e:
            raise PluginError(str(e)) from None

    def configured(self, selection: dict | None, where: str = "") -> list[P]:
        """The plug-ins a config field with `plugins=KIND` selects, in order.

        Every registered member runs with its default parameters unless `selection` names
        it: `name: {param: value}` sets parameters and `name: false` turns it off. Order
        is each class's `order`, then its name. Unknown names are errors that name the key.
        """
        selection = dict(selection or {})
        for name in selection:
            if name not in self:
                raise PluginError(f"{where or self.kind}.{name}: unknown {self.kind} "
                                  f"(known: {', '.join(self.names())})")
        chosen = []
        for cls in sorted(self, key=lambda c: (getattr(c, "order", 100), c.name)):
            value = selection.get(cls.name, {})
            if value is False:
                continue
            if value is True or value is None:
                value = {}
            if not isinstance(value, dict):
                raise PluginError(f"{where or self.kind}.{cls.name}: expected a mapping of parameters "
                                  f"or false, got {value!r}")
            chosen.append(self.create(cls.name, value, where))
        return chosen


def registry(kind: str) -> Registry:
    """The registry of one extension point, its module imported on first use."""
    if kind not in POINTS:
        raise PluginError(f"unknown plug-in kind {kind!r} (known: {', '.join(POINTS)})")
    importlib.import_module(POINTS[kind])
    return REGISTRIES[kind]


def describe(kind: str | None = None) -> list[tuple[str, str, str]]:
    """(kind, name, summary) for every member of every extension point, or of one kind."""
    regs = [registry(k) for k in ([kind] if kind else POINTS)]
    return [(r.kind, cls.name, cls.summary()) for r in regs for cls in r]


def check_config(cfg) -> None:
    """Every plug-in selection in `cfg` (fields declared with `plugins=KIND`) and every name in
    `export.formats` exists and takes the parameters given; the first problem is a PluginError that
    names the key. Defaults are not checked: they select registered plug-ins by construction."""
    for section in dataclasses.fields(cfg):
        sec = getattr(cfg, section.name)
        for f in dataclasses.fields(sec):
            kind = f.metadata.get("plugins")
            value = getattr(sec, f.name)
            if kind and value:
                registry(kind).configured(value, where=f"{section.name}.{f.name}")
    if cfg.export.formats == type(cfg.export)().formats:
        return
    exporters = registry("exporter")
    unknown = [name for name in cfg.export.formats if name not in exporters]
    if unknown:
        raise PluginError(f"export.formats: unknown exporter {unknown[0]!r} (known: {', '.join(exporters.names())})")
