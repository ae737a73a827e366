"""Per-call deadlines: a candidate that hangs ends its sample as `timeout` within seconds.

Each candidate call of a trial (and the synchronize after it) must finish within
`bound(t)`: FACTOR times the reference's own time t on the same inputs, plus BASE, at most
CEILING seconds (100 x t + 2 s, at most 10 s: a hang is cut within about 11 s). The bound is
reported to the parent process (`sftbuild.executor.report_deadline`), which kills the worker
when it passes; the parent, not a thread in the worker, keeps the time, because a hung kernel
leaves the worker blocked inside a CUDA call that may never give a Python thread a turn.
The sample's own `sample_timeout` still covers everything outside the calls, so an honest
slow kernel keeps it for its other trials. Compiling is not the call's time: while Triton
compiles a kernel (its first launch for a signature) the bound is lifted and set again after,
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


def lift_while_compiling() -> None:
    """Triton kernels first launched from now on compile with the bound lifted (`triton.compiler.compile`,
    which a JIT function looks up at its first launch), and each autotuner benchmark of one config
    renews the bound. Idempotent; does nothing without Triton or where it is laid out otherwise."""
    try:
        import triton.compiler as tc
    except Exception:
        return
    orig = getattr(tc, "compile", None)
    if orig is not None and not getattr(orig, "_sftbuild_lifted", False):
        @functools.wraps(orig)
        def compile(*args, **kwargs):
            with lifted():
                return orig(*args, **kwargs)

        compile._sftbuild_lifted = True
        tc.compile = compile
    try:
        from triton.runtime.autotuner import Autotuner
    except Exception:
        return
    bench = getattr(Autotuner, "_bench", None)
    if bench is not None and not getattr(bench, "_sftbuild_renews", False):
        @functools.wraps(bench)
        def _bench(self, *args, **kwargs):
            renew()
            return bench(self, *args, **kwargs)

        _bench._sftbuild_renews = True
        Autotuner._bench = _bench
