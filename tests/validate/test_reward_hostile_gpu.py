"""Hostile completions that pass the static checks (their calls reached through names no check reads)
run in the GPU worker's sandbox: a fork bomb, a kill of the worker's parent, a loop at import. Each scores
0 with a reason (a hang at sample_timeout), and the correct candidate after them is scored."""
import importlib

import pytest

from sftbuild.config import ValidateConfig
from tests.redteam.cases import TRITON_RELU, cases

R = importlib.import_module("sftbuild.validate.reward")
RELU = {c.name: c for c in cases()}["twin_relu_triton"].record
TASK = {"task_id": "relu", "language": "triton", "binding": RELU["binding"], "entry": RELU["entry"], "baseline_ms": {}}
RUNS = [  # (name, code, the reasons it may score 0 with)
    ("fork_bomb", "import os\n_f = os.__dict__['fo' + 'rk']\nwhile True:\n    _f()\n" + TRITON_RELU,
     {"sandbox_violation", "crash", "timeout"}),
    ("kill_parent", "import os\nos.__dict__['ki' + 'll'](os.getppid(), 9)\n" + TRITON_RELU,
     {"sandbox_violation", "crash"}),
    ("loop_at_import", "while True:\n    pass\n" + TRITON_RELU, {"timeout"}),
    ("correct", TRITON_RELU, None),
]


@pytest.mark.gpu
def test_hostile_runs_end_in_the_gpu_workers_sandbox_and_the_next_candidate_runs(tmp_path):
    from sftbuild.executor import LocalExecutor

    cfg = ValidateConfig(shapes=1, seeds=1, memcheck="off", runs=5, warmup=1, sample_timeout=20)
    with LocalExecutor(cpu_workers=1, progress=False) as ex:
        out = R.reward_batch([TASK] * len(RUNS), [c for _, c, _ in RUNS], config=cfg, executor=ex,
                             cache_dir=str(tmp_path))
    for (name, _, reasons), r in zip(RUNS, out):
        if reasons is None:
            assert r.score >= R.CORRECT, (name, r)
        else:
            assert r.score == 0.0 and r.reason in reasons and r.detail, (name, r)
