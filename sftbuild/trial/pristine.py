"""What a candidate must leave as it found it in its process, and whether it did.

Runs only inside GPU workers or sandboxes, around candidate code. `Pristine()` is taken
before any candidate code runs; it holds, by identity (objects, not ids, so an id cannot be
reused by a replacement):

  callables  every public name of torch, torch.nn.functional, torch.linalg, torch.fft,
             torch.special, torch.cuda, time, triton, triton.language and builtins; every attribute
             torch.Tensor (its C base included), torch.nn.Module, torch.cuda.Event and Stream and
             Triton's launcher classes resolve; the timer's captured clocks (timing.CLOCKS);
             the aten overload packets already made; the validator's own modules and their
             functions (rebinding `sftbuild.ops.compare` would forge a verdict). A Python
             function's code and defaults are held too: a swapped `__code__` keeps the identity.
  state      precision flags, the default dtype, the current CUDA device and stream
  kernels    torch.library's registrations: one for an operator that existed overrides torch's
             own (aten::abs returning zeros would blind the comparison itself)

`changes()` names what differs now: "torch.softmax rebound", "default dtype: float32 ->
float64". Names added since (lazy submodules, a candidate's own helpers) are no change.
`rng_state()` / `rng_changes(before)` do the same for the CPU and CUDA generators, which the
loop's own seeding moves, so they are compared around one call only. `dirty()` is what a
worker must not carry into the next sample: any change, or an operator in a namespace
torch did not have (a candidate's custom op would clash with the next sample's).

torch patches itself on first use (torch._dynamo wraps torch.manual_seed when imported and
nn.Module.__init__ on its first compile; Inductor registers operators): `warm()` does that
before the snapshot, so a candidate that merely imports them changes nothing.

Comparing costs about a millisecond, so the loop runs it after every call. This guards
against rebinding from Python; a candidate that edits the validator's own memory in place
is beyond any in-process check, which is why references are computed before candidate code
runs (sftbuild.trial.refbook) and a worker whose state changed is replaced.
"""
from __future__ import annotations

import builtins
import sys
import types

import torch

MODULES = ("torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special", "torch.cuda", "time",
           "triton", "triton.language", "builtins")
CLASSES = ("torch.Tensor", "torch.nn.Module", "torch.cuda.Event", "torch.cuda.Stream", "triton.runtime.jit.JITFunction",
           "triton.runtime.autotuner.Autotuner", "triton.runtime.interpreter.InterpretedFunction")
OWN = "sftbuild."  # the validator's own modules


