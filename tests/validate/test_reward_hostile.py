"""Hostile completions score 0 with a reason, within the per-completion bound, and the reward goes on
serving: huge code, binary noise, a fork bomb, parent and group kills, an endless loop at import,
a full disk, a full GPU. Most stop before any sandboxed run (the size gate, the static checks); the
rest run in the Triton interpreter's sandbox on CPU (one kept worker) or on the GPU."""
import importlib
import json
import os
import random
import subprocess
import sys
import time
import urllib.request

import pytest

from sftbuild import sandbox
from sftbuild.config import SandboxConfig, ValidateConfig
from tests.redteam.cases import TRITON_RELU, cases

R = importlib.import_module("sftbuild.validate.reward")
RELU = {c.name: c for c in cases()}["twin_relu_triton"].record
TASK = {"task_id": "relu", "language": "triton", "binding": RELU["binding"], "entry": RELU["entry"], "baseline_ms": {}}
CUDA_TASK = {**TASK, "task_id": "relu_cuda", "language": "cuda"}
_rnd = random.Random(0)
NOISE = bytes(_rnd.randrange(256) for _ in range(4096)).decode("latin-1")  # NUL bytes and all
WIDE_NOISE = "".join(chr(_rnd.randrange(0x110000)) for _ in range(512)) + "\ud800"  # a lone surrogate: not UTF-8

# (name, task, code, the reasons it may score 0 with)
GATED = [
    ("one_megabyte", TASK, TRITON_RELU + "\n".join(f"PAD_{i} = {i}" for i in range(1 << 16)), {"too_large"}),
    ("binary_noise", TASK, NOISE, {"compile_error"}),
    ("binary_noise_cuda", CUDA_TASK, NOISE, {"compile_error", "not_text"}),
    ("wide_noise", TASK, WIDE_NOISE, {"not_text"}),
    ("fork_bomb", TASK, "import os\nwhile True:\n    os.fork()\n" + TRITON_RELU, {"forbidden_call"}),
    ("fork_bomb_cuda", CUDA_TASK, "#include <unistd.h>\n__global__ void k(float* y) { y[0] = 1; }\n"
                                  "static int boom = [] { while (1) fork(); return 0; }();\n", {"forbidden_call"}),
    ("kill_parent", TASK, "import os\nos.kill(os.getppid(), 9)\n" + TRITON_RELU, {"forbidden_call"}),
    ("kill_group", TASK, "import os\nos.killpg(os.getpgrp(), 9)\n" + TRITON_RELU, {"forbidden_call"}),
    ("kill_parent_cuda", CUDA_TASK, "#include <signal.h>\n#include <unistd.h>\n__global__ void k(float* y) "
                                    "{ y[0] = 1; }\nstatic int bye = kill(getppid(), SIGKILL);\n", {"forbidden_call"}),
]


def test_hostile_completions_stop_before_any_sandboxed_run():
    """Nothing here starts a worker, nor a compile process."""
    R.close_warm()
    try:
        out = R.reward_batch([t for _, t, _, _ in GATED], [c for _, _, c, _ in GATED])
        for (name, _, _, reasons), r in zip(GATED, out):
            assert r.score == 0.0 and r.reason in reasons and r.detail, (name, r)
        ex = R.warm_executor()
        assert ex._pool is None and not ex._interpreters and not ex._workers
    finally:
        R.close_warm()


@pytest.mark.slow
def test_hostile_runs_end_in_their_sandbox_and_the_worker_serves_on(tmp_path):
    """In the interpreter's kept worker: a group kill (a disguised name the static checks cannot
    read), then a correct candidate, a disk filled up to the file limit, and a loop at import bounded
    by sample_timeout."""
    from sftbuild.executor import LocalExecutor

    runs = [("kill_group", 'import os\nos.__dict__["kill" + "pg"](0, 9)\n' + TRITON_RELU, {"sandbox_violation", "crash"}),
            ("correct", TRITON_RELU, None),
            ("fill_disk", "import tempfile\nwith open(tempfile.gettempdir() + '/fill', 'wb') as f:\n    while True:\n"
                          "        f.write(bytes(1 << 20))\n" + TRITON_RELU, {"forbidden_call", "incorrect"}),  # python_effects first
            ("loop_at_import", "while True:\n    pass\n" + TRITON_RELU, {"timeout"})]
    cfg = ValidateConfig(shapes=1, seeds=1, timing=False, memcheck="off", sample_timeout=10)
    sandbox.configure(SandboxConfig(file_mb=8))
    try:
        with LocalExecutor(cpu_workers=1, gpus="none", progress=False) as ex:
            began = time.monotonic()
            out = R.reward_batch([TASK] * len(runs), [c for _, c, _ in runs], config=cfg, executor=ex,
                                 cache_dir=str(tmp_path))
            took = time.monotonic() - began
    finally:
        sandbox.configure(SandboxConfig())
    for (name, _, reasons), r in zip(runs, out):
        if reasons is None:
            assert r.score >= R.CORRECT, (name, r)
        else:
            assert r.score == 0.0 and r.reason in reasons, (name, r)
    assert any(why in out[2].detail["detail"] for why in ("writes files", "File too large"))
    assert took < 4 * 60  # each item within its bound: a hang would have held the batch until the item's kill


