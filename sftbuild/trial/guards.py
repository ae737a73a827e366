"""Run-time guards around an untrusted candidate call. Used only inside GPU workers or sandboxes.

They set up and record; the verdicts on what they record are the run-time checks'
(sftbuild.trial.checks).

  strict_precision()   force fp32 math to full precision; report the flags a candidate flips
  LaunchCounter        count Triton launches of kernels defined in the candidate's own file
  profile_kernel_times()  GPU time per CUDA kernel a call launched (torch.profiler), to spot library kernels
  library_kernels()    which of those names are cuBLAS, cuDNN or ATen compute kernels
  TorchWork            count the torch compute ops a call dispatched and the largest tensor they touched
  scrub()              fill the allocator's free blocks with NaN so unwritten outputs show
  snapshot()           copies of the inputs, to check them unchanged after the call
"""
from __future__ import annotations

import contextlib
import re

import torch


def _flags() -> dict:
    b = torch.backends
    out = {"cuda.matmul.allow_tf32": b.cuda.matmul.allow_tf32, "cudnn.allow_tf32": b.cudnn.allow_tf32,
           "float32_matmul_precision": torch.get_float32_matmul_precision(),
           "autocast": torch.is_autocast_enabled("cuda") if _autocast_takes_device() else torch.is_autocast_enabled()}
    for name in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        if hasattr(b.cuda.matmul, name):
            out[f"cuda.matmul.{name}"] = getattr(b.cuda.matmul, name)
    return out


def _autocast_takes_device() -> bool:
    try:
        torch.is_autocast_enabled("cuda")
        return True
    except TypeError:
        return False


def set_strict() -> None:
    """The reference runs in full fp32: no TF32, no reduced-precision reductions. Works also after
    torch's test utilities froze the global flags (importing op_db's modules does that)."""
    b = torch.backends
    thaw = getattr(b, "__allow_nonbracketed_mutation", None)
    with thaw() if thaw is not None and b.flags_frozen() else contextlib.nullcontext():
        b.cuda.matmul.allow_tf32 = False
        b.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        for name in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
            if hasattr(b.cuda.matmul, name):
                try:
                    setattr(b.cuda.matmul, name, False)
                except Exception:  # some builds refuse to change it
                    pass


@contextlib.contextmanager
def strict_precision(report: list):
    """Run the block under strict flags; append the names of flags the block changed to `report`."""
    set_strict()
    before = _flags()
    try:
        yield
    finally:
        after = _flags()
        report += [f"{k}: {before[k]} -> {after[k]}" for k in before if after.get(k) != before[k]]
        set_strict()


class LaunchCounter:
    """Counts Triton kernel launches whose Python source lives in `filename` (the candidate's file),
    and launches through Inductor's launcher (`CachingAutotuner.run`, which never calls
    `JITFunction.run`) of the kernels the candidate's output code defines by name (`inductor`).

    A launch counts however it is made: through `JITFunction.run` (`kernel[grid](...)`), or
    straight on the compiled kernel (`compiled[grid](...)`), as a library that keeps the compiled
    kernels of its first calls does (FlagGems' `libentry`: every call after the first)."""

    def __init__(self, filename: str, inductor=()):
        self.filename = filename
        self.inductor = set(inductor)
        self.count = 0
        self.names: set[str] = set()
        self.by_name: dict[str, int] = {}  # launches per kernel of the file (a generated kernel: the file's it calls)
        self._saved = []

    def __enter__(self):
        for cls in _triton_classes():
            orig = cls.run
            counter = self

            def run(self_, *args, __orig=orig, **kwargs):
                counter.launched(getattr(self_, "fn", None))
                return __orig(self_, *args, **kwargs)

            self._saved.append((cls, "run", orig))
            cls.run = run
        compiled = _compiled_kernel_class()
        if compiled is not None:
            orig_item = compiled.__getitem__
            counter = self

            def getitem(self_, grid, __orig=orig_item):
                runner = __orig(self_, grid)
                fn = getattr(getattr(getattr(self_, "src", None), "fn", None), "fn", None)  # ASTSource -> JITFunction

                def launch(*args, **kwargs):
                    counter.launched(fn)
                    return runner(*args, **kwargs)
                return launch

            self._saved.append((compiled, "__getitem__", orig_item))
            compiled.__getitem__ = getitem
        if self.inductor:
            for cls in _inductor_classes():
                orig = cls.run
                counter = self

                def run(self_, *args, __orig=orig, **kwargs):
                    name = (getattr(self_, "inductor_meta", None) or {}).get("kernel_name") or \
                        getattr(getattr(self_, "fn", None), "__name__", None)
                    if name in counter.inductor:
                        counter.count += 1
                        counter.names.add(name)
                    return __orig(self_, *args, **kwargs)

                self._saved.append((cls, "run", orig))
                cls.run = run
        return self

    def launched(self, fn) -> None:
        """Count a launch of the kernel whose Python function is `fn` when it is the candidate's."""
        code = getattr(fn, "__code__", None)
        if code is None:
            return
        own = [fn.__name__] if code.co_filename == self.filename else self.calls_own(fn)
        if own:
            self.count += 1
            self.names.add(fn.__name__)
            for name in own:
                self.by_name[name] = self.by_name.get(name, 0) + 1

    def calls_own(self, fn) -> list[str]:
        """The jit functions of the candidate's file that a kernel generated elsewhere (flag_gems'
        pointwise_dynamic) calls: it runs the candidate's device code, so its launches count, as
        launches of those functions."""
        g = getattr(fn, "__globals__", None) or {}
        out = []
        for name in getattr(getattr(fn, "__code__", None), "co_names", ()):
            inner = getattr(g.get(name), "fn", None)
            if getattr(getattr(inner, "__code__", None), "co_filename", None) == self.filename:
                out.append(inner.__name__)
        return out

    def __exit__(self, *exc):
        for cls, attr, orig in reversed(self._saved):
            setattr(cls, attr, orig)
        self._saved = []


