"""Real trainers call the reward as a trainer's user wires it, for 2 steps each, and the rewards they log
equal `reward_batch` (what `sftbuild reward` serves) on the same completions:
- TRL's GRPOTrainer, `reward_funcs=[trl_reward]`, on rows of the rlvr_trl exporter;
- verl's reward loop worker (what its PPO trainer runs per reward worker), `custom_reward_function`
  = `compute_score`, on rows of the rlvr_verl exporter, responses sampled from the policy.

The policy is a small Llama built from a config, its tokenizer built here: no download. Each word of
its vocabulary is a whole fenced completion (a correct kernel, a cheat, a wrong kernel, broken code), so
a randomly initialised model samples real candidates. The correct one runs on a single program, so its
speed tier is 0 wherever it is timed and a second scoring gives the same number."""
import importlib
import json

import pytest

from sftbuild.output.exporters import Batch
from sftbuild.output.exporters.rlvr_trl import RlvrTrl
from sftbuild.output.exporters.rlvr_verl import RlvrVerl
from sftbuild.output.rows import Sample
from sftbuild.record import Record
from tests.redteam.cases import TRITON_STRIDE, cases

R = importlib.import_module("sftbuild.validate.reward")
CASES = {c.name: c for c in cases()}
ONE_PROGRAM = TRITON_STRIDE.replace("relu_kernel[(32,)](xc, y, n, BLOCK=1024, PROGRAMS=32)",
                                    "relu_kernel[(1,)](xc, y, n, BLOCK=1024, PROGRAMS=1)")
COMPLETIONS = [f"```python\n{code}```" for code in (
    ONE_PROGRAM, CASES["triton_decoy"].record["code"], CASES["triton_off_by_one"].record["code"],
    "import triton\n\ndef relu(x:\n")]
UNSAID = [0, 1]  # <unk> and <pad>: every sampled word is a completion or the end of text
CHAT = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}answer:{% endif %}"


def _samples() -> list[Sample]:
    rec = CASES["twin_relu_triton"].record
    task = Record(language=rec["language"], code=rec["code"], source="rlvr", entry=rec["entry"], binding=rec["binding"])
    return [Sample(record=task, instructions={"en:detailed": "Write relu as a Triton kernel: y = max(x, 0)."},
                   validation={})]


def _rows(exporter) -> list[dict]:
    table = next(iter(exporter.tables(Batch(samples=_samples(), store=None)).values()))
    return table.splits["train"]


def _policy():
    """A tokenizer whose words are whole completions, and a small causal LM over that vocabulary."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    import torch

    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0, "<pad>": 1, "</s>": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                                eos_token="</s>")
    fast.add_tokens([tokenizers.AddedToken(c, normalized=False) for c in COMPLETIONS])
    fast.chat_template = CHAT
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                                   pad_token_id=1, eos_token_id=2, bos_token_id=None)
    return fast, transformers.LlamaForCausalLM(cfg)


@pytest.fixture
def fresh_reward():
    """Each trainer starts the reward's warm executor itself, as in its own process."""
    R.close_warm()
    yield
    R.close_warm()


@pytest.mark.gpu
def test_trl_grpo_trainer_logs_the_reward_of_its_completions(tmp_path, fresh_reward, monkeypatch):
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from transformers import TrainerCallback

    monkeypatch.delenv("SFTBUILD_REWARD_URL", raising=False)
    tok, model = _policy()
    rows = _rows(RlvrTrl()) * 2
    seen = []  # per step: (completions, the rewards the trainer got for them, its logged mean)

    class Snapshot(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "rewards/trl_reward/mean" in logs:
                # the trainer's own completion log (what log_completions prints): the latest generation batch
                seen.append((list(trainer._logs["completion"]), list(trainer._logs["rewards"]["trl_reward"]),
                             logs["rewards/trl_reward/mean"]))

    # 16 completions a step, of 4 candidates at most: the reward validates each distinct one once
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=16,
                          num_generations=8, max_completion_length=2, learning_rate=1e-3, beta=0.0,
                          generation_kwargs={"suppress_tokens": UNSAID},
                          logging_steps=1, save_strategy="no", report_to="none", seed=0, bf16=False,
                          use_cpu=not __import__("torch").cuda.is_available())
    trainer = trl.GRPOTrainer(model=model, processing_class=tok, reward_funcs=[R.trl_reward], args=args,
                              train_dataset=datasets.Dataset.from_list(rows), callbacks=[Snapshot()])
    trainer.train()
    assert len(seen) == 2 and trainer.state.global_step == 2
    task = json.loads(rows[0]["task"])
    for completions, logged, mean in seen:
        again = R.reward_batch([task] * len(completions), [R.extract_code(c, "triton") for c in completions])
        assert logged == pytest.approx([r.score for r in again], abs=1e-6), (completions, again)
        assert mean == pytest.approx(sum(r.score for r in again) / len(again), abs=1e-6)
    scores = {s for _, logged, _ in seen for s in logged}
    assert 0.0 in scores and any(s >= R.CORRECT for s in scores), seen  # both kinds of candidate were sampled


