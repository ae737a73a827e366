"""The op registry: what a kernel can be checked against.

An op is a torch reference, an input generator over a shape pool and layouts,
the dtypes it allows, a tolerance policy and a launch contract for CUDA
harnesses. The same entry serves describe (it states the I/O), validate (it
makes inputs and references) and export (it writes RLVR tasks).

Ops register themselves by name with `add(Op(...))` (or `pools.define`), in one module
per family; the registry imports every module of this package on first use. Ops backed by
torch's op_db (`opdb.<name>[.<variant>]`, see opdb.py) load only when one is asked for or
`all_ops(opdb=True)`; hand-written ops win for the names they cover. `package_op` registers a
package's own reference function at run time (package_refs.py), and `shortlist` ranks op names
for a kernel's name and parameters.

Map (what lives where): one module per op family (elementwise, reduction, norm, linalg, data,
composites, model_layers; opdb.py for op_db); pools.py, values.py, special.py: trial inputs;
tolerance.py, rounding.py: tolerances; launch.py: launch contracts; ranking.py, registrations.py,
package_refs.py: finding the op a kernel computes; cards.py, summary.py: what commands show;
programs.py: what a reference program's get_inputs() declares. Bind's strategies are sftbuild.bind.binders.
What one may touch: a new op is one `add(Op(...))` in its family's module. tolerance.py and
opdb_catalogues/ key validate's results, aten_bindings.yaml bind's: a change there redoes them.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
from typing import Any, Callable

from sftbuild.ops.launch import CONTRACTS
from sftbuild.ops.tolerance import Tolerance, compare, largest  # noqa: F401  (re-exported)

DTYPES = ("float32", "float16", "bfloat16")
LAYOUTS = ("contiguous", "transposed", "sliced")


def fits(shape, cons: dict, max_numel: int | None = None) -> bool:
    """Whether a shape from an op's pool satisfies a binding's constraints (and a size cap)."""
    n = math.prod(shape)
    if (max_numel and n > max_numel) or ("max_numel" in cons and n > cons["max_numel"]):
        return False
    if "max_cols" in cons and shape[-1] > cons["max_cols"]:
        return False
    # {axis: size}: the most an axis may hold (the op's inputs are ill-posed past it)
    if any(int(a) < len(shape) and shape[int(a)] > n for a, n in (cons.get("max_dims") or {}).items()):
        return False
    # {axis: k}: dims a launcher needs a multiple of k (vector loads; its own asserts), axis < 0 from the end
    if any(not -len(shape) <= int(a) < len(shape) or shape[int(a)] % k for a, k in (cons.get("multiple") or {}).items()):
        return False
    # {axis: size}: dims the harness fixes (keys may come back from JSON as strings)
    return all(int(a) < len(shape) and shape[int(a)] == n for a, n in (cons.get("dims") or {}).items())


@dataclasses.dataclass
class Op:
    name: str
    family: str
    semantics: dict[str, str]  # {"en": ..., "zh": ...}: what it computes, one sentence each
    reference: Callable[..., Any]  # (*inputs, **params) -> Tensor | tuple of Tensors
    # (shape, dtype, layout, generator, params) -> list of Tensors; it may add shape-derived
    # params (an output size) to `params`, which the caller then passes to the reference
    make_inputs: Callable[..., list]
    shape_pool: list[tuple[int, ...]]
    io: dict[str, list[str]]  # {"inputs": ["x: [rows, cols]"], "outputs": ["y: [rows, cols]"]}
    dtypes: tuple[str, ...] = DTYPES
    layouts: tuple[str, ...] = ("contiguous",)
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    tolerance: Tolerance = dataclasses.field(default_factory=Tolerance)
    launch: str = "tensors"  # its launch contract for CUDA harnesses: a name in sftbuild.ops.launch
    outputs: int = 1  # how many output tensors the reference returns
    mutates: tuple[int, ...] = ()  # input positions updated in place (optimiser steps)
    # inputs a backward treats as constants (a loss's target, a distillation teacher): gradient checks
    # (sftbuild.trial.pyrun.with_grads) take no gradient for them
    grad_constants: tuple[int, ...] = ()
    # shape constraints every check of the op gets under its harness's and binding's (`fits` above),
    # for sizes where the op's trial is ill-posed: {"max_dims": {axis: size}} (the axis neither drawn past
    # that size nor grown, sftbuild.trial.sizes)
    constraints: dict[str, Any] = dataclasses.field(default_factory=dict)
    # the value classes its domain allows beside its own draw (sftbuild.ops.values); None: values.GENERIC
    values: tuple[str, ...] | None = None

    def constraints_with(self, cons: dict | None) -> dict:
        """A check's constraints (a harness's limits, a binding's own) on top of the op's."""
        return {**self.constraints, **(cons or {})}

    def __post_init__(self):
        if self.launch not in CONTRACTS:
            raise ValueError(f"op {self.name!r}: launch {self.launch!r} names no launch contract "
                             f"(known: {', '.join(CONTRACTS)})")

    def run_reference(self, inputs: list, params: dict | None = None):
        return self.reference(*inputs, **{**self.params, **(params or {})})


OPS: dict[str, Op] = {}


def add(op: Op) -> Op:
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} registered twice")
    OPS[op.name] = op
    return op


def get(name: str) -> Op:
    _load()
    if name in OPS:
        return OPS[name]
    if name.startswith("opdb."):  # torch's op_db loads on first use of one of its ops
        from sftbuild.ops import opdb

        if name in opdb.load():
            return opdb.OPS[name]
        if opdb.UNAVAILABLE:
            raise KeyError(f"unknown op {name!r} ({opdb.UNAVAILABLE[0]})")
    raise KeyError(f"unknown op {name!r}")


def all_ops(opdb: bool = False) -> dict[str, Op]:
    """The hand-written ops (and package references registered in this process); with `opdb`,
    also every op backed by torch's op_db (which costs seconds to load the first time)."""
    _load()
    if not opdb:
        return OPS
    from sftbuild.ops import opdb as db

    return {**db.load(), **OPS}


_loaded = False


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        # every module of this package may register ops (one module per family), as plug-ins do
        for info in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{info.name}")


def upcast(inputs: list) -> list:
    """Inputs for the float64 reference: floating tensors in float64, indices and masks unchanged."""
    return [t.double() if hasattr(t, "is_floating_point") and t.is_floating_point() else t for t in inputs]


def as_outputs(result) -> list:
    """A reference's result as a list of output tensors."""
    return list(result) if isinstance(result, (tuple, list)) else [result]


from sftbuild.ops.package_refs import find_package_references, package_op  # noqa: E402,F401  (need Op, add, get)
from sftbuild.ops.ranking import shortlist  # noqa: E402,F401
