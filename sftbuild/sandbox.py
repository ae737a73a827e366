"""The sandbox: every compile and every run of untrusted code goes through here.

`run(cmd, timeout, rw=, ro=, gpu=)` runs one command; `Proc` starts one in the background;
`run_isolated("module:function", task, timeout)` calls a task function in a fresh Python process
and returns its result, or a `WorkerFailure`; `start_worker(env)` starts a long-lived worker (the
executor's GPU and interpreter workers) that serves (function, item) pairs over a socket. Results
of sandboxed Python come back as plain data only (dicts, lists, strings, numbers): a forged result
cannot run code in the process that reads it.

Layers, detected once per process (`layers()`), said once when a stage starts (`unavailable()`)
and recorded in every run manifest (`sftbuild.context.StageRun`):
  isolation  bubblewrap: user, mount, pid, network, IPC and UTS namespaces; the system, Python and
             the toolchain bound read-only; a private scratch folder as HOME and /tmp; only the
             folders a call names writable; /dev/nvidia* bound in when the call needs a GPU.
             Else `unshare`: user, pid, mount and network namespaces, in which sftbuild.confine
             lays Landlock over the same allowlist, or, without Landlock, a read-only mount view
             (`mounts`, `filesystem()`); else Landlock alone. Where no layer confines files, untrusted code does not run
             (`refusal()`) unless sandbox.allow_unconfined (or isolation: none) says it may.
  rlimits    CPU seconds, address space and process count (neither for GPU runs: CUDA reserves far
             more address space than it uses, and the count is of all this user's threads), file
             size, no core files; the kernel does not enforce the process count for root
  disk       a command is ended once the disk of a folder it may write has less than min_free_mb
             free: the file size limit bounds one file, not how many
  env        only an allowlist of variables passes; HOME and TMPDIR point at the scratch folder
  output     stdout and stderr are kept to their last `output_kb`
  hygiene    each command leads its own process group; a timeout kills the group (compiler front
             ends, cc1plus, ptxas and their children), and so does the end of the command; each
             command dies with the process that started it (PR_SET_PDEATHSIG), and its namespace
             with it; without bubblewrap a supervisor (sftbuild.confine) ends the command's group then

The policy comes from the config's `sandbox` section (`configure`), and travels to worker
processes through the environment variable SFTBUILD_SANDBOX. The threat model this serves is in
docs/threat-model.md.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import functools
import glob
import importlib
import importlib.metadata
import io
import json
import os
import pickle
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path

from sftbuild import confine


@dataclasses.dataclass
class WorkerFailure:
    """The result of an item whose worker or sandboxed process died, hung or raised."""

    kind: str  # timeout | crash | error
    detail: str = ""
    seconds: float | None = None  # a step's timeout: seconds from the item's first bounded step to the kill


PR_SET_PDEATHSIG = 1


def _prctl(option: int, value: int) -> bool:
    """prctl(2) on this process; False where there is none (not Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        return False
    return True


def die_with_parent(parent: int | None = None, sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux; a no-op elsewhere);
    exit at once when `parent` is given and already gone."""
    if not _prctl(PR_SET_PDEATHSIG, int(sig)):
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)


ENV_KEY = "SFTBUILD_SANDBOX"
# variables a compile or a run may need (the thread counts a caller that fills the cores sets for torch and
# its math libraries included); everything else in the environment is dropped
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "PYTHONHASHSEED", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
             "CUDA_VISIBLE_DEVICES", "CUDA_MODULE_LOADING", "CUDA_LAUNCH_BLOCKING", "NVIDIA_VISIBLE_DEVICES",
             "NVIDIA_DRIVER_CAPABILITIES", "TORCH_CUDA_ARCH_LIST", "SFTBUILD_NVCC_PARALLEL", "SFTBUILD_CUDA_INCLUDE",
             "SFTBUILD_EXT_SLOTS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", ENV_KEY)
ENV_PREFIX_ALLOW = ("TRITON_",)
SYSTEM_RO = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
ETC_RO = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/passwd",
          "/etc/group", "/etc/nsswitch.conf", "/etc/localtime", "/etc/os-release", "/etc/lsb-release", "/etc/debian_version",
          "/etc/redhat-release")  # platform probes (pip's) fail on a refused read, where a missing file is fine


@dataclasses.dataclass
class Policy:
    """What the sandbox applies; the fields of the config's `sandbox` section."""

    isolation: str = "auto"
    network: bool = False
    cpu_seconds: int = 900
    memory_gb: float = 16.0
    file_mb: int = 4096
    min_free_mb: int = 1024
    processes: int = 4096
    output_kb: int = 256
    read_only: list = dataclasses.field(default_factory=list)
    allow_unconfined: bool = False


def configure(section) -> Policy:
    """Adopt a config section (or a Policy) for this process and the workers it starts."""
    pol = Policy(**{f.name: getattr(section, f.name) for f in dataclasses.fields(Policy) if hasattr(section, f.name)})
    os.environ[ENV_KEY] = json.dumps(dataclasses.asdict(pol))
    return pol


def policy() -> Policy:
    raw = os.environ.get(ENV_KEY)
    if not raw:
        return Policy()
    try:
        return Policy(**json.loads(raw))
    except (TypeError, ValueError):
        return Policy()


class SandboxUnavailable(Exception):
    """The isolation the config asks for by name cannot run on this machine."""


# ---- detection -----------------------------------------------------------------------------------

RW_ENV = "SFTBUILD_RW"  # in a sandboxed process: the folders it may write (sftbuild.trial.audit reads it)
WITHOUT_ENV = "SFTBUILD_SANDBOX_WITHOUT"  # layers to treat as missing (bwrap,landlock,mounts): tests of the fallbacks
PROBE = [sys.executable, "-I", "-S", "-c", "pass"]  # a command every confinement must still let run


@functools.lru_cache(maxsize=None)
def _probe(kind: str) -> str | None:
    """None when `kind` works here (bwrap, unshare, landlock, or `mounts`: a read-only mount view inside
    unshare's namespaces), else why not (one sentence)."""
    if kind in os.environ.get(WITHOUT_ENV, "").split(","):
        return f"{WITHOUT_ENV} leaves {kind} out"
    if kind == "bwrap":
        exe = shutil.which("bwrap")
        if not exe:
            return "bubblewrap (bwrap) is not installed"
        if _bwrap_proc() is None:
            return "bubblewrap cannot create namespaces here"
        return None
    spec = _confinement([], scratch=tempfile.gettempdir(), rw=(), ro=(), gpu=False, pol=Policy(), network=False,
                        cwd=None, mounts=kind == "mounts", landlock=kind == "landlock")
    if kind == "landlock":
        if confine.landlock_abi() < 1:
            return "the kernel has no Landlock"
        cmd = supervised(PROBE, spec)
    elif kind in ("unshare", "mounts"):
        exe = shutil.which("unshare")
        if not exe:
            return "unshare is not installed"
        cmd = _unshare(supervised(PROBE, spec if kind == "mounts" else None), net=False)
    else:
        return None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{kind} could not start: {e}"
    if p.returncode != 0:
        return f"{kind} cannot confine a process here: {(p.stderr or p.stdout).strip()[:200]}"
    return None


@functools.lru_cache(maxsize=None)
def _bwrap_proc() -> list[str] | None:
    """How a bubblewrap sandbox gets its /proc: a fresh one, or, inside another sandbox (where a
    nested pid namespace may not mount one), the enclosing one read-only; None when bwrap fails."""
    for proc in (["--proc", "/proc"], ["--ro-bind", "/proc", "/proc"]):
        cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", *proc, "--unshare-all", "--die-with-parent", "true"]
        try:
            if subprocess.run(cmd, capture_output=True, timeout=20).returncode == 0:
                return proc
        except (OSError, subprocess.TimeoutExpired):
            return None
    return None


ISOLATIONS = ("bwrap", "unshare", "landlock")  # auto's order; `none` is only ever asked for by name


def isolation(pol: Policy | None = None) -> str:
    """The isolation this process uses: bwrap, unshare (with the filesystem layers `filesystem()` names),
    landlock (alone) or none."""
    pol = pol or policy()
    if pol.isolation == "none":
        return "none"
    if pol.isolation in ISOLATIONS:
        why = _probe(pol.isolation)
        if why is None:
            return pol.isolation
        if not os.environ.get(RW_ENV):  # inside a sandbox, one that cannot nest leaves the outer one in force
            raise SandboxUnavailable(f"sandbox.isolation is {pol.isolation}, but {why}")
    if _probe("bwrap") is None:
        return "bwrap"
    if _probe("unshare") is None and (_probe("mounts") is None or _probe("landlock") is None):
        return "unshare"
    if _probe("landlock") is None:
        return "landlock"
    return "unshare" if _probe("unshare") is None else "none"


def filesystem(pol: Policy | None = None) -> list[str]:
    """The layers that confine untrusted code's files: [bwrap], some of [mounts, landlock], or none."""
    iso = isolation(pol)
    if iso == "bwrap":
        return ["bwrap"]
    if iso == "unshare":  # Landlock where the kernel has it; the mount view only without it (it breaks
        # some compiler runs: the extension build's g++ did not find its precompiled header under it)
        return next(([k] for k in ("landlock", "mounts") if _probe(k) is None), [])
    return ["landlock"] if iso == "landlock" else []


def refusal(pol: Policy | None = None) -> str | None:
    """Why untrusted code may not run here (no layer confines its files, and the config does not allow
    that), or None when it may."""
    pol = pol or policy()
    if os.environ.get(RW_ENV):  # inside a sandbox already (a GPU worker's compute-sanitizer run): it still holds
        return None
    try:
        if filesystem(pol) or pol.isolation == "none" or pol.allow_unconfined:
            return None
    except SandboxUnavailable as e:
        return str(e)
    why = "; ".join(filter(None, (_probe(k) for k in ("bwrap", "landlock", "mounts"))))
    return (f"no sandbox layer can keep untrusted code from this user's files here ({why}), so none runs: "
            "install bubblewrap, or set sandbox.allow_unconfined: true to run it anyway")


def layers(pol: Policy | None = None) -> dict:
    """Each layer, and whether it is in force (recorded in every run manifest)."""
    pol = pol or policy()
    try:
        iso = isolation(pol)
    except SandboxUnavailable as e:
        iso, why = "none", str(e)
    else:
        why = None
    fs = filesystem(pol) if why is None else []
    abi = confine.landlock_abi() if "landlock" in fs else 0
    net = "allowed" if pol.network else "blocked" if iso in ("bwrap", "unshare") else \
        "TCP blocked (Landlock), UDP open" if abi >= 4 else "open"
    names = {"bwrap": "bubblewrap", "mounts": "mount namespace", "landlock": f"Landlock ABI {abi}"}
    out = {"isolation": iso, "network": net,
           "filesystem": "read-only view (" + " + ".join(names[k] for k in fs) + ")" if fs else "host view",
           "rlimits": {"cpu_seconds": pol.cpu_seconds, "memory_gb": pol.memory_gb, "file_mb": pol.file_mb,
                       "min_free_mb": pol.min_free_mb,
                       "processes": pol.processes if os.geteuid() != 0 else "not enforced for root"},
           "env": "allowlist", "output_kb": pol.output_kb}
    if pol.isolation == "auto" and iso != "bwrap":
        why = "; ".join(filter(None, [_probe("bwrap"), iso in ("landlock", "none") and _probe("unshare"),
                                      not fs and _probe("landlock"), not fs and _probe("mounts")]))
    if why:
        out["why"] = why
    return out


def unavailable(pol: Policy | None = None) -> list[str]:
    """One plain sentence for each layer not in force, and for the fallback in force; empty when
    bubblewrap runs."""
    pol = pol or policy()
    lay = layers(pol)
    iso, fs = lay["isolation"], lay["filesystem"]
    out = []
    if iso == "none" and pol.isolation == "none":
        out.append("sandbox: OS isolation is off (sandbox.isolation: none); untrusted code can read and write this "
                   "user's files and reach the network, under rlimits and a scrubbed environment only")
    elif fs == "host view" and pol.allow_unconfined:  # else refusal() says why nothing runs
        out.append(f"sandbox: no layer confines files ({lay.get('why', 'unavailable')}); untrusted code can read and "
                   "write this user's files" + (" and reach the network" if lay["network"] == "open" else "")
                   + ", as sandbox.allow_unconfined allows")
    elif iso == "unshare" and fs != "host view":
        why = f"bubblewrap is unavailable ({lay['why']})" if lay.get("why") else "sandbox.isolation is unshare"
        out.append(f"sandbox: {why}; unshare isolates the network and "
                   f"processes, and a {fs} lets untrusted code read only the system, Python and the toolchain, "
                   "and write only its own scratch and cache folders")
    elif iso == "landlock":
        why = f"no namespaces ({lay['why']})" if lay.get("why") else "sandbox.isolation is landlock"
        out.append(f"sandbox: {why}; a {fs} lets untrusted code read only the "
                   "system, Python and the toolchain, and write only its own scratch and cache folders, but it "
                   f"shares the host's processes, and the network is {lay['network']}")
    if os.geteuid() == 0:
        out.append("sandbox: running as root, the process-count limit is not enforced (the kernel exempts root)")
    return out


# ---- the command line ----------------------------------------------------------------------------

def _python_paths() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths |= {p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    paths.add(str(Path(__file__).resolve().parent))  # this package, not the folder around it (a workspace?)
    return sorted(p for p in paths if os.path.exists(p))


def _toolchain_paths() -> list[str]:
    out = []
    for name in ("nvcc", "gcc", "g++"):
        exe = shutil.which(name)
        if exe:
            out.append(str(Path(os.path.realpath(exe)).parents[1]))
    cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda:
        out.append(os.path.realpath(cuda))
    return out


# what a command that may use the network reads: name resolution, certificates, pip's own config
NET_ETC = ("/etc/resolv.conf", "/etc/hosts", "/etc/mime.types", "/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/pip.conf",
           "/etc/xdg/pip")
NET_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "SSL_CERT_FILE",
           "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")


def wrap(cmd: list[str], *, cwd: str | None, scratch: str, rw=(), ro=(), gpu: bool = False,
         pol: Policy | None = None, network: bool | None = None) -> list[str]:
    """`cmd` under this process's isolation; `network`: this command's own need (a download),
    else the policy's."""
    pol = pol or policy()
    iso = isolation(pol)
    net_ok = pol.network if network is None else network
    why = refusal(pol)
    if why:
        raise SandboxUnavailable(why)
    if iso in ("unshare", "landlock", "none"):
        spec = _confinement(filesystem(pol), scratch=scratch, rw=rw, ro=ro, gpu=gpu, pol=pol, network=net_ok,
                            cwd=cwd)
        return _unshare(supervised(cmd, spec), net=not net_ok) if iso == "unshare" else supervised(cmd, spec)
    # no --new-session: Proc already starts bwrap in a session of its own, without a terminal, and the
    # sandboxed processes must stay in bwrap's process group for a timeout's group kill to reach them
    args = ["bwrap", "--die-with-parent", "--unshare-all"]
    if net_ok:
        args.append("--share-net")
        ro = [*ro, *(p for p in NET_ETC if os.path.exists(p))]
    for p in SYSTEM_RO:
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.exists(p):
            args += ["--ro-bind", p, p]
    args += ["--dev", "/dev", "--tmpfs", "/dev/shm", *(_bwrap_proc() or ["--proc", "/proc"]), "--tmpfs", "/tmp"]
    for p in ETC_RO:
        if os.path.exists(p):
            args += ["--ro-bind", p, p]
    seen = set()
    for p in _readable(pol, ro):
        p = os.path.abspath(p)
        if p not in seen and os.path.exists(p):
            seen.add(p)
            args += ["--ro-bind", p, p]
    if gpu:
        for dev in sorted(glob.glob("/dev/nvidia*")):
            args += ["--dev-bind", dev, dev]
        for p in ("/sys", "/proc/driver/nvidia", "/run/nvidia-persistenced"):
            if os.path.exists(p):
                args += ["--ro-bind", p, p]
    for p in [scratch, *rw]:
        p = os.path.abspath(p)
        Path(p).mkdir(parents=True, exist_ok=True)
        args += ["--bind", p, p]
    if cwd:
        args += ["--chdir", os.path.abspath(cwd)]
    return [*args, "--", *cmd]


def _unshare(cmd: list[str], net: bool) -> list[str]:
    """`cmd` in new user, pid, mount (and, with `net`, network) namespaces; the supervisor is the
    namespace's init, so a task is never pid 1."""
    return ["unshare", "--user", "--map-root-user", *(["--net"] if net else []), "--pid", "--fork", "--kill-child",
            "--mount-proc", "--", *cmd]


def supervised(cmd: list[str], spec: dict | None = None) -> list[str]:
    """`cmd` under sftbuild.confine, which applies `spec`'s layers, leads the command's process group and,
    when the process that started it dies (a SIGTERM from PR_SET_PDEATHSIG), kills the whole group."""
    return [sys.executable, "-I", "-S", confine.__file__, json.dumps(spec) if spec else "", *cmd]


KEEP_TOP = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt", "proc", "sys", "dev")
DEV_RW = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def _confinement(layers: list[str], *, scratch: str, rw, ro, gpu: bool, pol: Policy, network: bool,
                 cwd: str | None, mounts: bool | None = None, landlock: bool | None = None) -> dict | None:
    """What sftbuild.confine applies to one command: the folders it may read (`ro`) and write (`rw`),
    the devices it may write (`dev`, Landlock's), and the top-level folders the mount view hides
    (every one but the system's: home folders, /tmp, /etc, /var, /run, the workspace's)."""
    mounts = "mounts" in layers if mounts is None else mounts
    landlock = "landlock" in layers if landlock is None else landlock
    if not (mounts or landlock):
        return None
    etc = [*ETC_RO, *(NET_ETC if network else ())]
    libs = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if os.path.isabs(p)]
    read = [*SYSTEM_RO, *etc, *libs, *_readable(pol, ro)]
    dev = list(DEV_RW)
    if gpu:
        read += ["/proc/driver/nvidia", "/run/nvidia-persistenced"]
        dev += sorted(glob.glob("/dev/nvidia*"))
    if landlock:
        read += ["/proc", "/sys"]
    write = [os.path.abspath(p) for p in [scratch, *rw]]
    for p in write:
        Path(p).mkdir(parents=True, exist_ok=True)
    hide = []
    if mounts:
        hide = [f"/{e}" for e in sorted(os.listdir("/")) if e not in KEEP_TOP] + ["/dev/shm"]
        dev.append("/dev/shm")  # the mount view's own tmpfs: private
    return {"mounts": mounts, "landlock": landlock, "network": network, "hide": hide,
            "ro": _outermost(os.path.realpath(p) for p in read if os.path.exists(p)) + [
                os.path.abspath(p) for p in etc if os.path.exists(p)],
            "rw": write, "dev": [d for d in dev if os.path.exists(d)],
            "cwd": os.path.abspath(cwd) if cwd else os.path.abspath(scratch)}


