"""host_calls: process, thread and stream calls in CUDA host code."""
from __future__ import annotations

import re

from sftbuild.validate.static import STATIC_CHECKS, StaticCheck

HOST_FORBIDDEN = {
    r"\bcudaDeviceReset\s*\(": "cudaDeviceReset resets the context under the harness",
    r"(?<![\w.:])(?:std::)?(?:exit|_exit|abort|quick_exit)\s*\(": "exits the process",
    r"(?<![\w.:])(?:std::)?system\s*\(": "runs a shell command",
    r"\b(?:fork|vfork|execv\w*|execl\w*|popen)\s*\(": "starts a process",
    r"(?<![\w.:])(?:std::)?(?:kill|killpg|tgkill|raise|syscall)\s*\(": "signals a process",
    r"\bstd::(?:thread|async|jthread)\b|\bpthread_create\s*\(": "spawns a thread to hide work",
    r"\bcudaStreamCreate\w*\s*\(|\bcuStreamCreate\w*\s*\(": "creates its own stream to hide work from the timer",
    r"\bcudaSetDevice\s*\(|\bcudaDeviceSetLimit\s*\(": "changes device state",
    r"\bdlopen\s*\(|\bcuLaunchKernel\s*\(": "loads or launches code the checks cannot see",
}


@STATIC_CHECKS.register
class HostCalls(StaticCheck):
    """Process, thread and stream calls in CUDA host code."""

    name = "host_calls"
    version = 3  # new calls refused, and the shared kernel view read (string literals kept whole)
    order = 10

    def check(self, src):
        for pat, why in HOST_FORBIDDEN.items():
            m = re.search(pat, src.cuda)
            if m:
                yield self.found("forbidden_call", f"{m.group(0).strip()}: {why}")