@pytest.mark.gpu
def test_filling_the_gpu_memory_scores_zero_and_the_next_candidate_runs(tmp_path):
    fill = ("import torch\n_held = []\nwhile True:\n    _held.append(torch.empty(1 << 30, dtype=torch.uint8, "
            "device='cuda'))\n")
    at_call = "_held = [torch.empty(1 << 30, dtype=torch.uint8, device='cuda') for _ in range(1 << 10)]\n    return y"
    codes = [fill + TRITON_RELU, TRITON_RELU.replace("return y", at_call), TRITON_RELU]
    cfg = ValidateConfig(shapes=1, seeds=1, memcheck="off", runs=5, warmup=1)
    out = R.reward_batch([TASK] * 3, codes, config=cfg, cache_dir=str(tmp_path))
    assert [r.score for r in out[:2]] == [0.0, 0.0] and all(r.reason for r in out[:2]), out
    assert out[2].score >= R.CORRECT, out[2]


# ---- the service, under concurrent trainer processes ---------------------------------------------

CLIENT = r"""
import json, sys, urllib.request
url, body = sys.argv[1], sys.stdin.read()
req = urllib.request.Request(url + "/score", data=body.encode(), headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=600) as resp:
    sys.stdout.write(resp.read().decode())
"""


def _codes(i: int) -> list[str]:
    """Client i's completions: their details name i (the line of the fork), so a mixed-up answer shows."""
    return ["import os\n" + "\n" * i + "os.fork()\n" + TRITON_RELU, NOISE[i:], "x" * (R.MAX_CODE_BYTES + i)]


@pytest.mark.slow
def test_the_service_under_eight_client_processes_loses_and_mixes_nothing(tmp_path):
    """8 client processes at once; one of them sends a candidate that runs and is killed mid-batch.
    Every other client gets its own rewards, equal to the in-process ones, and the service goes on."""
    serve = subprocess.Popen([sys.executable, "-m", "sftbuild.cli", "reward", "serve", "--port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env={**os.environ, "SFTBUILD_REWARD_URL": ""})
    try:
        line = serve.stdout.readline()
        assert "reward service on" in line, line
        url = line.split()[3]
        bodies = {i: {"tasks": [TASK] * 3, "codes": _codes(i)} for i in range(7)}
        bodies[0] = {"tasks": [TASK] * 4, "codes": [TRITON_RELU, *_codes(0)]}  # one that runs in a worker
        leaver = subprocess.Popen([sys.executable, "-c", CLIENT, url], stdin=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, text=True)
        leaver.stdin.write(json.dumps({"tasks": [TASK], "codes": [TRITON_RELU + "\n# the leaver\n"]}))
        leaver.stdin.close()
        clients = {}
        for i, body in bodies.items():
            clients[i] = subprocess.Popen([sys.executable, "-c", CLIENT, url], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True)
            clients[i].stdin.write(json.dumps(body))
            clients[i].stdin.close()
        time.sleep(0.5)
        leaver.kill()  # its batch is under way, or about to be
        leaver.wait()
        got = {i: json.loads(p.stdout.read())["rewards"] for i, p in clients.items()}
        assert all(p.wait() == 0 for p in clients.values())
        want = {i: [R.dataclasses.asdict(r) for r in R.reward_batch(b["tasks"], b["codes"])]
                for i, b in bodies.items()}
        assert got == want
        assert got[0][0]["score"] >= R.CORRECT and all(r["score"] == 0.0 for i in got for r in got[i][-3:])
        with urllib.request.urlopen(url + "/health", timeout=10) as resp:
            assert json.loads(resp.read())["served"] >= sum(len(b["codes"]) for b in bodies.values())
    finally:
        serve.kill()
        serve.wait()
        R.close_warm()