def _readable(pol: Policy, ro) -> list[str]:
    """The folders every layer shows read-only beside the system's: Python's, the toolchain's, sftbuild's
    cache, the config's `sandbox.read_only` and the call's own."""
    return [*_python_paths(), *_toolchain_paths(), host_cache(), *pol.read_only, *ro]


def host_cache(base=None) -> str:
    """sftbuild's own cache (the op catalogue): readable in the sandbox, so no run scans op_db again."""
    base = os.environ if base is None else base
    return base.get("SFTBUILD_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "sftbuild")


def triton_cache() -> str:
    """Triton's compiled kernels, shared by the GPU workers of a run and Inductor's codegen at harvest
    (which compiles the very kernels validation runs): each kernel is compiled once per machine, not once
    per worker. Sandboxes that bind it get it writable (see docs/threat-model.md)."""
    d = os.path.join(host_cache(), "triton")
    os.makedirs(d, exist_ok=True)
    return d


def inductor_cache() -> str:
    """Inductor's compiled code (its graph and C++ kernel caches), shared as Triton's kernels are: the
    harvest's codegen builds a program's kernels, and the processes that run its output code later (GPU
    workers) find them built rather than compiling each again in a fresh scratch folder. Sandboxes that
    bind it get it writable (see docs/threat-model.md)."""
    d = os.path.join(host_cache(), "inductor")
    os.makedirs(d, exist_ok=True)
    return d


SECRET_FILES = ("/etc/shadow", "/etc/gshadow", "~/.ssh", "~/.netrc", "~/.pgpass", "~/.git-credentials", "~/.pypirc",
                "~/.aws", "~/.docker/config.json", "~/.kube/config", "~/.config/gcloud", "~/.gnupg",
                "~/.config/gh/hosts.yml", "~/.cache/huggingface/token", "~/.huggingface/token")
SECRET_MIN = 10  # shorter text is too common to withhold


@functools.lru_cache(maxsize=4)
def _secret_pattern(home: str):
    found = set()
    for entry in SECRET_FILES:
        top = Path(entry.replace("~", home, 1))
        try:
            files = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file()][:200] if top.is_dir() else []
        except OSError:
            continue
        for f in files:
            try:
                if f.stat().st_size <= 1 << 16:
                    found |= {ln.strip() for ln in f.read_text(errors="replace").splitlines()}
            except OSError:
                continue
    found |= {v.strip() for k, v in os.environ.items() if k not in ENV_ALLOW and not k.startswith(ENV_PREFIX_ALLOW)
              and not v.startswith(("/", "~"))}  # paths are no secret, and logs name them
    found = sorted((x for x in found if len(x) >= SECRET_MIN), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, found))) if found else None


