"""A sandboxed command that fills the disk is ended: file_mb bounds each file, and the disk floor
(sandbox.min_free_mb) how many it writes. Checked here with a floor just below the disk's free space:
a plain command, and a reward candidate whose writes the static checks cannot read (its GPU worker is
ended, the candidate scores 0 with the reason, the next one is scored)."""
import dataclasses
import importlib
import json
import shutil
import sys
import tempfile

import pytest

from sftbuild import sandbox
from sftbuild.config import SandboxConfig, ValidateConfig
from tests.redteam.cases import TRITON_RELU, cases

# files of 4 MB, under the 8 MB file limit, until the disk is full: only the floor stops it
FILL = ("import os\nfor i in range(512):\n    with open(os.path.join(os.environ['TMPDIR'], f'f{i}'), 'wb') as f:\n"
        "        f.write(bytes(4 << 20))\n")


def test_a_command_that_fills_the_disk_is_ended_at_the_floor(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    floor = int(sandbox.free_mb(str(scratch))) - 64  # 64 MB of writes reach it; the command would write 2 GB
    pol = sandbox.Policy(file_mb=8, min_free_mb=floor)
    monkeypatch.setenv(sandbox.ENV_KEY, json.dumps(dataclasses.asdict(pol)))
    p = sandbox.Proc([sys.executable, "-c", FILL], scratch=str(scratch))
    try:
        code = p.wait(120)
        written = len(list(scratch.iterdir()))
    finally:
        p.close()
        shutil.rmtree(scratch, ignore_errors=True)
    assert p.disk_low and code == -9 and written < 128, (code, written)
    assert f"fell below {floor} MB free (sandbox.min_free_mb)" in p.ended_why(code)


# os.open and os.write reached through the module's namespace: no static check reads the names
HIDDEN_FILL = ("import os\n_w = os.__dict__['wri' + 'te']\n_o = os.__dict__['op' + 'en']\n"
               "for _i in range(512):\n    _f = _o(os.environ['TMPDIR'] + '/f%d' % _i, os.O_WRONLY | os.O_CREAT)\n"
               "    _w(_f, bytes(4 << 20))\n")


@pytest.mark.gpu
def test_a_candidate_that_fills_the_disk_scores_zero_and_the_next_one_runs(tmp_path):
    from sftbuild.executor import LocalExecutor

    R = importlib.import_module("sftbuild.validate.reward")
    rec = {c.name: c for c in cases()}["twin_relu_triton"].record
    task = {"task_id": "relu", "language": "triton", "binding": rec["binding"], "entry": rec["entry"], "baseline_ms": {}}
    floor = int(sandbox.free_mb(tempfile.gettempdir())) - 64
    cfg = ValidateConfig(shapes=1, seeds=1, memcheck="off", runs=5, warmup=1)
    sandbox.configure(SandboxConfig(file_mb=8, min_free_mb=floor))
    try:
        with LocalExecutor(cpu_workers=1, progress=False) as ex:
            out = R.reward_batch([task] * 2, [HIDDEN_FILL + TRITON_RELU, TRITON_RELU], config=cfg, executor=ex,
                                 cache_dir=str(tmp_path))
    finally:
        sandbox.configure(SandboxConfig())
    assert out[0].score == 0.0 and out[0].reason == "crash", out[0]
    assert f"below {floor} MB free (sandbox.min_free_mb)" in out[0].detail["detail"]
    assert out[1].score >= R.CORRECT, out[1]
