"""python_forbidden: processes, threads, streams, exits and native calls in a Python module."""
from __future__ import annotations

import ast

from sftbuild.validate.static import PYTHON, STATIC_CHECKS, StaticCheck
from sftbuild.validate.static._read import full_name

PY_FORBIDDEN = {
    "os.system": "runs a shell command", "os.popen": "runs a shell command", "os.fork": "starts a process",
    "os.exec": "replaces the process", "os.spawn": "starts a process", "os._exit": "exits the process",
    "os.kill": "signals a process", "os.killpg": "signals a process group", "os.forkpty": "starts a process",
    "os.abort": "exits the process", "pty": "starts processes", "sys.exit": "exits the process", "exit": "exits the process",
    "quit": "exits the process", "subprocess": "starts a process", "multiprocessing": "starts processes",
    "threading": "spawns a thread to hide work", "concurrent.futures": "spawns workers to hide work",
    "torch.cuda.Stream": "creates its own stream to hide work from the timer",
    "torch.cuda.stream": "switches streams to hide work from the timer",
    "torch.cuda.set_device": "changes device state", "ctypes": "calls native code the checks cannot see",
    "signal": "installs signal handlers", "socket": "opens a network connection",
    "torch.cuda.synchronize_hook": "hooks the runtime",
}


@STATIC_CHECKS.register
class PythonForbidden(StaticCheck):
    """Processes, threads, streams, exits and native calls anywhere in the module."""

    name = "python_forbidden"
    version = 3  # new calls refused, and the shared kernel view read (string literals kept whole)
    order = 50
    languages = PYTHON

    def check(self, src):
        for n in ast.walk(src.tree):
            names = []
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
            elif isinstance(n, (ast.Call, ast.Attribute)):
                names = [full_name(n.func if isinstance(n, ast.Call) else n, src.aliases)]
            for name in names:
                for bad, why in PY_FORBIDDEN.items():
                    if name == bad or name.startswith(bad + ".") or (bad.endswith(("exec", "spawn"))
                                                                    and name.startswith(bad)):
                        yield self.found("forbidden_call", f"{name}: {why} (line {n.lineno})")
                        return
