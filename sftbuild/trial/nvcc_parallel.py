"""nvcc with its host and device front ends side by side.

For one `.cu`, nvcc runs its steps one after another: the host chain (preprocess, cudafe++)
and the device chain (preprocess, cicc, ptxas, fatbinary), then the host compile that embeds
the fatbinary. Against torch's headers each front end parses the whole translation unit, about
2 s apiece, yet the two chains share only the module id, a name nvcc derives from the file.
Here nvcc plans the steps (`--dryrun`), the module id is written first, both chains run at
once, then the rest in order: about a third less wall time for a torch-header source, the same
tools, flags and output.

Anything the plan does not look like (several archs, -rdc, a changed nvcc) runs as plain nvcc.

Every step runs in the sandbox (sftbuild.sandbox): `cwd` is its only writable folder besides its
scratch, the folders named by -I/-L options are readable, and a timeout kills each step's whole
process group (nvcc, cc1plus, cicc, ptxas and anything they started).
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from sftbuild import sandbox

ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
MODULE_ID = re.compile(r'--module_id_file_name\s+"?([^"\s]+)"?')


def run(cmd: list[str], cwd, timeout: float, env: dict | None = None, memory_gb: float | None = None,
        scratch: str | None = None) -> tuple[int, str]:
    """Run an nvcc command line; returns (exit code, output). -9 means the timeout was hit.
    `env`: variables on top of the sandbox's allowlist; `scratch`: its HOME and TMPDIR."""
    env = dict(env or {})
    deadline = time.monotonic() + timeout
    limits = {"memory_gb": memory_gb, "scratch": scratch}
    if os.environ.get("SFTBUILD_NVCC_PARALLEL", "1") != "0" and ("-c" in cmd or "-shared" in cmd):
        with tempfile.TemporaryDirectory(prefix="nvcc-", dir=cwd) as keep:
            plan = _plan(cmd, cwd, env, keep)
            if plan is not None:
                return _run_plan(plan, cwd, deadline, limits)
    return run_command(list(cmd), cwd, timeout, env, **limits)


def _plan(cmd, cwd, env, keep):
    """(env, host chain, device chain, rest) from nvcc's own plan, or None when it is not the
    single-arch, whole-program shape this knows."""
    try:  # --dryrun runs nothing: it prints the steps
        p = subprocess.run([cmd[0], "--dryrun", "--keep", "--keep-dir", keep, *cmd[1:]], cwd=cwd,
                           env=sandbox.scrubbed_env(keep, env), capture_output=True, text=True, timeout=30,
                           start_new_session=True)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    lines = [ln[3:] for ln in p.stderr.splitlines() if ln.startswith("#$ ")]
    step_env, steps = dict(env), []
    for ln in lines:
        m = ASSIGN.match(ln)
        if m and not steps:
            step_env[m.group(1)] = " ".join(shlex.split(m.group(2))) if m.group(2).strip() else m.group(2)
        else:
            steps.append(ln)
    while steps and _tool(steps[0]) == "rm":  # clearing files of an earlier run: the keep folder is fresh
        steps.pop(0)
    tools = [_tool(s) for s in steps]
    if tools.count("cudafe++") != 1 or tools.count("cicc") != 1 or tools[:2] != ["gcc", "cudafe++"]:
        return None
    if tools[2:6] != ["gcc", "cicc", "ptxas", "fatbinary"] or not steps[6:]:
        return None
    m = MODULE_ID.search(steps[1])
    if "--gen_module_id_file" not in steps[1] or not m or m.group(1) not in steps[3]:
        return None
    return {"env": step_env, "module_id": (m.group(1), _module_id(cmd)),
            "host": [steps[0], steps[1].replace("--gen_module_id_file", "")], "device": steps[2:6],
            "rest": steps[6:]}


def _tool(step: str) -> str:
    word = shlex.split(step)[0] if step.strip() else ""
    return Path(word.replace("$CICC_PATH/", "")).name


def _module_id(cmd) -> str:
    """A name unique to this source and command, as nvcc's own is (it prefixes static symbols)."""
    src = re.sub(r"\W", "_", Path(next((a for a in cmd if a.endswith(".cu")), "x.cu")).name)
    return f"_sftbuild_{hashlib.sha256(' '.join(cmd).encode()).hexdigest()[:12]}_{src}"


def _run_plan(plan, cwd, deadline, limits) -> tuple[int, str]:
    path, name = plan["module_id"]
    Path(cwd, path).write_text(name)
    chains = [_Chain(plan["host"], cwd, plan["env"], limits), _Chain(plan["device"], cwd, plan["env"], limits)]
    while any([c.running() for c in chains]):  # a list: every chain must get to advance
        if any(c.code not in (None, 0) for c in chains) or time.monotonic() > deadline:
            break  # a failed front end decides; a timeout is the whole command's
        time.sleep(0.02)
    for c in chains:
        c.stop()
    if time.monotonic() > deadline and any(c.code is None for c in chains):
        return -9, f"nvcc exceeded its time limit\n{chains[0].log}{chains[1].log}"
    failed = [c for c in chains if c.code not in (None, 0)]
    if failed:  # the host front end reports first, as in plain nvcc
        return failed[0].code, failed[0].log
    log = chains[0].log + chains[1].log
    for step in plan["rest"]:
        code, out = run_command(["bash", "-c", step], cwd, deadline - time.monotonic(), plan["env"], **limits)
        log += out
        if code != 0 and _tool(step) != "rm":
            return code, log
    return 0, log


class _Chain:
    """Steps run one after another in the background, each in the sandbox."""

    def __init__(self, steps, cwd, env, limits):
        self.log, self.code = "", None
        self._steps, self._cwd, self._env, self._limits = list(steps), cwd, env, limits
        self._proc = None
        self._next()

    def _next(self):
        if not self._steps:
            self.code = 0
            return
        step = self._steps.pop(0)
        self._proc = sandbox.Proc(["bash", "-c", step], cwd=self._cwd, env=self._env, rw=[self._cwd],
                                  ro=arg_dirs(step), **self._limits)

    def running(self) -> bool:
        if self.code is not None:
            return False
        code = self._proc.poll()
        if code is None:
            return True
        self.log += self._proc.output()
        self._proc.close()
        if code != 0:
            self.code = code
            return False
        self._next()
        return self.code is None

    def stop(self):
        if self._proc is not None:
            self._proc.close()


def arg_dirs(cmd) -> list[str]:
    """Folders a compiler command names with -I, -L, -isystem or -idirafter: read-only in its sandbox."""
    words = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
    out = []
    for i, w in enumerate(words):
        for flag in ("-Xcompiler=-idirafter,", "-idirafter", "-isystem", "-I", "-L"):
            if w.startswith(flag):
                d = w[len(flag):] or (words[i + 1] if i + 1 < len(words) else "")
                d = d.lstrip(",")
                if d and os.path.isabs(d) and os.path.isdir(d):
                    out.append(d)
                break
    return out


def run_command(cmd, cwd, timeout: float, env: dict | None = None, memory_gb: float | None = None,
                scratch: str | None = None) -> tuple[int, str]:
    """Any compiler command in the sandbox: (exit code, output), -9 when it ran past `timeout` seconds
    (its whole process group is killed then)."""
    res = sandbox.run(list(cmd), max(0.1, timeout), cwd=cwd, env=env, rw=[cwd], ro=arg_dirs(cmd),
                      memory_gb=memory_gb, scratch=scratch)
    if res.timed_out:
        return -9, f"{Path(cmd[0]).name} exceeded {timeout:.0f} s"
    return res.code, res.output
