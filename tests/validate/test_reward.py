"""The RLVR reward and its TRL / verl adapters (CPU: static gates, compile gate, interpreter)."""
import json

import importlib

R = importlib.import_module("sftbuild.validate.reward")
from tests.redteam.cases import cases

CASES = {c.name: c for c in cases()}


def _task(name):
    rec = CASES[name].record
    return {"task_id": name, "language": rec["language"], "binding": rec["binding"], "entry": rec["entry"],
            "baseline_ms": {}}


def test_extract_code_from_markdown_and_chat():
    text = "Here:\n```python\nprint(1)\n```\nand\n```cuda\n__global__ void k(){}\n```\n"
    assert R.extract_code(text, "cuda").strip() == "__global__ void k(){}"
    assert R.extract_code([{"role": "user", "content": "q"}, {"role": "assistant", "content": text}],
                          "triton").strip() == "print(1)"
    assert R.extract_code("no fences", "cuda") == "no fences"


def test_speed_tiers_are_clipped():
    assert R.speed_tier(0.4) == 0.0 and R.speed_tier(1.0) == 0.5 and R.speed_tier(100) == 1.0
    assert R.score("ok", None, {"speedup": 80, "flags": {"impossible_speedup": 80}}).score < 0.5


def test_cheats_score_zero_and_are_reported(tmp_path):
    names = ["torch_in_host_aten", "forbidden_os_system", "matmul_operator"]
    out = R.reward_batch([_task(n) for n in names], [CASES[n].record["code"] for n in names],
                         cache_dir=str(tmp_path))
    assert [r.score for r in out] == [0.0, 0.0, 0.0]
    assert all(r.cheat for r in out), out


def test_trl_and_verl_adapters_on_triton(tmp_path, monkeypatch):
    monkeypatch.setattr(R, "ValidateConfig", lambda **kw: __import__("sftbuild.config").config.ValidateConfig(
        shapes=1, seeds=1, timing=False, memcheck="off"))
    good, decoy = CASES["twin_relu_triton"].record["code"], CASES["triton_decoy"].record["code"]
    task = json.dumps(_task("twin_relu_triton"))
    scores = R.trl_reward(prompts=["p", "p"], completions=[f"```python\n{good}```", [
        {"role": "assistant", "content": f"```python\n{decoy}```"}]], task=[task, task])
    assert scores[0] >= R.CORRECT and scores[1] == 0.0
    assert R.compute_score("sftbuild", "```python\nnot valid python(\n```", task) == 0.0
