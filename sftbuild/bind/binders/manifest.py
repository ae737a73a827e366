"""The declared binding table: rows matched by kernel name and path."""
from __future__ import annotations

import fnmatch
import functools
from pathlib import Path

import yaml

from sftbuild.bind.binders import BINDERS, Binder

TABLE = Path(__file__).parents[2] / "ops" / "aten_bindings.yaml"


@functools.lru_cache(maxsize=1)
def table() -> list[dict]:
    return yaml.safe_load(TABLE.read_text()).get("bindings", []) if TABLE.exists() else []


@BINDERS.register
class Manifest(Binder):
    """A row of the declared table ops/aten_bindings.yaml (a source manifest's `bindings:` schema), matched by
    kernel name, path glob and the strings the code must contain."""
    name = "manifest"
    version = 1
    how = "declared"
    order = 10
    files = (TABLE,)

    def bind(self, record) -> dict | None:
        name, path = record.name, (record.provenance or {}).get("path", "")
        for row in table():
            if row["kernel"] != name or not fnmatch.fnmatch(path, row.get("path", "*")):
                continue
            if row.get("requires") and not all(r in record.code for r in row["requires"]):
                continue  # overloads share a name; `requires` picks the one whose code matches
            return {k: v for k, v in row.items() if k not in ("kernel", "path", "requires")}
        return None
