"""The compile gate: nvcc to a cubin (and, for bound kernels, a launchable .so).

Runs in the CPU pool. Each compile has a timeout and a memory limit, and its
result is cached under the workspace by a hash of the code, the flags and the
toolchain version, so a rerun or a duplicate costs nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path

from sftbuild.context import nvcc_version

FLAGS = ["-std=c++17", "--expt-relaxed-constexpr", "--expt-extended-lambda", "-lineinfo"]
ENTRY = re.compile(r"ptxas info\s*: (?:Compiling entry function|Function properties for) '?([\w$.]+)'?")
USED = re.compile(r"ptxas info\s*: Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


class NvccMissing(Exception):
    pass


def find_nvcc(configured: str = "") -> str:
    for cand in (configured, shutil.which("nvcc") or "",
                 os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if cand and os.path.exists(cand):
            return cand
    raise NvccMissing("nvcc was not found: install the CUDA toolkit, put nvcc on PATH, "
                      "or set validate.nvcc / CUDA_HOME")


def include_dirs(include_sets: list[str]) -> list[str]:
    dirs = []
    if "torch" in include_sets:
        import torch

        inc = Path(torch.__file__).parent / "include"
        dirs += [str(inc), str(inc / "torch" / "csrc" / "api" / "include")]
    return dirs


def parse_ptxas(log: str) -> dict:
    """Per-kernel resources from `-Xptxas -v` output, and the worst case over kernels."""
    kernels: dict[str, dict] = {}
    current = None
    for line in log.splitlines():
        m = ENTRY.search(line)
        if m:
            current = kernels.setdefault(m.group(1), {})
            continue
        if current is None:
            continue
        m = FRAME.search(line)
        if m:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = USED.search(line)
        if m:
            current.update(registers=int(m.group(1)), barriers=int(m.group(2) or 0), smem=int(m.group(3) or 0))
    worst = {k: max((v.get(k, 0) for v in kernels.values()), default=0)
             for k in ("registers", "smem", "stack", "spill_stores", "spill_loads")}
    return {"kernels": kernels, **worst}


def compile_task(task: dict) -> dict:
    """Compile one record. Task keys: id, code, harness (or None), include_sets, arch, timeout,
    nvcc, cache_dir. Returns {ok, reason, log, resources, so, seconds, cached}."""
    nvcc = find_nvcc(task.get("nvcc", ""))
    flags = FLAGS + [f"-arch={task['arch']}"] + [f"-I{d}" for d in include_dirs(task["include_sets"])]
    key = hashlib.sha256(json.dumps([task["code"], task.get("harness"), flags, nvcc_version()]).encode()).hexdigest()[:24]
    out_dir = Path(task["cache_dir"]) / key
    done = out_dir / "result.json"
    if done.exists():
        res = json.loads(done.read_text())
        if not res.get("so") or Path(res["so"]).exists():
            return {**res, "cached": True}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "kernel.cuh").write_text(task["code"], encoding="utf-8")
    if task.get("harness"):
        (out_dir / "harness.cu").write_text(task["harness"], encoding="utf-8")
        cmd = [nvcc, "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", *flags, "harness.cu", "-o", "harness.so"]
    else:
        (out_dir / "kernel.cu").write_text('#include "kernel.cuh"\n', encoding="utf-8")
        cmd = [nvcc, "-cubin", "-Xptxas", "-v", *flags, "kernel.cu", "-o", "kernel.cubin"]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=out_dir, capture_output=True, text=True, timeout=task["timeout"],
                              preexec_fn=_limits, env={**os.environ, "TMPDIR": str(out_dir)})
    except subprocess.TimeoutExpired:
        return {"ok": False, "reason": "compile_timeout", "log": f"nvcc exceeded {task['timeout']} s",
                "seconds": time.monotonic() - start, "cached": False}
    log = (proc.stdout + proc.stderr)[-20000:]
    res = {"ok": proc.returncode == 0, "reason": None if proc.returncode == 0 else "compile_error",
           "log": log if proc.returncode else "", "resources": parse_ptxas(log),
           "so": str(out_dir / "harness.so") if task.get("harness") and proc.returncode == 0 else None,
           "seconds": round(time.monotonic() - start, 3), "key": key}
    done.write_text(json.dumps(res))
    return {**res, "cached": False}


def _limits():
    # nvcc on hostile code can explode in memory; 8 GB is far above any real kernel's need
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
