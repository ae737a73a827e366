"""Filesystem confinement without bubblewrap: Landlock, and a mount namespace's read-only view.

Run as `python -I -S confine.py SPEC CMD...`, this file is the supervisor of one sandboxed command
(it imports nothing of sftbuild, so it runs before any of it is importable). SPEC is JSON:
  mounts   (inside a mount namespace `unshare` made) every mount read-only; a private tmpfs over
           each folder of `hide` (/tmp, /home, /root, /etc, ...); the `ro` and `rw` paths that lie
           under one bound back (read-only, writable); the `rw` paths writable wherever they are
  landlock the process and all it starts may read (and execute) only under `ro`, read and write
           only under `rw` and the devices of `dev`; with ABI >= 4 and no network, no TCP bind or connect; with ABI >= 6, no
           signal to a process outside the sandbox and no abstract unix socket outside it
Then it starts CMD, leads its process group, and ends the group when its parent goes (SIGTERM from
PR_SET_PDEATHSIG). A layer SPEC asks for that cannot be applied ends it with exit code 126 and one
line on stderr: the command never runs unconfined.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import stat
import struct
import subprocess
import sys

# ---- Landlock (linux/landlock.h) ------------------------------------------------------------------

SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = 444, 445, 446  # the same on every architecture
PR_SET_NO_NEW_PRIVS = 38
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = (
    1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12)
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the rights a rule on a file may hold
READ = EXECUTE | READ_FILE | READ_DIR
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2  # ABI 4
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1, 2  # ABI 6

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (old kernel, disabled, gVisor)."""
    try:
        v = _libc.syscall(SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except (AttributeError, OSError):
        return 0
    return max(0, int(v))


def handled_fs(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def landlock(ro, rw, network: bool) -> int:
    """Restrict this process, and everything it starts, to `ro` (read, execute) and `rw` (everything);
    the ABI applied. Raises OSError where Landlock cannot be applied."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError("Landlock is not available in this kernel")
    fs = handled_fs(abi)
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 and not network else 0
    scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if abi >= 6 else 0
    attr = struct.pack("QQQ", fs, net, scoped)[:8 if abi < 4 else 16 if abi < 6 else 24]
    fd = _libc.syscall(SYS_CREATE, ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        # writable paths are added last: a folder both read-only and writable (a cache) ends writable
        for paths, rights in ((ro, READ), (rw, fs)):
            for p in paths:
                _add_rule(fd, p, rights & fs)
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
        if _libc.syscall(SYS_RESTRICT, fd, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(fd)
    return abi


def _add_rule(ruleset: int, path: str, rights: int) -> None:
    try:
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not there: nothing to allow
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        attr = struct.pack("=Qi", rights, pfd)  # struct landlock_path_beneath_attr is packed
        if _libc.syscall(SYS_ADD_RULE, ruleset, 1, ctypes.c_char_p(attr), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(pfd)


# ---- a mount namespace's read-only view ---------------------------------------------------------

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
_OPT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
              "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}


def _mount(src, target, fstype, flags, data=None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    if _libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _mounts() -> list[tuple[str, int]]:
    """(mount point, its flags to keep) of every mount this namespace sees, outermost first."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")  # \040 for a space
            flags = sum(_OPT_FLAGS.get(o, 0) for o in fields[5].split(","))
            out.append((point, flags))
    return sorted(out, key=lambda m: m[0].count("/") if m[0] != "/" else 0)


def _is_device(path: str) -> bool:
    mode = os.stat(path).st_mode
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def read_only_view(ro, rw, hide) -> None:
    """Every mount read-only, a private tmpfs over each folder of `hide`, `ro` and `rw` paths that lie
    under one bound back in, and every `rw` path writable. Raises OSError when a step fails."""
    held = {}  # a handle on each path to bind back, taken before anything is hidden
    for p in [*ro, *rw]:
        if p not in held and os.path.exists(p):
            held[p] = os.open(p, os.O_PATH | os.O_CLOEXEC)
    hide = [h for h in hide if os.path.isdir(h) and not os.path.islink(h)]
    hidden = [h for h in hide if not _under(os.path.dirname(h), [x for x in hide if x != h])]
    for point, flags in _mounts():
        if _under(point, hidden) or not os.path.exists(point) or _is_device(point):
            continue  # a device bound in on its own (a container's /dev/nvidia0) stays as it is
        try:
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except OSError:
            if point in ("/", *[m for m in ("/usr", "/home", "/root", "/etc") if os.path.ismount(m)]):
                raise
            # a mount this namespace may not change (locked by its owner), or one under /proc and /sys
            if not point.startswith(("/proc", "/sys", "/dev")):
                raise
    for h in sorted(hidden, key=len):
        _mount("tmpfs", h, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for p in sorted(held, key=len):
        writable = p in rw
        if not writable and not _under(p, hidden):
            continue  # already visible, read-only
        if _under(p, hidden) and not os.path.exists(p):  # a mount point in the tmpfs
            if os.path.isdir(f"/proc/self/fd/{held[p]}"):
                os.makedirs(p, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(p), exist_ok=True)
                open(p, "a").close()
        _mount(f"/proc/self/fd/{held[p]}", p, None, MS_BIND | MS_REC)
        keep = next((f for m, f in reversed(_mounts()) if m == p), 0)
        _mount(None, p, None, MS_REMOUNT | MS_BIND | keep | (0 if writable else MS_RDONLY))
    for fd in held.values():
        os.close(fd)


# ---- the supervisor -----------------------------------------------------------------------------

def confine(spec: dict) -> None:
    """Apply the layers `spec` asks for to this process (see the module's docstring)."""
    if spec.get("mounts"):
        read_only_view(spec.get("ro", []), spec.get("rw", []), spec.get("hide", []))
    if spec.get("landlock"):
        landlock(spec.get("ro", []), [*spec.get("rw", []), *spec.get("dev", [])], bool(spec.get("network")))
    if spec.get("cwd"):
        os.chdir(spec["cwd"])


def main(argv: list[str]) -> None:
    spec = json.loads(argv[1]) if argv[1] else {}
    try:
        confine(spec)
    except OSError as e:
        sys.stderr.write(f"sandbox: the command was not started, its confinement failed: {e}\n")
        sys.stderr.flush()
        os._exit(126)
    signal.signal(signal.SIGTERM, lambda *a: os.killpg(os.getpgrp(), signal.SIGKILL))
    child = subprocess.Popen(argv[2:], close_fds=False)
    code = child.wait()
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main(sys.argv)
