"""python_effects: file writes, network calls, process spawns and the dynamic spellings that hide them.

A kernel module computes tensors: it has no business writing files, reaching the network or starting
processes. Names are resolved through import aliases (`from os import system as s`), and the ways to
reach a name the AST cannot read (`getattr` with a computed name, `__import__`, `importlib`, `eval`,
`exec`, `builtins`, `sys.modules`) are findings themselves.
"""
from __future__ import annotations

import ast

from sftbuild.validate.static import PYTHON, STATIC_CHECKS, StaticCheck
from sftbuild.validate.static._read import dotted, full_name

WRITES = ("os.remove", "os.unlink", "os.rename", "os.renames", "os.replace", "os.rmdir", "os.removedirs", "os.mkdir",
          "os.makedirs", "os.link", "os.symlink", "os.truncate", "os.ftruncate", "os.chmod", "os.chown", "os.lchown",
          "os.mkfifo", "os.mknod", "os.utime", "os.open", "os.fdopen", "os.putenv", "shutil", "pathlib.Path.write_text",
          "pathlib.Path.write_bytes", "tempfile.mktemp")
# method names only paths and files have (a call on any object: the receiver's type is not known here)
WRITE_METHODS = ("write_text", "write_bytes", "touch", "unlink", "rmdir", "mkdir", "symlink_to", "hardlink_to",
                 "chmod", "lchmod")
NETWORK = ("socket", "ssl", "urllib", "urllib3", "http", "requests", "httpx", "aiohttp", "ftplib", "smtplib",
           "telnetlib", "xmlrpc", "asyncio.open_connection", "asyncio.open_unix_connection", "websocket", "paramiko")
SPAWNS = ("subprocess", "os.system", "os.popen", "os.exec", "os.spawn", "os.fork", "os.forkpty", "os.posix_spawn",
          "os.kill", "os.killpg", "multiprocessing", "pty", "asyncio.create_subprocess", "pexpect", "signal.pthread_kill")
DYNAMIC = ("importlib", "builtins", "sys.modules", "code", "codeop", "runpy", "pickle", "marshal")
# builtins that reach any name or run any text (`open` passed around as a value hides its mode)
BUILTINS = {"__import__", "eval", "exec", "compile", "vars", "__builtins__", "breakpoint", "open"}
KINDS = ((WRITES, "writes files"), (NETWORK, "reaches the network"), (SPAWNS, "starts or signals a process"),
         (DYNAMIC, "reaches names the checks cannot read"))
# objects a computed getattr may read: the module itself and the numeric libraries (a dtype or an op by name);
# on anything else it could reach os or builtins by a name the AST cannot read
GETATTR_SAFE = ("self", "cls", "torch", "triton", "numpy", "math", "operator", "einops")
OPENERS = ("open", "io.open", "builtins.open", "codecs.open", "os.fdopen", "gzip.open", "bz2.open", "lzma.open",
           "tarfile.open", "zipfile.ZipFile")


def _is(name: str, bad: str) -> bool:
    return name == bad or name.startswith(bad + ".") or (bad.endswith(("exec", "spawn", "create_subprocess"))
                                                        and name.startswith(bad))


def _writing_mode(call: ast.Call, name: str) -> bool:
    """Whether an open-like call may write: a write mode, or a mode the AST cannot read."""
    pos = 1 if name in OPENERS and name != "os.fdopen" else 0  # a method (Path.open) takes the mode first
    mode = next((k.value for k in call.keywords if k.arg == "mode"), call.args[pos] if len(call.args) > pos else None)
    if mode is None:
        return False
    if not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)):
        return True
    return any(c in mode.value for c in "wax+")


@STATIC_CHECKS.register
class PythonEffects(StaticCheck):
    """File writes, network calls and process spawns, however the module spells them."""

    name = "python_effects"
    version = 2  # a computed getattr on the module itself or a numeric library reads no effect
    order = 72  # after disguise: a getattr that hides a torch call stays a cheat
    languages = PYTHON

    def check(self, src):
        called = {id(n.func) for n in ast.walk(src.tree) if isinstance(n, ast.Call)}
        # names the module binds itself (a variable called `compile` is no builtin)
        local = {n.id for n in ast.walk(src.tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        local |= {n.name for n in ast.walk(src.tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        local |= {a.arg for a in ast.walk(src.tree) if isinstance(a, ast.arg)}
        for n in ast.walk(src.tree):
            why = self._why(n, src.aliases, called, local)
            if why:
                yield self.found("forbidden_call", f"{why} (line {getattr(n, 'lineno', '?')})")
                return

    def _why(self, n: ast.AST, aliases: dict, called: set, local: set) -> str | None:
        names = []
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            names = [f"{n.module or ''}.{a.name}" for a in n.names] + [n.module or ""]
        elif isinstance(n, ast.Name) and n.id in BUILTINS and n.id not in local and n.id not in aliases:
            if n.id != "open" or id(n) not in called:
                return f"{n.id}: reaches names the checks cannot read"
        elif isinstance(n, (ast.Name, ast.Attribute)) and dotted(n).partition(".")[0] in aliases:
            names = [full_name(n, aliases)]  # a name the module imported
        if isinstance(n, ast.Call):
            name = full_name(n.func, aliases)
            if name in OPENERS or (isinstance(n.func, ast.Attribute) and n.func.attr == "open"):
                if _writing_mode(n, name):
                    return f"{name or 'open'}(..., a mode that writes): writes files"
            if isinstance(n.func, ast.Attribute) and n.func.attr in WRITE_METHODS:
                return f".{n.func.attr}(): writes files"
            if name == "getattr" and len(n.args) > 1:
                attr = n.args[1]
                obj, head = n.args[0], ""
                if isinstance(obj, (ast.Name, ast.Attribute)):
                    head = dotted(obj).partition(".")[0]
                    head = head if head in ("self", "cls") else "" if head in local else full_name(obj, aliases)
                safe = head.partition(".")[0] in GETATTR_SAFE  # never a name the module rebinds
                if not (isinstance(attr, ast.Constant) and isinstance(attr.value, str)):
                    return None if safe else "getattr with a computed name: reaches names the checks cannot read"
                names = [f"{full_name(n.args[0], aliases)}.{attr.value}"]
        for name in names:
            for group, what in KINDS:
                bad = next((b for b in group if _is(name, b)), None)
                if bad:
                    return f"{name}: {what}"
        return None
