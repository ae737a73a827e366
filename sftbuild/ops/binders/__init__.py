"""Binding strategies: tie an unbound CUDA kernel to an op and a harness that can launch it.

A binder is one strategy. `bind(record)` returns the binding it finds (op, params, harness,
harness args, dtypes, ...; the schema is ../BINDINGS.md) or None; binders are tried in
`order` and the first answer wins, stored with `kind: op` and `how: <binder name>`. A binder
that reads data files lists them in `files`, so describe re-runs when they change. Adding a
strategy is one file in this folder:

    @BINDERS.register
    class Probed(Binder):
        '''Call the kernel on generated inputs and compare with shortlisted ops.'''
        name = "probed"
        order = 80

        def bind(self, record):
            ...

An inference is a hypothesis: validate confirms it on the GPU or drops the record.
`sftbuild list binder` shows the strategies; `describe.binders` in the config turns one off.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from sftbuild.plugins import Plugin, Registry


class Binder(Plugin):
    """A way to find a binding for an unbound CUDA kernel."""

    files: tuple[Path, ...] = ()  # data files its answers depend on

    def bind(self, record) -> dict | None:
        raise NotImplementedError


BINDERS: Registry[Binder] = Registry("binder", Binder, __name__,
                                     doc="strategies that bind unbound CUDA kernels to ops, tried in order")


def infer(record, binders: Iterable[Binder] | None = None) -> dict | None:
    """The first binding a binder finds for `record`, or None. Never called for bound records.

    `binders`: the strategies to try, in order (default: every registered one)."""
    if record.language != "cuda" or not record.entry.get("kernels"):
        return None
    for binder in BINDERS.configured({}) if binders is None else binders:
        found = binder.bind(record)
        if found:
            return {"kind": "op", "how": binder.name, **found}
    return None


def files(binders: Iterable[Binder] | None = None) -> list[Path]:
    """Every data file the binders read."""
    return [f for b in (BINDERS.configured({}) if binders is None else binders) for f in b.files]
