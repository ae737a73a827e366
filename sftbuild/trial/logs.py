"""Compile and run logs made safe to store and to return from `reward()`.

`scrub(log, roots)` keeps what a log says about the record's own files, the toolchain, torch and
Triton, and withholds the rest: a line naming a file outside those places is replaced by one line
naming the file, and the lines after it (a compiler quotes the offending source line there) are
dropped up to the next diagnostic. So a log never carries the contents of a host file, whatever
the compiler or the candidate printed. The result is capped to its last `cap` characters.

The result also loses every line holding text of a host secret (sftbuild.sandbox.without_secrets):
a second net, for content a candidate read and printed or raised, behind the sandbox that hides
those files (such a line names no file, so the path rule alone would keep it).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import sys
from pathlib import Path

from sftbuild.sandbox import within, without_secrets

# a path, not a URL's "//host/..." (CUDA's and torch's errors end with a link to their docs)
PATH = re.compile(r"(?<![\w.:/])((?:/|\.\./)[^\s:()\"'<>,;]+)")
DIAGNOSTIC = re.compile(r"(error|warning|note|remark)\b|^In file included from|^\s+from |^#\$ |^ptxas|^nvcc",
                        re.I)
SYSTEM = ("/usr/include", "/usr/lib/gcc", "/usr/local/include", "/usr/local/cuda", "/usr/lib/x86_64-linux-gnu",
          "/usr/lib/aarch64-linux-gnu", "/usr/bin", "/usr/local/bin", "/dev/null")


@functools.lru_cache(maxsize=1)
def trusted_roots() -> tuple[str, ...]:
    """The toolchain, torch, Triton and this package: files a log may quote."""
    roots = list(SYSTEM)
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(os.path.realpath(nvcc)).parents[1]))
    if os.environ.get("CUDA_HOME"):
        roots.append(os.path.realpath(os.environ["CUDA_HOME"]))
    for mod in ("torch", "triton"):
        spec = sys.modules.get(mod)
        path = getattr(spec, "__file__", None) if spec else None
        if path is None:
            import importlib.util

            found = importlib.util.find_spec(mod)
            path = found.origin if found else None
        if path:
            roots.append(str(Path(path).parent))
    roots.append(str(Path(__file__).resolve().parents[1]))
    roots.append(sys.prefix)  # the environment's own headers and libraries (pybind11, nvidia-*)
    return tuple(os.path.realpath(r) for r in roots)


def allowed(path: str, roots) -> bool:
    if not path.startswith("/"):
        return not path.startswith("../")
    p = os.path.normpath(path)
    return any(within(p, r) for r in (*trusted_roots(), *roots))


def scrub(log: str, roots=(), cap: int = 4000) -> str:
    """`log` without lines from files outside the record's folders (`roots`) and the trusted ones."""
    if not log:
        return log or ""
    out, withholding = [], False
    for line in log.splitlines():
        bad = next((p for p in PATH.findall(line) if not allowed(p, roots)), None)
        if bad is not None:
            out.append(f"[a line about {bad[:160]} withheld: outside the record's files]")
            withholding = True
            continue
        if withholding and not DIAGNOSTIC.search(line):
            continue  # the compiler quoting the withheld file
        withholding = False
        out.append(line)
    text = without_secrets("\n".join(out))
    if len(text) > cap:
        text = f"[{len(text) - cap} earlier characters dropped]\n" + text[-cap:]
    return text
