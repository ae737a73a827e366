"""The `handwritten` catalog: the hand-written reference programs of programs.py."""
from __future__ import annotations

from sftbuild.harvest.catalog import CATALOGS, Catalog, Program, static_inputs
from sftbuild.harvest.catalog.programs import catalog


@CATALOGS.register
class Handwritten(Catalog):
    """Hand-written programs: elementwise chains, norms, softmax, reductions, MLP and attention pieces,
    losses and optimiser steps (61, fixed)."""

    name = "handwritten"
    version = 1
    order = 10

    def programs(self, count: int, seed: int) -> list[Program]:
        return [Program(name, src, catalog="handwritten", meta={"family": name, **static_inputs(src)})
                for name, src in catalog()]
