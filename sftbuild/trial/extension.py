"""A fast stand-in for torch.utils.cpp_extension.load_inline (KernelBench solutions embed CUDA this way).

load_inline compiles two translation units against torch/extension.h with ninja
(~49 s cold on an H200 host; most of it parsing and instantiating torch headers). Here:
  * in a compilation copy of each source (the candidate's code is never changed), torch's
    umbrella headers become torch_lean.cuh: the tensor class, allocation, checks and dtype
    dispatch, a tenth of the parse. Where a source needs more, it compiles against the full
    header instead, and the result records which one was used;
  * the pybind module compiles against a precompiled lean header (tensor class and pybind
    casters; all of torch/extension.h when it needs more), built once per toolchain and shared;
  * both translation units compile at once; objects and the linked .so are cached by a hash of
    sources, flags and toolchain, so a duplicate or a rerun costs nothing, and objects compiled
    where torch could not be linked are linked later without compiling again;
  * the pybind module's object is also kept on its own, by its source and flags: answers that
    declare the same host functions under the same module name (one task's answers, mostly)
    compile only their CUDA source.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sysconfig
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sftbuild import sandbox
from sftbuild.trial import nvcc_parallel
from sftbuild.trial.include_sets import SHIM

HERE = Path(__file__).resolve().parent
LEAN = HERE / "torch_lean.cuh"
# umbrella headers whose use in kernels' host wrappers the lean header covers
FULL = re.compile(r'#\s*include\s*[<"](?:torch/extension\.h|torch/torch\.h|torch/all\.h|torch/types\.h|'
                  r'ATen/ATen\.h)[>"]')
# the CUDA context header pulls in cuBLAS/cuSPARSE/cuSOLVER and ATen/Context.h; wrappers want the stream
CONTEXT = re.compile(r'#\s*include\s*[<"]ATen/cuda/CUDAContext\.h[>"]')
CONTEXT_LEAN = "#include <c10/cuda/CUDAStream.h>\n#include <c10/cuda/CUDAException.h>"
KERNEL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+)?void\s+(\w+)")


def kernel_names(code: str) -> list[str]:
    """__global__ function names in CUDA text (also inside Python string constants)."""
    return sorted(set(KERNEL.findall(code)))


def toolchain() -> dict:
    import torch
    from torch.utils import cpp_extension as ce

    flags = []
    for f in ("_get_pybind11_abi_build_flags", "_get_glibcxx_abi_build_flags"):
        if hasattr(ce, f):
            with warnings.catch_warnings():  # deprecated in newer torch, still the flags its builds use
                warnings.simplefilter("ignore")
                flags += list(getattr(ce, f)())
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "includes": ce.include_paths(),
            "python": sysconfig.get_paths()["include"], "abi": flags,
            "libs": [p for p in ce.library_paths() if os.path.isdir(p)]}


def lean_source(cu: str) -> str | None:
    """The compilation copy of a CUDA source with torch's umbrella headers swapped for the lean
    one; None when the source names none of them (nothing to gain)."""
    if not (FULL.search(cu) or CONTEXT.search(cu)):
        return None
    return CONTEXT.sub(CONTEXT_LEAN, FULL.sub(f'#include "{LEAN.name}"', cu))


def lean_tree(code: str, headers: dict, include_dirs: list) -> tuple[str, dict] | None:
    """A record's code compiled against the lean header instead of torch's umbrella ones, with the
    header beside it in its tree (`compile_task`'s headers): (code, headers), or None when the code
    names none of them. What the lean header lacks fails the compile, and the caller compiles the
    code as it is."""
    lean = lean_source(code)
    if lean is None:
        return None
    own = (include_dirs or ["."])[0] if headers else "."
    rel = LEAN.name if own == "." else f"{own}/{LEAN.name}"
    return lean, {**headers, rel: LEAN.read_text()}


def build(name: str, cpp_sources, cuda_sources, functions, cache_dir: str, extra_cuda_cflags=None,
          extra_cflags=None, arch: str = "", nvcc: str = "", timeout: float = 120.0, link: bool = True,
          include_dirs=()) -> dict:
    """Compile and (with link) link an inline extension (`include_dirs`: folders the CUDA source's own
    headers are in, searched first). Returns {ok, reason, so, seconds, cached, log,
    header ('lean' | 'full' | None: which torch header the CUDA source compiled against),
    phases {pch, main, cuda, link: seconds}, key}."""
    from sftbuild.context import find_nvcc, nvcc_version

    cpp = "\n".join([cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources or []))
    cu = "\n".join([cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or []))
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, dict):
        functions = list(functions)
    functions = list(functions or [])
    tc = toolchain()
    arch = arch or _arch()
    key = hashlib.sha256(json.dumps([name, cpp, cu, functions, extra_cuda_cflags, extra_cflags, arch, tc,
                                     nvcc_version(), LEAN.read_text()] + ([list(include_dirs)] if include_dirs else []),
                                    sort_keys=True).encode()).hexdigest()[:24]
    out = Path(cache_dir) / key
    so, done = out / f"{name}.so", out / "objects.json"
    if so.exists():
        return {"ok": True, "so": str(so), "seconds": 0.0, "cached": True, "log": "", "key": key}
    prev = json.loads(done.read_text()) if done.exists() else None
    if prev and (not prev["ok"] or not link):  # a compile error is as final as a success: a rerun costs nothing
        return {**prev, "seconds": 0.0, "cached": True}
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    inc, defs = _flags(tc, name)
    nvcc = find_nvcc(nvcc)
    result = prev  # objects compiled earlier (e.g. where the CUDA build of torch was missing): link only
    if result is None:
        with build_slot(cache_dir) as queued:
            start += queued  # time spent waiting for a slot is load, not this build
            res, header, phases = _compile(out, name, cpp, cu, functions, extra_cuda_cflags, arch, nvcc, tc, inc,
                                           defs, cache_dir, timeout, list(include_dirs))
        phases["queued"] = round(queued, 3)
        failed = [r for r in res.values() if r[0] != 0]
        reason = None if not failed else "compile_timeout" if any(r[0] == -9 for r in failed) else "compile_error"
        result = {"ok": not failed, "reason": reason, "log": "\n".join(r[1] for r in failed)[-8000:],
                  "header": header.get("cuda"), "main_header": header["main"], "phases": phases, "key": key,
                  "so": None}
        if reason != "compile_timeout":  # a timeout may be load, not the code: try again next time
            done.write_text(json.dumps(result))
        if failed or not link:
            return {**result, "seconds": round(time.monotonic() - start, 3), "cached": False}
    libs = [f"-L{p}" for p in tc["libs"]] + [f"-Wl,-rpath,{p}" for p in tc["libs"]]
    names = ["c10", "torch", "torch_cpu", "torch_python"] + (["c10_cuda", "torch_cuda", "cudart"] if cu else [])
    cuda_lib = Path(nvcc).resolve().parent.parent / "lib64"
    cmd = ["g++", "-shared", "main.o", *(["cuda.o"] if cu else []), *libs, f"-L{cuda_lib}",
           *[f"-l{n}" for n in names], "-o", so.name]
    t = time.monotonic()
    code, llog = nvcc_parallel.run_command(cmd, out, timeout)
    phases = {**result["phases"], "link": round(time.monotonic() - t, 3)}
    seconds = round(time.monotonic() - start, 3)
    if code != 0:
        return {**result, "ok": False, "reason": "link_error", "log": llog[-8000:], "phases": phases,
                "seconds": seconds, "cached": False}
    return {**result, "so": str(so), "phases": phases, "seconds": seconds, "cached": False}


def _compile(out, name, cpp, cu, functions, extra_cuda_cflags, arch, nvcc, tc, inc, defs, cache_dir, timeout,
             include_dirs=()):
    """main.o (g++ on the pybind module) and cuda.o (nvcc) side by side, each against the lean torch
    header first and the full one where that fails. Returns ({job: (code, log)}, {job: header used},
    {phase: seconds})."""
    t = time.monotonic()
    pch = {"lean": precompiled_header(cache_dir, tc, inc, defs, lean=True)}
    phases = {"pch": round(time.monotonic() - t, 3)}  # about 0 once built on this machine
    module = f"\n\nPYBIND11_MODULE({name}, m) {{\n" + "".join(f'  m.def("{f}", &{f}, "{f}");\n' for f in functions) + "}\n"
    for header, text in (("lean", lean_source(cpp) or cpp), ("full", cpp)):
        (out / f"main_{header}.cpp").write_text(f'#include "torch_ext.h"\n{text}{module}')

    def main(header):
        if header not in pch:
            pch[header] = precompiled_header(cache_dir, tc, inc, defs, lean=False)
        return ["g++", "-c", "-std=c++17", "-fPIC", "-O2", "-w", "-I", str(Path(pch[header]).parent), *inc, *defs,
                f"main_{header}.cpp", "-o", "main.o"]

    jobs, headers = {"main": main}, {"main": "lean"}
    if cu:
        lean = lean_source(cu)
        (out / "cuda_full.cu").write_text(cu)
        if lean is not None:
            (out / LEAN.name).write_text(LEAN.read_text())
            (out / "cuda_lean.cu").write_text(lean)
        cuflags = ["-std=c++17", f"-arch={arch}", "-Xcompiler", "-fPIC", "-O3", "-w", "--expt-relaxed-constexpr",
                   *[f for f in (extra_cuda_cflags or []) if f.startswith(("-D", "--use_fast_math", "-O", "-U"))]]
        own = [f"-I{d}" for d in include_dirs]
        jobs["cuda"] = lambda header: [nvcc, "-c", *cuflags, *own, *inc, *defs, f"cuda_{header}.cu", "-o", "cuda.o"]
        headers["cuda"] = "lean" if lean is not None else "full"

    def timed(job):
        t0 = time.monotonic()
        cmd = jobs[job](headers[job])
        if job == "cuda":
            r = nvcc_parallel.run(cmd, out, timeout)
        else:
            r = shared_object(cmd, out, cache_dir, timeout)
        phases[job] = round(time.monotonic() - t0, 3)
        return r

    with ThreadPoolExecutor(2) as pool:
        res = dict(zip(jobs, pool.map(timed, list(jobs))))
        # the lean header lacked something: the full one decides
        retry = [j for j in jobs if res[j][0] != 0 and headers[j] == "lean"]
        for j in retry:
            phases[f"{j}_lean"], headers[j] = phases[j], "full"
        res.update(zip(retry, pool.map(timed, retry)))
    return res, headers, phases


def shared_object(cmd: list[str], out: Path, cache_dir: str, timeout: float) -> tuple[int, str]:
    """Run g++ `cmd` in `out` (it writes main.o from main_<header>.cpp), its result shared by content
    across builds: the pybind module depends only on the host declarations, the module's name and
    the functions it exports, which the answers to one KernelBench task mostly share, so only the
    first of them pays its 6 s of g++. Returns (exit code, output), a compile error as final as a
    success; a timeout is not kept (it may be load)."""
    src = out / cmd[cmd.index("-o") - 1]
    key = hashlib.sha256(json.dumps([cmd, src.read_text(), _gxx_version()]).encode()).hexdigest()[:24]
    d = Path(cache_dir) / "objects"
    d.mkdir(parents=True, exist_ok=True)
    obj, said = d / f"{key}.o", d / f"{key}.json"
    if said.exists():
        code, log = json.loads(said.read_text())
        if code != 0 or obj.exists():
            if code == 0:
                shutil.copyfile(obj, out / "main.o")
            return code, log
    code, log = nvcc_parallel.run_command(cmd, out, timeout)
    if code == 0:
        shutil.copyfile(out / "main.o", f"{obj}.tmp")
        os.replace(f"{obj}.tmp", obj)
    if code != -9:
        Path(f"{said}.tmp").write_text(json.dumps([code, log]))
        os.replace(f"{said}.tmp", said)
    return code, log


@functools.lru_cache(maxsize=1)
def _gxx_version() -> str:
    try:
        return subprocess.run(["g++", "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


@contextlib.contextmanager
def build_slot(cache_dir: str):
    """One of a machine-wide number of torch-header builds at a time (SFTBUILD_EXT_SLOTS, else a third
    of the cores: each build runs three compilers at once and parses torch's headers in each), so
    a full CPU pool neither thrashes nor runs out of memory. Yields the seconds spent waiting."""
    n = int(os.environ.get("SFTBUILD_EXT_SLOTS") or max(1, (os.cpu_count() or 1) // 3))
    d = Path(cache_dir) / "slots"
    d.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    while True:
        for i in range(n):
            f = open(d / f"{i}.lock", "w")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                yield time.monotonic() - t
            finally:
                f.close()  # closing releases the lock, also when the holder dies
            return
        time.sleep(0.05)


def prepare(cache_dir: str) -> float:
    """Build the shared precompiled header before a batch of builds, so none waits on it; seconds."""
    t = time.monotonic()
    tc = toolchain()
    precompiled_header(cache_dir, tc, *_flags(tc, "x"), lean=True)
    return time.monotonic() - t


def _flags(tc: dict, name: str) -> tuple[list, list]:
    """Include paths and defines of every torch-header compile."""
    inc = [f"-I{d}" for d in tc["includes"]] + [f"-I{tc['python']}", "-isystem", str(SHIM)]  # -isystem comes after -I, so real headers win
    return inc, [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H", *tc["abi"]]


def compile_only(cpp_sources, cuda_sources, cache_dir: str, arch: str = "", nvcc: str = "",
                 timeout: float = 120.0, name: str = "sftbuild_probe") -> dict:
    """build() up to the object files (for machines without the CUDA build of torch to link against)."""
    return build(name, cpp_sources, cuda_sources, [], cache_dir, arch=arch, nvcc=nvcc, timeout=timeout, link=False)


def precompiled_header(cache_dir: str, tc: dict, inc: list, defs: list, lean: bool = True) -> str:
    """The pybind module's torch header precompiled for g++, once per toolchain and shared by every
    build: the lean one (tensor class and pybind casters) or all of torch/extension.h."""
    text = (f'#pragma once\n#include "{LEAN.name}"\n#include <torch/csrc/utils/pybind.h>\n' if lean else
            "#pragma once\n#include <torch/extension.h>\n")
    key = hashlib.sha256(json.dumps([tc, defs[1:], inc, text, LEAN.read_text() if lean else ""],
                                    sort_keys=True).encode()).hexdigest()[:16]
    d = Path(cache_dir) / "pch" / key
    d.mkdir(parents=True, exist_ok=True)
    header, gch = d / "torch_ext.h", d / "torch_ext.h.gch"
    with open(d / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build; the others wait for it
        if not gch.exists():
            header.write_text(text)
            if lean:
                (d / LEAN.name).write_text(LEAN.read_text())
            defs_pch = [x for x in defs if not x.startswith("-DTORCH_EXTENSION_NAME")]
            cmd = ["g++", "-x", "c++-header", "-std=c++17", "-fPIC", "-O2", "-w", *inc, *defs_pch, str(header),
                   "-o", str(gch) + ".tmp"]
            sandbox.run(cmd, 600, cwd=str(d), rw=[str(d)], ro=nvcc_parallel.arg_dirs(cmd))
            if Path(str(gch) + ".tmp").exists():
                os.replace(str(gch) + ".tmp", gch)
    return str(header)


def _arch() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except Exception:
        pass
    return "sm_90"


def load(name: str, so: str):
    loader = importlib.machinery.ExtensionFileLoader(name, so)
    spec = importlib.util.spec_from_file_location(name, so, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@contextlib.contextmanager
def patched_load_inline(cache_dir: str):
    """Inside the block, torch.utils.cpp_extension.load_inline builds through build()."""
    from torch.utils import cpp_extension as ce

    orig = ce.load_inline

    def fast(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None, extra_cuda_cflags=None,
             **kw):
        from sftbuild.trial import deadline

        with deadline.lifted():  # a build inside a watched call is not the call's time
            res = build(name, cpp_sources, cuda_sources, functions, cache_dir, extra_cuda_cflags=extra_cuda_cflags,
                        extra_cflags=extra_cflags)
        if not res["ok"]:
            raise ExtensionBuildError(res.get("log", "")[-3000:])
        return load(name, res["so"])

    ce.load_inline = fast
    try:
        yield
    finally:
        ce.load_inline = orig


class ExtensionBuildError(RuntimeError):
    """The candidate's inline CUDA extension failed to compile (reason compile_error)."""
