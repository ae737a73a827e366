"""Per-call deadlines: a candidate that hangs ends its sample as `timeout` within seconds.

Each candidate call of a trial (and the synchronize after it) must finish within
`bound(t)`: FACTOR times the reference's own time t on the same inputs, plus BASE, at most
CEILING seconds (100 x t + 2 s, at most 10 s: a hang is cut within about 11 s). The bound is
reported to the parent process (`sftbuild.executor.report_deadline`), which kills the worker
when it passes; the parent, not a thread in the worker, keeps the time, because a hung kernel
leaves the worker blocked inside a CUDA call that may never give a Python thread a turn.
The sample's own `sample_timeout` still covers everything outside the calls, so an honest
slow kernel keeps it for its other trials. Compiling is not the call's time: while Triton
compiles a kernel (its first launch for a signature), builds its launcher and loads its module,
and while an inline extension builds, the bound is lifted and set again after; Triton's driver
is brought up before any call is watched;
and an autotuner's benchmark of each config starts the bound afresh (many configs add up; a
config that hangs is still cut).

Outside a GPU worker (the CPU interpreter's sandbox, tests) reporting does nothing.
"""
from __future__ import annotations

import contextlib
import functools
import time

from sftbuild.executor import report_deadline

FACTOR = 100.0
BASE = 2.0  # seconds
CEILING = 10.0  # seconds

_armed: list = []  # the bound in force: [(seconds, why)] while a call is watched


def bound(reference_seconds: float) -> float:
    """Seconds a candidate call may take, given the reference's time on the same inputs."""
    return min(CEILING, FACTOR * max(0.0, reference_seconds) + BASE)


def timed(fn, cuda: bool):
    """(fn(), seconds), synchronizing the device around it when `cuda`."""
    if cuda:
        import torch

        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if cuda:
        import torch

        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


@contextlib.contextmanager
def watch(reference_seconds: float | None, what: str = "a candidate call"):
    """The block must end within `bound(reference_seconds)`; None watches nothing."""
    if reference_seconds is None:
        yield
        return
    seconds = bound(reference_seconds)
    why = (f"{what} ran past its bound of {seconds:.1f} s ({FACTOR:.0f} x the reference's "
           f"{reference_seconds * 1000:.2f} ms + {BASE:.0f} s, at most {CEILING:.0f} s)")
    _armed.append((seconds, why))
    report_deadline(seconds, why)
    try:
        yield
    finally:
        _armed.pop()
        report_deadline(None)


@contextlib.contextmanager
def lifted():
    """No bound for the block (a compile); the bound in force is set again, from now, after it."""
    if not _armed:
        yield
        return
    report_deadline(None)
    try:
        yield
    finally:
        report_deadline(*_armed[-1])


def renew() -> None:
    """The bound in force starts again from now."""
    if _armed:
        report_deadline(*_armed[-1])


def _wrap(owner, name: str, before=None) -> None:
    """owner.name runs with the bound lifted (or, given `before`, after calling it); once."""
    orig = getattr(owner, name, None)
    if orig is None or getattr(orig, "_sftbuild_bounded", False):
        return

    @functools.wraps(orig)
    def wrapped(*args, **kwargs):
        if before is not None:
            before()
            return orig(*args, **kwargs)
        with lifted():
            return orig(*args, **kwargs)

    wrapped._sftbuild_bounded = True
    setattr(owner, name, wrapped)


def lift_while_compiling(cuda: bool = False) -> None:
    """Triton kernels first launched from now on compile (`triton.compiler.compile`, which a JIT function
    looks up at its first launch) and set up their launcher and module (`CompiledKernel._init_handles`)
    with the bound lifted; each autotuner benchmark of one config renews the bound; with `cuda`, the
    driver comes up now. Idempotent; a part Triton lays out otherwise is left as it is."""
    try:
        import triton.compiler as tc
        from triton.compiler import compiler
        from triton.runtime import autotuner
    except Exception:
        return
    _wrap(tc, "compile")
    _wrap(getattr(compiler, "CompiledKernel", None), "_init_handles")
    _wrap(getattr(autotuner, "Autotuner", None), "_bench", before=renew)
    if cuda:
        try:
            from triton.runtime import driver

            driver.active.get_current_device()  # builds or loads its utilities, once per process
        except Exception:
            pass
