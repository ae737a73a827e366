"""Run-time refusals for untrusted Python: an audit hook in the process that imports a candidate.

- `watch(untrusted)`, in a process sftbuild.sandbox started, installs the hook once per process (a hook cannot be removed; a later item's
  `watch` starts a fresh record) before any record code is imported; `untrusted` are the folders
  the record's own code runs from (its work folder, its package tree).
- Refused, with a PermissionError naming the event: opening a file for writing, or creating,
  removing, renaming or changing one, outside the folders the sandbox made writable (SFTBUILD_RW:
  the scratch folder, the call's caches); every socket connect, bind, send and name lookup; and,
  called from the record's own code, starting, replacing or signalling a process.
- `refused()` lists what was refused since `watch`: a verdict with any is `sandbox_violation`.
- A process the toolchain starts on the record's behalf (Triton's or load_inline's compiler) passes:
  the OS layers of sftbuild.sandbox contain it. The hook names what was tried; the OS layers are the
  boundary (native code, or Python that forges its frames, is not seen here).
"""
from __future__ import annotations

import errno
import os
import sys
import sysconfig

from sftbuild.sandbox import RW_ENV  # set by sandbox.Proc: the folders the sandbox made writable

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# events that change a file: the positions of the paths they change
CHANGES = {"os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.mkdir": (0,), "os.link": (1,),
           "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
           "os.chflags": (0,), "os.lchmod": (0,), "os.lchown": (0,), "shutil.rmtree": (0,), "shutil.copyfile": (1,),
           "shutil.copymode": (1,), "shutil.copystat": (1,), "shutil.copytree": (1,), "shutil.move": (0, 1),
           "shutil.chown": (0,), "shutil.make_archive": (0,), "shutil.unpack_archive": (1,)}
NETWORK = ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
           "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr")
SPAWNS = ("subprocess.Popen", "os.system", "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
          "os.kill", "os.killpg", "os.startfile", "signal.pthread_kill")

_STATE: dict = {"installed": False, "refused": [], "untrusted": (), "writable": ()}
_STDLIB = tuple(os.path.realpath(p) + "/" for p in {sysconfig.get_paths()["stdlib"],
                                                     sysconfig.get_paths()["platstdlib"]})


def watch(untrusted=()) -> None:
    """Install the hook (once) and start a fresh record of refusals for one item."""
    writable = [p for p in os.environ.get(RW_ENV, "").split(os.pathsep) if p]
    if not writable:  # not in a sandboxed process (a test calling the runner in its own): nothing to watch
        return
    _STATE.update(refused=[], untrusted=tuple(os.path.realpath(p) for p in untrusted if p),
                  writable=tuple(os.path.realpath(p) for p in writable) + ("/dev/null",))
    if not _STATE["installed"]:
        sys.dont_write_bytecode = True  # an import's cache write outside them is no attempt of the record's
        sys.addaudithook(_hook)
        _STATE["installed"] = True


def refused() -> list[str]:
    return list(_STATE["refused"])


def verdict(refusals: list[str]) -> dict:
    """The verdict of an item whose code tried what the sandbox refuses."""
    return {"status": "dropped", "reason": "sandbox_violation", "recycle": True,
            "detail": "the sandbox refused " + "; ".join(dict.fromkeys(refusals))[:800]}


def os_refusal(e: BaseException) -> str | None:
    """What the OS layers refused, where `e` is their refusal (a read-only or forbidden path)."""
    if isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{type(e).__name__}: {e}"[:400]
    return None


def _hook(event: str, args: tuple) -> None:
    if not _STATE["writable"]:  # not watching yet
        return
    why = None
    if event == "open":
        path, mode, flags = (list(args) + [None, None])[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & WRITE_FLAGS)
        if writes and isinstance(path, (str, bytes, os.PathLike)) and not _writable(path):
            why = f"open({os.fsdecode(path)!r}, {mode or 'for writing'})"
    elif event in CHANGES:
        bad = [a for i, a in enumerate(args) if i in CHANGES[event] and isinstance(a, (str, bytes, os.PathLike))
               and not _writable(a)]
        if bad:
            why = f"{event}({os.fsdecode(bad[0])!r})"
    elif event in NETWORK:
        why = f"{event}({args[1] if event.endswith(('connect', 'bind', 'sendto')) and len(args) > 1 else ''!s})"
    elif event in SPAWNS and _from_untrusted():
        why = f"{event}({str(args[:2])[:160]})"
    if why:
        _STATE["refused"].append(why)
        raise PermissionError(f"sftbuild sandbox: {why} refused")


def _writable(path) -> bool:
    try:
        p = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return any(p == w or p.startswith(w.rstrip("/") + "/") for w in _STATE["writable"])


def _from_untrusted() -> bool:
    """Whether the innermost caller outside the standard library and this module is the record's own code
    (a file in its folders, or text it compiled itself)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name != __file__ and not name.startswith(_STDLIB) and not name.startswith("<frozen"):
            real = os.path.realpath(name)
            return not os.path.isfile(real) or any(real.startswith(u.rstrip("/") + "/") for u in _STATE["untrusted"])
        frame = frame.f_back
    return False
