"""compute-sanitizer memcheck (and optionally racecheck) on one small trial.

The worker runs a tiny standalone runner (sandbox.py) under compute-sanitizer as a
subprocess, so a fault there never touches the worker's CUDA context.
"""
from __future__ import annotations

import hashlib
import re
import shutil

from sftbuild.executor import WorkerFailure
from sftbuild.sandbox import run_isolated

ERRORS = re.compile(r"ERROR SUMMARY:\s*(\d+) error")


def chosen(record_id: str, mode: str, fraction: float) -> bool:
    """`all`, `off`, or a stable hash-sampled fraction of records."""
    if mode == "all":
        return True
    if mode != "sample":
        return False
    return int(hashlib.sha256(record_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < fraction


def small(task: dict) -> dict:
    """One shape, one dtype, one seed, no timing: enough to touch every code path once."""
    t = {**task, "shapes": 1, "seeds": 1, "timing": False, "memcheck": "off", "dtypes": task["dtypes"][:1]}
    if t.get("binding"):
        t["binding"] = {**t["binding"], "layouts": ["contiguous"]}
    t["max_numel"] = 1 << 16
    return t


def run(task: dict, runner: str, tools=("memcheck",), timeout: float = 300.0) -> dict:
    """{"ok": bool, "tool": ..., "errors": n, "log": tail}; ok=None when the tool is missing."""
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not shutil.which(sanitizer):
        return {"ok": None, "why": "compute-sanitizer not found"}
    for tool in tools:
        prefix = [sanitizer, "--tool", tool, "--error-exitcode", "86", "--print-limit", "20"]
        if tool == "memcheck":
            prefix += ["--leak-check", "no"]
        res = run_isolated(runner, small(task), timeout, prefix=prefix, env={"CUDA_MODULE_LOADING": "LAZY"})
        if isinstance(res, WorkerFailure):
            return {"ok": False, "tool": tool, "why": f"{res.kind}: {res.detail[-1500:]}"}
        log = res.get("_log", "")
        m = ERRORS.search(log)
        errors = int(m.group(1)) if m else 0
        if res.get("_exit") == 86 or errors:
            return {"ok": False, "tool": tool, "errors": errors, "log": log[-3000:]}
    return {"ok": True, "tools": list(tools)}