@pytest.mark.gpu
def test_verl_reward_loop_worker_scores_two_steps_of_rollouts(tmp_path, fresh_reward, monkeypatch):
    pytest.importorskip("verl.experimental.reward_loop")  # needs ray, tensordict, omegaconf, aiohttp
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from tensordict import TensorDict
    from verl import DataProto
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    import verl.trainer.config as verl_config

    monkeypatch.delenv("SFTBUILD_REWARD_URL", raising=False)
    tok, model = _policy()
    tok.save_pretrained(tmp_path / "policy")
    cfg = OmegaConf.load(f"{verl_config.__path__[0]}/_generated_ppo_trainer.yaml")
    cfg.actor_rollout_ref.model.path = str(tmp_path / "policy")
    # what `custom_reward_function.path=pkg://sftbuild.validate.reward` on verl's command line sets (README)
    cfg.reward.custom_reward_function.path = f"pkg://{R.__name__}"
    cfg.reward.custom_reward_function.name = "compute_score"
    worker = RewardLoopWorker(cfg)
    rows = _rows(RlvrVerl()) * 8
    prompt = tok.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, return_tensors="pt",
                                     return_dict=True)["input_ids"]
    scores = []
    for step in range(2):
        torch.manual_seed(step)
        out = model.generate(prompt.repeat(len(rows), 1), do_sample=True, max_new_tokens=2, pad_token_id=1,
                             suppress_tokens=UNSAID)
        responses = out[:, prompt.shape[1]:]
        ended = (responses == tok.eos_token_id).long()
        valid = (ended.cumsum(1) - ended) == 0  # up to and with the first end of text, as a rollout masks it
        mask = torch.cat([torch.ones_like(prompt.repeat(len(rows), 1)), valid.long()], dim=1)
        data = DataProto(batch=TensorDict({"prompts": prompt.repeat(len(rows), 1), "responses": responses,
                                           "input_ids": out, "attention_mask": mask}, batch_size=len(rows)),
                         non_tensor_batch={k: np.array([r[k] for r in rows], dtype=object)
                                           for k in ("data_source", "reward_model", "extra_info")})
        # per response, concurrently, on the worker's event loop, as its Ray actor runs it
        got = worker.loop.run_until_complete(worker.compute_score_batch(data))
        texts = [tok.decode(r[v], skip_special_tokens=True) for r, v in zip(responses, valid)]
        task = json.loads(rows[0]["reward_model"]["ground_truth"])
        again = R.reward_batch([task] * len(texts), [R.extract_code(t, "triton") for t in texts])
        assert [g["reward_score"] for g in got] == [r.score for r in again], (step, texts, again)
        scores += [g["reward_score"] for g in got]
    assert 0.0 in scores and any(s >= R.CORRECT for s in scores), scores  # both kinds of candidate were sampled


def test_concurrent_calls_in_one_process_share_a_batch(monkeypatch):
    """verl's reward loop calls compute_score per response from a thread pool: the calls merge."""
    import threading
    import time

    calls = []

    def score(tasks, codes):
        calls.append(len(codes))
        time.sleep(0.2)  # a batch under way while the other calls arrive
        return [R.Reward(float(len(c)), None, "ok") for c in codes]

    monkeypatch.delenv("SFTBUILD_REWARD_URL", raising=False)
    monkeypatch.setattr(R, "_WARM", {})
    monkeypatch.setattr(R, "_score", score)
    task = json.dumps({"task_id": "t", "language": "triton"})
    out = {}
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, R.compute_score("s", "x" * i, task)))
               for i in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {i: float(i) for i in range(1, 9)} and sum(calls) == 8 and len(calls) < 8