def without_secrets(obj):
    """`obj` (text, or plain data holding text) without the lines that hold text of this user's
    well-known secret files (/etc/shadow, ~/.ssh, ~/.netrc, cloud credentials) or the value of an
    environment variable the sandbox withholds: what untrusted code read and raised or printed."""
    if isinstance(obj, dict):
        return {k: without_secrets(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(without_secrets(v) for v in obj)
    pat = _secret_pattern(os.path.expanduser("~"))
    if not isinstance(obj, str) or pat is None or not pat.search(obj):
        return obj
    return "\n".join("[a line withheld: it holds text of a host secret]" if pat.search(ln) else ln
                     for ln in obj.splitlines())


@functools.lru_cache(maxsize=1)
def _installed() -> bool:
    """Whether this package is installed (an editable install too): its processes import it without its
    checkout's root on PYTHONPATH, a folder Landlock refuses (pip then fails listing the path)."""
    try:
        importlib.metadata.distribution("sftbuild")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def scrubbed_env(scratch: str, extra: dict | None = None, base: dict | None = None) -> dict:
    """The allowlisted variables of `base` (default: this process's), HOME and TMPDIR at `scratch`."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if k in ENV_ALLOW or k.startswith(ENV_PREFIX_ALLOW)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    root = str(Path(__file__).resolve().parents[1])
    if not _installed() and root not in env.get("PYTHONPATH", "").split(os.pathsep):
        # a checkout run in place: its root, which no layer shows (only the package folder), on the path
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    env.update(HOME=scratch, TMPDIR=scratch, LANG=env.get("LANG", "C.UTF-8"), SFTBUILD_CACHE=host_cache(base))
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def _preexec(pol: Policy, gpu: bool, memory_gb: float | None, cpu_limit: bool = True):
    parent = os.getpid()

    supervised_here = isolation(pol) in ("landlock", "none")  # no pid namespace ends the command's group

    def limits():
        # a supervisor is told by SIGTERM, so that it can end its group; bwrap and unshare by SIGKILL
        die_with_parent(parent, signal.SIGTERM if supervised_here else signal.SIGKILL)
        if cpu_limit:
            cpu = max(1, int(pol.cpu_seconds))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        mem = pol.memory_gb if memory_gb is None else memory_gb
        if not gpu and mem:
            resource.setrlimit(resource.RLIMIT_AS, (int(mem * (1 << 30)),) * 2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(pol.file_mb) << 20,) * 2)
        if not gpu:  # the count is this user's threads, everywhere: a GPU run's thread pools would hit it
            resource.setrlimit(resource.RLIMIT_NPROC, (int(pol.processes),) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return limits


# ---- running -------------------------------------------------------------------------------------

class _Tail(threading.Thread):
    """Drains a pipe, keeping its last `cap` bytes (a flood costs CPU, never memory)."""

    def __init__(self, stream, cap: int):
        super().__init__(daemon=True)
        self.stream, self.cap, self.buf, self.dropped = stream, cap, bytearray(), 0
        self.total = 0  # bytes read so far, kept or not
        self.start()

    def run(self):
        for chunk in iter(lambda: self.stream.read1(65536), b""):
            self.buf += chunk
            self.total += len(chunk)
            if len(self.buf) > 2 * self.cap:
                self.dropped += len(self.buf) - self.cap
                del self.buf[:-self.cap]

    def text(self) -> str:
        self.join(timeout=5)
        if len(self.buf) > self.cap:
            self.dropped += len(self.buf) - self.cap
            del self.buf[:-self.cap]
        head = f"[{self.dropped} earlier bytes of output dropped]\n" if self.dropped else ""
        return head + self.buf.decode("utf-8", "replace")

    def since(self, mark: int, wait: float = 5.0) -> str:
        """What was read after `total` was `mark` (as much of it as is still kept), once the stream
        has ended or `wait` seconds have passed."""
        self.join(timeout=wait)
        new = min(self.total - mark, len(self.buf))
        return bytes(self.buf[-new:]).decode("utf-8", "replace") if new > 0 else ""


class Proc:
    """One sandboxed command in the background; `kill()` ends its whole process group."""

    def __init__(self, cmd: list[str], *, cwd=None, env: dict | None = None, rw=(), ro=(), gpu: bool = False,
                 memory_gb: float | None = None, scratch: str | None = None, merge: bool = True,
                 pass_fds=(), cpu_limit: bool = True, network: bool | None = None):
        pol = policy()
        self._own_scratch = scratch is None
        self.scratch = scratch or tempfile.mkdtemp(prefix="sftbuild_sbx_")
        # HOME and TMPDIR point here under every isolation (bwrap binds it; unshare and none see it as is)
        Path(self.scratch).mkdir(parents=True, exist_ok=True)
        full = wrap(list(cmd), cwd=cwd, scratch=self.scratch, rw=rw, ro=ro, gpu=gpu, pol=pol, network=network)
        if network:
            env = {**{k: v for k, v in os.environ.items() if k in NET_ENV}, **(env or {})}
        # what the sandbox made writable, for the audit hook of the process that runs a candidate
        env = {**(env or {}), RW_ENV: os.pathsep.join(os.path.abspath(p) for p in [self.scratch, *rw])}
        self.proc = subprocess.Popen(full, cwd=cwd, env=scrubbed_env(self.scratch, env), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                                     preexec_fn=_preexec(pol, gpu, memory_gb, cpu_limit), start_new_session=True,
                                     pass_fds=tuple(pass_fds))
        cap = max(1, pol.output_kb) << 10
        self._out = _Tail(self.proc.stdout, cap)
        self._err = None if merge else _Tail(self.proc.stderr, cap)
        self.timed_out = False
        self.disk_low = False  # ended because a disk it may write fell below sandbox.min_free_mb
        if pol.min_free_mb:
            threading.Thread(target=self._guard_disk, args=([self.scratch, *rw], pol.min_free_mb), daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None:
            self._end_group()
        return code

    def wait(self, timeout: float) -> int:
        """The exit code; -9 (and `timed_out`) when it ran past `timeout` seconds."""
        try:
            _wait_exit(self.proc.pid, max(0.05, timeout))
            code = self.proc.wait(timeout=max(0.05, timeout))
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.kill()
            return -9
        self._end_group()
        return code

    def kill(self) -> None:
        self._end_group()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _guard_disk(self, folders, floor_mb: int) -> None:
        """Ends the group once a disk it may write has less than `floor_mb` free: file_mb bounds one
        file, not how many files are written."""
        disks = {}
        for f in folders:
            with contextlib.suppress(OSError):
                disks.setdefault(os.stat(f).st_dev, f)
        while self.proc.poll() is None:
            if any(free_mb(f) < floor_mb for f in disks.values()):
                self.disk_low = True
                self._end_group()
                return
            time.sleep(0.1)

    def ended_why(self, code: int | None) -> str:
        """How the command ended: `exit_reason`, or the disk it filled."""
        if self.disk_low:
            return f"ended: a disk it may write fell below {policy().min_free_mb} MB free (sandbox.min_free_mb)"
        return exit_reason(code)

    def _end_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers: a leader that exited leaves the group alive
        except (ProcessLookupError, PermissionError):
            return
        _wait_group_dead(self.proc.pid)

    def output(self) -> str:
        return self._out.text()

    def output_mark(self) -> int:
        """A mark for `output_since`: how many bytes of output were read so far."""
        return self._out.total

    def output_since(self, mark: int, wait: float | None = None) -> str:
        """The output written after `mark` (`output_mark`), as far as the kept tail reaches: by default
        all of it once the process has ended (up to 5 s for the pipe to drain), and from a process still
        running (a renewing worker's first process, after a fork ended) what a moment's reading brings."""
        return self._out.since(mark, wait=wait if wait is not None else 5.0 if self.poll() is not None else 0.2)

    def error(self) -> str:
        return self._err.text() if self._err else ""

    def close(self) -> None:
        self.kill()
        if self._own_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


def free_mb(path: str) -> float:
    """MB free for this user on the disk holding `path` (infinite where it cannot be read)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return float("inf")
    return st.f_bavail * st.f_frsize / (1 << 20)


def _wait_group_dead(pgid: int, timeout: float = 3.0) -> None:
    """Until no live process is left in group `pgid` (SIGKILL is sent at once, but acted on when each
    process next runs): a compile that timed out has left nothing behind when this returns."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        alive = False
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != b"Z":
                alive = True
                break
        if not alive:
            return
        time.sleep(0.01)


def _wait_exit(pid: int, timeout: float) -> None:
    """Block until `pid` exits or `timeout` passes, without polling where the kernel has pidfds."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)


@dataclasses.dataclass
class Result:
    code: int  # -9 when it timed out
    output: str
    timed_out: bool


def run(cmd: list[str], timeout: float, **kw) -> Result:
    """Run one command in the sandbox to its end or its timeout (then its whole group is killed)."""
    p = Proc(cmd, **kw)
    try:
        code = p.wait(timeout)
        return Result(code, p.output(), p.timed_out)
    finally:
        p.close()


# ---- a task function in a fresh Python process ---------------------------------------------------

PATH_KEYS_RO = ("tree", "sos")
PATH_KEYS_RW = ("ext_cache", "cache_dir")


def task_paths(tasks) -> tuple[list, list]:
    """(read-only, writable) folders that tasks (dicts, or dataclasses such as a TrialTask) name: `tree`
    and `sos` (the folders of the compiled objects), `ext_cache` and `cache_dir`."""
    ro, rw = [], []
    def fields(t):
        return {f.name: getattr(t, f.name) for f in dataclasses.fields(t)} \
            if dataclasses.is_dataclass(t) and not isinstance(t, type) else t

    tasks = [fields(t) for t in tasks]
    tasks += [fields(t["task"]) for t in tasks if isinstance(t, dict) and "task" in t]  # wrapped (bind's probes)
    for task in tasks:
        if not isinstance(task, dict):
            continue
        for k in PATH_KEYS_RO:
            v = task.get(k)
            for x in [v] if isinstance(v, str) else [x for x in v or [] if isinstance(x, str)]:
                # an object's build folder sits in the compile cache, one folder per key: bind the cache once
                ro.append(x if k == "tree" else os.path.dirname(os.path.dirname(x)))
        rw += [task[k] for k in PATH_KEYS_RW if isinstance(task.get(k), str)]
    return _outermost(p for p in ro if p and os.path.exists(p)), _outermost(rw)


def binds(have_ro, have_rw, ro, rw) -> bool:
    """Whether a sandbox binding `have_ro` read-only and `have_rw` writable reaches every folder in `ro`
    (either way) and `rw` (writable)."""
    def under(p, roots):
        return any(within(p, q) for q in roots)
    return all(under(p, [*have_ro, *have_rw]) for p in ro) and all(under(p, have_rw) for p in rw)


def within(path: str, root: str) -> bool:
    """Whether `path` is `root` or lies under it (both absolute and normalised; no file system access)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _outermost(paths) -> list[str]:
    """The paths without those inside another of them: one bind each, however many tasks."""
    out: list[str] = []
    for p in sorted({os.path.abspath(p) for p in paths}):
        if not any(within(p, q) for q in out):
            out.append(p)
    return out


def _task_paths(task) -> tuple[list, list]:
    return task_paths([task])


def run_isolated(func: str, task, timeout: float, prefix=(), env: dict | None = None, gpu: bool = False,
                 ro=(), rw=()):
    """Call `module:function`(task) in a new sandboxed process; its result, or a WorkerFailure.

    The task's own folders are reachable: `tree` and `sos` read-only, `ext_cache` and `cache_dir`
    writable."""
    with tempfile.TemporaryDirectory(prefix="sftbuild_sbx_") as d:
        io_dir = os.path.join(d, "io")
        os.mkdir(io_dir)
        src, dst = os.path.join(io_dir, "in.pkl"), os.path.join(io_dir, "out.pkl")
        with open(src, "wb") as f:
            pickle.dump((func, task), f)
        t_ro, t_rw = _task_paths(task)
        gpu = gpu or bool(prefix)
        try:
            p = Proc([*prefix, sys.executable, "-m", "sftbuild.sandbox", src, dst], cwd=io_dir, env=env,
                     ro=[*t_ro, *ro], rw=[io_dir, *t_rw, *rw], gpu=gpu, scratch=os.path.join(d, "scratch"),
                     merge=True)
        except SandboxUnavailable as e:
            return WorkerFailure("error", str(e))
        try:
            code = p.wait(timeout)
            log = p.output()
        finally:
            p.kill()
        if p.timed_out:
            return WorkerFailure("timeout", f"no result within {timeout:.0f} s")
        if not os.path.exists(dst):
            return WorkerFailure("crash", f"{p.ended_why(code)}: {log[-2000:]}")
        try:
            result = load_result(dst)
        except Exception as e:  # a truncated or forged result file
            return WorkerFailure("crash", f"unreadable result ({type(e).__name__}) after {exit_reason(code)}")
        if isinstance(result, dict):
            result.setdefault("_exit", code)
            result.setdefault("_log", log if len(log) <= 6000 else
                              f"[{len(log) - 6000} more bytes of output dropped]\n" + log[-6000:])
        return result


def run_forked(func: str, task, timeout: float, env: dict | None = None):
    """As run_isolated (the same result, or a WorkerFailure), in a fork of a kept sandboxed process of
    this one's (a `Forks`) that has imported `func`'s module and run its `prefork(task)` where it has
    one: each call still runs in a process that no other call touched, without paying the imports
    again (the Triton compile gate: 0.1 s a kernel rather than 1 s)."""
    key = (func, tuple(sorted((env or {}).items())))
    t_ro, t_rw = _task_paths(task)
    with _FORKS_LOCK:
        idle = _FORKS.setdefault(key, [])
        for gone in [f for f in idle if not f.alive()]:  # ended while idle (with the thread that started it)
            idle.remove(gone)
            gone.close()
        forks = next((f for f in idle if f.reaches(t_ro, t_rw)), None)
        if forks is not None:
            idle.remove(forks)
    if forks is None:
        try:
            forks = Forks(func, env, t_ro, t_rw)
        except SandboxUnavailable as e:
            return WorkerFailure("error", str(e))
    result = forks.call(task, timeout)
    with _FORKS_LOCK:
        if forks.alive():
            _FORKS[key].append(forks)
        while len(_FORKS[key]) > FORKS_KEPT:  # folders of an earlier run: the oldest goes
            _FORKS[key].pop(0).close()
    return result


FORKS_KEPT = 4  # idle Forks kept per function in a process: one per thread that calls at once
_FORKS: dict[tuple, list] = {}
_FORKS_LOCK = threading.Lock()


def _forget_forks() -> None:  # a forked copy of this process must not talk to this one's Forks
    _FORKS.clear()


os.register_at_fork(after_in_child=_forget_forks)


@atexit.register
def _close_forks() -> None:
    with _FORKS_LOCK:
        for kept in _FORKS.values():
            for forks in kept:
                forks.close()
        _FORKS.clear()


class Forks:
    """A kept sandboxed process (start_worker, renewing) whose every call runs in a fresh fork of it:
    `call(task, timeout)` returns what run_isolated would, and ends the fork."""

    def __init__(self, func: str, env: dict | None, ro, rw):
        self.func, self.ro, self.rw = func, list(ro), list(rw)
        self.conn, self.proc = start_worker(dict(env or {}), ro=ro, rw=rw, gpu=False, renew=True)

    def reaches(self, ro, rw) -> bool:
        return binds(self.ro, self.rw, ro, rw)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def call(self, task, timeout: float):
        from multiprocessing.connection import wait

        mark = self.proc.output_mark()
        try:
            self.conn.send((_one_call, (self.func, task)))
            if not wait([self.conn], timeout):
                self.close()
                return WorkerFailure("timeout", f"no result within {timeout:.0f} s")
            status, payload = self.conn.recv()
        except Exception as e:  # closed, or not plain data: this process is done with
            self.close()
            return WorkerFailure("crash", f"the sandboxed process failed ({type(e).__name__})")
        log = self.proc.output_since(mark, wait=0.0 if status == "ok" else None)
        if status == "ended":  # the fork died before it answered
            return WorkerFailure("crash", f"{exit_reason(payload)}: {log[-2000:]}")
        if status != "ok":
            self.close()
            return WorkerFailure("error", str(payload)[-2000:])
        try:  # the fork that answered ends itself, and the first process says so
            ended = wait([self.conn], 30) and self.conn.recv() == ("ended", RENEW_EXIT)
        except Exception:
            ended = False
        if not ended:
            self.close()
        if isinstance(payload, dict):
            payload.setdefault("_exit", 0)
            payload.setdefault("_log", log[-6000:])
        return payload

    def close(self) -> None:
        if self.proc is not None:
            self.proc.close()
            self.proc = None
        try:
            self.conn.close()
        except OSError:
            pass


def _named(func: str):
    """The function `module:function` names."""
    mod, _, name = func.partition(":")
    return getattr(importlib.import_module(mod), name)


def _call_named(func: str, task):
    """`module:function`(task), with what escapes it (SystemExit and KeyboardInterrupt from the task's
    code too) a dropped result: how run_isolated's process and a Forks' fork call a task."""
    try:
        return _named(func)(task)
    except BaseException as e:
        return {"status": "dropped", "reason": "error", "detail": repr(e)[:2000]}


def _one_call(item):
    """A Forks' task: `module:function`(task), as run_isolated's process calls it."""
    return _call_named(*item)


def _prefork_call(item) -> None:
    func, task = item
    prefork = getattr(_named(func), "prefork", None)
    if prefork is not None:
        prefork(task)


_one_call.prefork = _prefork_call
_one_call.fresh = True  # every call in a fork of its own


# ---- a long-lived worker (GPU) -------------------------------------------------------------------

class PlainConnection:
    """The parent's end of a sandboxed worker's socket: sends tasks as pickles, reads results as plain
    data only (a worker running hostile code may write anything to it)."""

    def __init__(self, conn: Connection):
        self._conn = conn

    def send(self, obj) -> None:
        self._conn.send(obj)

    def recv(self):
        return _PlainUnpickler(io.BytesIO(self._conn.recv_bytes(256 << 20))).load()

    def fileno(self) -> int:
        return self._conn.fileno()

    def close(self) -> None:
        self._conn.close()


def start_worker(env: dict, ro=(), rw=(), gpu: bool = True,
                 renew: bool = False) -> tuple[PlainConnection, Proc]:
    """A sandboxed `python -m sftbuild.sandbox --worker FD` serving (function, item) pairs over a
    socket; its CPU time is not limited (it lives for many items: the caller times each one).

    `renew`: the worker's first process never runs an item. It forks the process that serves them,
    and when that one ends (it asked to be replaced, or died) forks a fresh one from its own state,
    which no candidate touched, and says so: ("ended", exit code) after each. A replacement costs a
    fork rather than a new sandbox's imports (seconds of torch, Triton and Dynamo)."""
    mine, theirs = socket.socketpair()
    try:
        proc = Proc([sys.executable, "-m", "sftbuild.sandbox", "--worker", str(theirs.fileno()),
                     *(["--renew"] if renew else [])], env=env,
                    ro=ro, rw=rw, gpu=gpu, pass_fds=[theirs.fileno()], cpu_limit=False, merge=True)
    finally:
        theirs.close()
    return PlainConnection(Connection(mine.detach())), proc


_WORKER_CONN = None  # in a worker process: its socket to the parent


def worker_connection():
    """In a long-lived worker: its connection to the parent (for messages between results, such as
    executor.report_deadline's); None elsewhere."""
    return _WORKER_CONN


class _LockedConnection:
    """A worker's socket to its parent, whole messages only: a task's messages between results
    (executor.report_deadline) may come from any thread (a compile Triton or Inductor runs in a thread
    of its own reports a lifted bound), and two writes interleaved would make the parent's read fail."""

    def __init__(self, conn: Connection):
        self._conn, self._lock = conn, threading.Lock()

    def send(self, obj) -> None:
        data = pickle.dumps(obj)
        with self._lock:
            self._conn.send_bytes(data)

    def recv(self):
        return self._conn.recv()


def _worker_main(fd: int, renew: bool = False) -> None:
    conn = _LockedConnection(Connection(fd))
    # run as `python -m sftbuild.sandbox`, this module is __main__: the tasks see the imported one
    importlib.import_module("sftbuild.sandbox")._WORKER_CONN = conn
    first = _renewing(conn) if renew else None  # returns in each serving process, never in the first
    while True:
        try:
            fn, item = first or conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            os._exit(0)
        first = None
        try:
            result = plain(fn(item))
            conn.send(("ok", result))
        except Exception:
            result = None
            conn.send(("error", traceback.format_exc(limit=8)))
        if renew and (result is None or asks_renewal(result) or getattr(fn, "fresh", False)):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(RENEW_EXIT)  # the first process forks a fresh one


RENEW_EXIT = 75  # a serving process that ends itself after a result that asked for a fresh process
PR_SET_DUMPABLE = 4


def asks_renewal(result) -> bool:
    """A result that asks for a fresh worker process: the candidate changed its process, or a sticky
    CUDA fault poisoned its context."""
    return bool(getattr(result, "recycle", False) or (isinstance(result, dict) and result.get("recycle")))


def _renewing(conn) -> tuple:
    """The first process of a renewing worker (start_worker's `renew`). It reads the first item, which
    imports the task function's module (the validator's own code), runs the function's `prefork(item)`
    where it has one (imports and torch's first-use patches, once for every process it forks), then
    forks the serving processes one after another, each after the last has ended. It runs no item, and
    no process it forks can trace it or read its memory (not dumpable), so each starts as it was."""
    try:
        fn, item = conn.recv()
    except (EOFError, OSError, KeyboardInterrupt):
        os._exit(0)
    prefork = getattr(fn, "prefork", None)
    if prefork is not None:
        prefork(item)
    _prctl(PR_SET_DUMPABLE, 0)
    me, first = os.getpid(), (fn, item)
    while True:
        if first is None:  # what the last process left in the scratch folder (HOME, TMPDIR) goes with it
            _empty(os.environ.get("TMPDIR"))
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            die_with_parent(me)
            return first
        first = None
        _, status = os.waitpid(pid, 0)
        try:
            conn.send(("ended", os.waitstatus_to_exitcode(status)))
        except OSError:
            os._exit(0)


def _empty(folder: str | None) -> None:
    """Remove what `folder` holds, links as links (never what they point to)."""
    if not folder or not os.path.isdir(folder):
        return
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass


class _PlainUnpickler(pickle.Unpickler):
    """Results are plain data: a pickle naming any class or function is refused, so code that
    forges the result file cannot run anything in the process reading it."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"a result may not name {module}.{name}")


def load_result(path: str, limit: int = 256 << 20):
    if os.path.getsize(path) > limit:
        raise ValueError("result too large")
    with open(path, "rb") as f:
        return _PlainUnpickler(f).load()


def plain(obj, depth: int = 0):
    """`obj` as plain data (dicts, lists, tuples, str, numbers, bytes, None); other objects become
    their numeric value when they have one, else their repr."""
    if depth > 64:
        return repr(obj)[:200]
    if obj is None or type(obj) in (bool, int, float, str, bytes):
        return obj
    if isinstance(obj, (bool, int, float, str, bytes)):  # subclasses (enums, numpy floats)
        return _scalar(obj)
    if isinstance(obj, dict):
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = [plain(v, depth + 1) for v in obj]
        return tuple(items) if isinstance(obj, tuple) else items
    if isinstance(obj, WorkerFailure):
        return {"status": "dropped", "reason": "error", "detail": f"{obj.kind}: {obj.detail}"}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return plain(dataclasses.asdict(obj), depth + 1)
    if hasattr(obj, "item") and callable(obj.item):  # numpy and torch scalars
        try:
            return plain(obj.item(), depth + 1)
        except Exception:
            pass
    return repr(obj)[:2000]


def _scalar(obj):
    for t in (bool, int, float, str, bytes):
        if isinstance(obj, t):
            return t(obj)
    return repr(obj)


def last_lines(text: str, lines: int = 3, chars: int = 400) -> str:
    """The last non-blank `lines` of a process's output, joined by ' | ', at most `chars` long: what
    a crash verdict quotes (a check macro's file:line and error, an assertion, a CUDA error)."""
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    out = " | ".join(kept)
    return out if len(out) <= chars else "..." + out[-chars:]


def exit_reason(code: int) -> str:
    """`exit code 3`, or the signal's name for a process a signal ended."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code is not None and code > 128 and code - 128 in signal.Signals._value2member_map_:
        return f"killed by {signal.Signals(code - 128).name}"  # a shell or namespace init reports 128 + signal
    return f"exit code {code}"


def _main(src: str, dst: str) -> None:
    with open(src, "rb") as f:
        func, task = pickle.load(f)
    os.unlink(src)
    result = _call_named(func, task)
    try:
        with open(dst + ".tmp", "wb") as f:
            pickle.dump(plain(result), f)
        os.replace(dst + ".tmp", dst)
    except Exception as e:
        with open(dst + ".tmp", "wb") as f:
            pickle.dump({"status": "dropped", "reason": "error", "detail": f"unpicklable result: {e!r}"[:2000]}, f)
        os.replace(dst + ".tmp", dst)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: a hostile atexit hook cannot change the result


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        _worker_main(int(sys.argv[2]), renew="--renew" in sys.argv[3:])
    else:
        _main(sys.argv[1], sys.argv[2])
