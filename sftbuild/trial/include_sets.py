"""Named include sets: what a kernel's closure needs on the compiler command line.

A record lists the sets it needs in `entry["include_sets"]`; `nvcc_args` turns
them into flags. The torch set is the installed torch's headers, with the
define that torch's own build passes for its wrapped copy of CUB; the python set is the running
interpreter's headers (`Python.h`), for extension code that includes them.

Every compile also searches, after the toolkit's own folders, the headers of the CUDA
libraries pip installs with torch (`site-packages/nvidia/*/include`: cuBLAS, cuDNN, ...),
the folders in $SFTBUILD_CUDA_INCLUDE (colon separated), then our stand-ins (`cuda_shim`):
a repo that includes <cublas_v2.h> compiles where the library's headers exist anywhere.
"""
from __future__ import annotations

import functools
import os
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
    if name == "python":  # an extension's module code: <Python.h> (pybind11 comes with torch's headers)
        import sysconfig

        return {"include_dirs": [sysconfig.get_paths()["include"]], "defines": []}
    raise KeyError(f"unknown include set {name!r}")


@functools.lru_cache(maxsize=1)
def library_include_dirs() -> tuple[str, ...]:
    """Header folders of the CUDA libraries found outside the toolkit (see the module docstring)."""
    import importlib.util
    import site

    found: list[str] = [d for d in os.environ.get("SFTBUILD_CUDA_INCLUDE", "").split(":") if d]
    roots = list(site.getsitepackages()) + [site.getusersitepackages()]
    spec = importlib.util.find_spec("nvidia") if importlib.util.find_spec is not None else None
    roots += [str(Path(p).parent) for p in (spec.submodule_search_locations or [])] if spec else []
    for root in dict.fromkeys(roots):
        for inc in sorted(Path(root).glob("nvidia/*/include")):
            found.append(str(inc))
    return tuple(d for d in dict.fromkeys(found) if Path(d).is_dir())


def nvcc_args(sets: list[str]) -> list[str]:
    args = list(CUDA_FLAGS)
    fallback = [*library_include_dirs(), str(SHIM)]
    for name in sets:
        s = include_set(name)
        args += [f"-I{d}" for d in s["include_dirs"]] + [f"-D{d}" for d in s["defines"]]
        fallback += [d for d in s.get("fallback_dirs", []) if d not in fallback]
    return args + [f"-Xcompiler=-idirafter,{d}" for d in fallback]