def _inductor_classes():
    """Inductor's kernel launchers: CachingAutotuner and any subclass with its own `run`."""
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except Exception:
        return []
    out, todo = [CachingAutotuner], list(CachingAutotuner.__subclasses__())
    while todo:
        c = todo.pop()
        if "run" in vars(c):
            out.append(c)
        todo += c.__subclasses__()
    return out


def _compiled_kernel_class():
    """triton's CompiledKernel, whose `kernel[grid](...)` launches without `JITFunction.run`; None
    where Triton has none (the interpreter runs every launch through InterpretedFunction)."""
    try:
        from triton.compiler.compiler import CompiledKernel
    except Exception:
        return None
    return CompiledKernel if hasattr(CompiledKernel, "__getitem__") else None


def _triton_classes():
    out = []
    try:
        from triton.runtime.jit import JITFunction

        out.append(JITFunction)
    except Exception:
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction

        out.append(InterpretedFunction)
    except Exception:
        pass
    return out


LIBRARY_KERNELS = re.compile(r"gemm|gemv|cublas|cutlass|cudnn|xmma|sm\d+_.*(?:conv|mma)|softmax_warp|"
                             r"cunn_|layer_norm|reduce_kernel|conv\w*kernel|implicit_convolve", re.I)


def profile_kernel_times(fn) -> dict[str, float] | None:
    """GPU time (us) per CUDA kernel name that `fn()` launched, in launch order; None when the
    profiler cannot see CUDA here."""
    if not torch.cuda.is_available():
        return None
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
    except Exception:
        return None
    times: dict[str, float] = {}
    for e in prof.events():
        dev = getattr(e, "device_type", None)
        if dev is not None and "CUDA" in str(dev):
            us = getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0) or 0.0
            times[e.name] = times.get(e.name, 0.0) + float(us)
    return times


# aten ops that allocate, view, copy, fill or read metadata: no computation of a result
NOT_WORK = frozenset("""empty empty_like empty_strided zeros zeros_like ones ones_like full full_like new_empty
new_empty_strided new_zeros new_ones new_full arange fill_ zero_ copy_ clone _to_copy contiguous view _unsafe_view
reshape t transpose permute expand as_strided slice select unsqueeze squeeze detach alias lift_fresh resize_ split
split_with_sizes chunk narrow unbind cat stack _local_scalar_dense item is_nonzero sym_size sym_stride sym_numel
record_stream set_ view_as real imag conj resolve_conj resolve_neg""".split())


class TorchWork:
    """Within the block, the torch compute ops the thread dispatched (those not in NOT_WORK, from Python
    or from an extension's C++ alike): how many (`ops`) and the most elements one of their tensors, in
    or out, held (`elements`): bookkeeping on a few partial results stays far below the inputs' size."""

    def __init__(self):
        self.ops, self.elements = 0, 0
        self._mode = None

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        work = self

        class Count(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func.overloadpacket.__name__.rstrip("_") not in NOT_WORK and \
                        func.overloadpacket.__name__ not in NOT_WORK:
                    work.ops += 1
                    sizes = [t.numel() for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
                    work.elements = max([work.elements, *sizes])
                return out

        self._mode = Count()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)


def library_kernels(names: list[str], own: set[str]) -> list[str]:
    """Kernels from cuBLAS, cuDNN or ATen's compute kernels, excluding the candidate's own names."""
    return [n for n in names if LIBRARY_KERNELS.search(n) and not any(o in n for o in own)]


def scrub(nbytes: list[int]) -> None:
    """Leave NaN-filled free blocks of the sizes the outputs will need, so an output the candidate
    allocates but never writes reads as NaN rather than as the reference's stale result."""
    if not torch.cuda.is_available():
        return
    blocks = [torch.full(((n + 3) // 4,), float("nan"), dtype=torch.float32, device="cuda") for n in nbytes if n]
    del blocks  # returned to the caching allocator, NaN inside


@contextlib.contextmanager
def unwritten_is_nan(dev: torch.device):
    """Within the block, memory torch hands out and nothing writes reads as NaN (integers: their
    largest value) on the CPU too, where `scrub` cannot reach the allocator: torch's deterministic
    mode fills fresh allocations (warn_only, so no op refuses to run). On a GPU `scrub` does it and
    the block changes nothing. The process's settings are as they were afterwards."""
    if dev.type == "cuda":
        yield
        return
    import warnings

    det = torch.utils.deterministic
    was = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
           det.fill_uninitialized_memory)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.use_deterministic_algorithms(True, warn_only=True)
            det.fill_uninitialized_memory = True
            yield
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])
        det.fill_uninitialized_memory = was[2]


def snapshot(ts) -> list:
    return [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in ts]
