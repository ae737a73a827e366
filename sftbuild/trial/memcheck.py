"""compute-sanitizer on one small trial: memcheck, and racecheck and synccheck for shared memory.

The worker runs a tiny standalone runner (sandbox.py) under compute-sanitizer as a
subprocess, so a fault there never touches the worker's CUDA context.

Which tools run (`tools_for`): memcheck always; racecheck and synccheck too when the code
declares `__shared__` memory (racecheck alone on request for other code). A finding is
reported with the tool's own one-line message (`finding`). The run has no guard regions
(sftbuild.trial.fences) and no caching allocator, so an access past an edge lands outside
every allocation, where memcheck sees it: that is how it names the fault of a record whose
guards tripped.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil

from sftbuild.executor import WorkerFailure
from sftbuild.sandbox import run_isolated
from sftbuild.trial_types import TrialTask

ERRORS = re.compile(r"ERROR SUMMARY:\s*(\d+) error")
# whole words: a backtrace line ("Saved host backtrace ...") is no race finding
FINDING = re.compile(r"^=+\s*(.*\b(?:Invalid|Error|error|Race|race|Barrier|barrier|hazard|Hazard|Program hit|"
                     r"Misaligned|Out-of-range|out of bounds|Illegal|illegal)\b.*)$", re.M)
SUMMARY = re.compile(r"SUMMARY|COMPUTE-SANITIZER", re.I)
# the tool itself failing to start: no finding about the record, which keeps its verdict
TOOL_FAILED = re.compile(r"Failed to access the temporary directory|(?:Could not|Unable to) find injection library|"
                         r"Failed to initialize the (?:debugger|tool)", re.I)
RUN_ENV = {"CUDA_MODULE_LOADING": "LAZY", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "SFTBUILD_NO_FENCES": "1"}


def tools_for(code: str, racecheck: bool = False) -> tuple[str, ...]:
    """memcheck; racecheck and synccheck for code with `__shared__` memory; racecheck when asked."""
    if "__shared__" in (code or ""):
        return ("memcheck", "racecheck", "synccheck")
    return ("memcheck", "racecheck") if racecheck else ("memcheck",)


def finding(log: str) -> str:
    """The tool's first one-line message about a fault in `log` ('' when there is none)."""
    for m in FINDING.finditer(log or ""):
        line = m.group(1).strip()
        if line and not SUMMARY.search(line):
            return line[:300]
    return ""


def chosen(record_id: str, mode: str, fraction: float) -> bool:
    """`all`, `off`, or a stable hash-sampled fraction of records."""
    if mode == "all":
        return True
    if mode != "sample":
        return False
    return int(hashlib.sha256(record_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < fraction


def small(task: TrialTask) -> TrialTask:
    """One shape, one dtype, one seed, no timing: enough to touch every code path once."""
    b = task.binding
    return dataclasses.replace(
        task, shapes=1, seeds=1, timing=False, memcheck="off", dtypes=task.dtypes and task.dtypes[:1],
        max_numel=1 << 16,
        binding=dataclasses.replace(b, launch={**b.launch, "layouts": ["contiguous"]}) if b else None)


def run(task: TrialTask, runner: str, tools=("memcheck",), timeout: float = 300.0) -> dict:
    """{"ok": bool, "tool": ..., "errors": n, "log": tail}; ok=None when the tool is missing."""
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not shutil.which(sanitizer):
        return {"ok": None, "why": "compute-sanitizer not found"}
    for tool in tools:
        # an error code a CUDA API call returns is no memory fault: torch's own start-up and op_db's
        # import query features the driver refuses (34 of them on an H200), and a candidate's failing
        # launch or copy already fails its trials; faults in device code are reported as before
        prefix = [sanitizer, "--tool", tool, "--error-exitcode", "86", "--print-limit", "20",
                  "--report-api-errors", "no"]
        if tool == "memcheck":
            prefix += ["--leak-check", "no"]
        res = run_isolated(runner, small(task), timeout, prefix=prefix, env=RUN_ENV)
        if isinstance(res, WorkerFailure) and TOOL_FAILED.search(res.detail):
            return {"ok": None, "tool": tool, "why": f"compute-sanitizer could not start: "
                                                      f"{TOOL_FAILED.search(res.detail).group(0)}"}
        if isinstance(res, WorkerFailure):
            return {"ok": False, "tool": tool, "why": f"{res.kind}: {res.detail[-1500:]}",
                    "finding": finding(res.detail) or f"{tool} run {res.kind}"}
        log = res.get("_log", "")
        m = ERRORS.search(log)
        errors = int(m.group(1)) if m else 0
        if res.get("_exit") == 86 or errors:
            return {"ok": False, "tool": tool, "errors": errors, "log": log[-3000:],
                    "finding": finding(log) or f"{tool} reported {errors} error(s)"}
    return {"ok": True, "tools": list(tools)}
