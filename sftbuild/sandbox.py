"""One-shot isolated runs: a fresh Python process per call, killed at a timeout.

Used for CPU-interpreter trials and probes (untrusted code off the main process), by
validate and bind alike, and as the tiny standalone runner that compute-sanitizer wraps.
"""
from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import tempfile

from sftbuild.executor import WorkerFailure


def run_isolated(func: str, task, timeout: float, prefix=(), env: dict | None = None):
    """Call `module:function`(task) in a new process; its result, or a WorkerFailure."""
    with tempfile.TemporaryDirectory(prefix="sftbuild_sbx_") as d:
        src, dst = os.path.join(d, "in.pkl"), os.path.join(d, "out.pkl")
        with open(src, "wb") as f:
            pickle.dump((func, task), f)
        try:
            p = subprocess.run([*prefix, sys.executable, "-m", "sftbuild.sandbox", src, dst],
                               capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
        except subprocess.TimeoutExpired:
            return WorkerFailure("timeout", f"no result within {timeout:.0f} s")
        if not os.path.exists(dst):
            return WorkerFailure("crash", f"exit code {p.returncode}: {(p.stdout + p.stderr)[-2000:]}")
        with open(dst, "rb") as f:
            result = pickle.load(f)
        if isinstance(result, dict):
            result.setdefault("_exit", p.returncode)
            result.setdefault("_log", (p.stdout + p.stderr)[-6000:])
        return result


def _main(src: str, dst: str) -> None:
    with open(src, "rb") as f:
        func, task = pickle.load(f)
    mod, _, name = func.partition(":")
    try:
        result = getattr(importlib.import_module(mod), name)(task)
    except Exception as e:
        result = {"status": "dropped", "reason": "error", "detail": repr(e)[:2000]}
    with open(dst + ".tmp", "wb") as f:
        pickle.dump(result, f)
    os.replace(dst + ".tmp", dst)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: a hostile atexit hook cannot change the result


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