class Pristine:
    """The process as candidate code found it; compare with `changes()` and `dirty()`. Take it after
    the loop's own settings (guards.set_strict), which calls restore before each candidate call."""

    def __init__(self):
        self.bound: list[tuple] = []  # (owner's dict, attr, label, object, code, defaults, kwdefaults)
        self.classes: list[tuple] = []  # (class, attr, label, resolved attribute)
        import sftbuild.ops  # noqa: F401  the judge (ops.compare, the references) is watched even before a trial loads it
        self.modules = {name: mod for name, mod in sys.modules.items() if _watched_module(name)}
        for name in MODULES:
            mod = sys.modules.get(name) or (builtins if name == "builtins" else None)
            if mod is not None:
                self._module(mod, name, public=True)
        for name, mod in self.modules.items():
            if name.startswith(OWN):
                self._module(mod, name, public=False, own=True)
        for path in CLASSES:
            cls = _lookup(path)
            if isinstance(cls, type):
                self.classes += [(cls, attr, f"{path}.{attr}", _resolve(cls, attr)) for attr in dir(cls)]
        from sftbuild.trial import timing

        for attr, obj in timing.CLOCKS.items():  # the timer's own copies of the clocks
            self.bound.append((timing.CLOCKS, attr, f"the timer's {attr}", *_held(obj)))
        aten = torch.ops.aten
        for attr, packet in list(vars(aten).items()):
            if isinstance(packet, torch._ops.OpOverloadPacket):
                self.bound.append((vars(aten), attr, f"torch.ops.aten.{attr}", *_held(packet)))
        self.state = process_state()
        self.impls = set(torch.library._impls)
        self.ops = set(torch._C._dispatch_get_all_op_names())
        self.namespaces = {name.partition("::")[0] for name in self.ops}

    def _module(self, mod, name: str, public: bool, own: bool = False) -> None:
        for attr, obj in list(vars(mod).items()):
            if attr.startswith("__") or (public and attr.startswith("_")):
                continue
            if own and not (callable(obj) and getattr(obj, "__module__", "").startswith("sftbuild")):
                continue  # the validator's functions and classes, not its data
            if callable(obj) or isinstance(obj, types.ModuleType):
                self.bound.append((vars(mod), attr, f"{name}.{attr}", *_held(obj)))

    def changes(self) -> list[str]:
        """What differs from the snapshot, in words, the process state first; [] when nothing does."""
        now = process_state()
        out = [f"{k}: {self.state[k]} -> {now.get(k)}" for k in self.state if now.get(k) != self.state[k]]
        for d, attr, label, obj, code, defaults, kwdefaults in self.bound:
            cur = d.get(attr, _MISSING)
            if cur is not obj:
                out.append(f"{label} {'removed' if cur is _MISSING else 'rebound'}")
            elif code is not None and (cur.__code__ is not code or cur.__defaults__ is not defaults
                                       or cur.__kwdefaults__ is not kwdefaults):
                out.append(f"{label} code replaced")
        for cls, attr, label, was in self.classes:
            if _resolve(cls, attr) is not was:
                out.append(f"{label} rebound")
        for name, mod in self.modules.items():
            if sys.modules.get(name) is not mod:
                out.append(f"module {name} replaced")
        if len(torch.library._impls) != len(self.impls):  # cheap: the set is only read when it grew
            overrides = sorted(k for k in set(torch.library._impls) - self.impls
                               if "::".join(k.split("/")[:2]) in self.ops)
            out += [f"torch.library kernel registered for {k}" for k in overrides[:4]]
        return out

    def dirty(self) -> list[str]:
        """What a worker must not carry into the next sample: `changes()`, and operators in namespaces
        torch did not have (a candidate's custom op would clash with the next sample's)."""
        out = self.changes()
        foreign = sorted(n for n in set(torch._C._dispatch_get_all_op_names()) - self.ops
                         if n.partition("::")[0] not in self.namespaces)
        if foreign:
            out.append(f"dispatcher operators registered: {', '.join(foreign[:4])}")
        return out


_MISSING = object()
_WARMED: set = set()


def warm(compiler: bool = False) -> None:
    """Make torch's first-use patches before a snapshot (once per process); `compiler`: Inductor's
    too, which costs seconds (worth it in a long-lived worker, not in a one-shot sandbox)."""
    levels = ("dynamo", "inductor") if compiler else ("dynamo",)
    for level in levels:
        if level in _WARMED:
            continue
        _WARMED.add(level)
        try:
            if level == "dynamo":
                from torch._dynamo import mutation_guard

                mutation_guard.install_generation_tagging_init()
            else:
                import torch._inductor.compile_fx  # noqa: F401
        except Exception:  # a torch without them: nothing of theirs to patch either
            pass


def _held(obj) -> tuple:
    """(object, code, defaults, kwdefaults); the last three None for anything but a Python function."""
    if isinstance(obj, types.FunctionType):
        return obj, obj.__code__, obj.__defaults__, obj.__kwdefaults__
    return obj, None, None, None


def _resolve(cls: type, attr: str):
    """The attribute as the class's MRO holds it (not a bound method made fresh on each lookup)."""
    for c in cls.__mro__:
        if attr in vars(c):
            return vars(c)[attr]
    return _MISSING


def _lookup(path: str):
    mod, _, attr = path.rpartition(".")
    return getattr(sys.modules.get(mod), attr, None)


def _watched_module(name: str) -> bool:
    return name.startswith(OWN) and ".sftbuild_cand_" not in name or name in MODULES


def process_state() -> dict:
    """Precision flags, the default dtype, the current device and stream."""
    from sftbuild.trial.guards import _flags

    out = {**_flags(), "default dtype": str(torch.get_default_dtype()).removeprefix("torch.")}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["current device"] = torch.cuda.current_device()
        out["current stream"] = torch.cuda.current_stream().cuda_stream
    return out


def rng_state() -> list:
    """The CPU generator's state and, once CUDA is up, the current device's."""
    out = [torch.get_rng_state()]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out.append(torch.cuda.get_rng_state())
    return out


def rng_changes(before: list) -> list[str]:
    """The generators whose state moved since `before` (a call that draws random numbers or reseeds)."""
    now = rng_state()
    names = ("CPU RNG state", "CUDA RNG state")
    return [f"{names[i]} changed" for i, (a, b) in enumerate(zip(before, now)) if not torch.equal(a, b)]
