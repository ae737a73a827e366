"""Named include sets: what a kernel's closure needs on the compiler command line.

A record lists the sets it needs in `entry["include_sets"]`; `nvcc_args` turns
them into flags. The torch set is the installed torch's headers, with the
define that torch's own build passes for its wrapped copy of CUB.
"""
from __future__ import annotations

import functools
from pathlib import Path

CUDA_FLAGS = ["-std=c++17", "--expt-relaxed-constexpr", "--expt-extended-lambda"]


@functools.lru_cache(maxsize=1)
def _torch_include() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    return Path(spec.origin).parent / "include"


# stand-ins for headers a CPU-only torch wheel or a bare toolkit lacks; searched last, so real ones win
SHIM = Path(__file__).resolve().parent / "cuda_shim"


def include_set(name: str) -> dict:
    if name == "torch":
        inc = _torch_include()
        return {"include_dirs": [str(inc), str(inc / "torch" / "csrc" / "api" / "include")],
                "fallback_dirs": [str(SHIM)],
                "defines": ["CUB_WRAPPED_NAMESPACE=at_cuda_detail"]}
    raise KeyError(f"unknown include set {name!r}")


def nvcc_args(sets: list[str]) -> list[str]:
    args = list(CUDA_FLAGS)
    for name in sets:
        s = include_set(name)
        args += [f"-I{d}" for d in s["include_dirs"]] + [f"-D{d}" for d in s["defines"]]
        args += [f"-Xcompiler=-idirafter,{d}" for d in s.get("fallback_dirs", [])]
    return args
