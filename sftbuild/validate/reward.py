"""The RLVR reward: the validation pipeline scored for one candidate.

`reward(task, candidate_code) -> Reward`. The task is the JSON exported per record
(task_id, language, binding, entry, baseline_ms); the candidate code replaces the
record's code. Compile and correctness are gates (0 when failed); a detected cheat
scores 0 and is reported; a correct candidate scores CORRECT plus a speed tier
against torch eager measured in the same worker, plus a small memcheck weight.
Code length does not count, but code over MAX_CODE_BYTES, or that is not UTF-8 text, scores 0
before any check reads it (`too_large`, `not_text`). Works without a store: compiles cache under a
temp dir.

Warm across calls: a trainer calls the reward every step, so the executor (its GPU
workers, their CUDA contexts and Triton caches) and the compile cache live for the
process and a call pays only for its own samples. Calls that arrive in one process while a batch
runs (verl calls `compute_score` once per response, from many threads) are scored as one batch.
Trainers with several processes share one warm service instead: `sftbuild reward serve` on each node, and
SFTBUILD_REWARD_URL=http://127.0.0.1:PORT in the trainers' environment sends every
call there (sftbuild/validate/reward_service.py).

Candidates compile and run only in the sandbox (sftbuild.sandbox); logs and details in the
result are scrubbed of host files and capped (sftbuild.trial.logs).
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import math
import os
import re
import sys
import tempfile
import threading

from sftbuild.config import ValidateConfig
from sftbuild.record import Record

CORRECT, SPEED, MEMORY = 0.3, 0.6, 0.1
# a kernel completion is a few KB; past this the static checks alone would hold the service for seconds
MAX_CODE_BYTES = 256 << 10
# `degenerate` counts where a stored verdict carries it; a reference that never moved with the inputs is
# `uninformative` (the inputs' fault, checks/input_independent), which is no cheat
CHEATS = ("cheat", "forbidden_call", "bad_launch", "degenerate", "sandbox_violation")


@dataclasses.dataclass
class Reward:
    score: float
    reason: str | None  # None when correct; else the drop reason
    status: str
    cheat: bool = False
    speedup: float | None = None
    detail: dict = dataclasses.field(default_factory=dict)

    def __float__(self) -> float:
        return self.score


def speed_tier(speedup: float | None) -> float:
    """0 at half eager's speed or slower, 0.5 at parity, 1 at 2x and beyond; in quarter steps."""
    if not speedup or speedup <= 0:
        return 0.0
    x = min(max(math.log2(speedup) / 2 + 0.5, 0.0), 1.0)
    return math.floor(x * 4) / 4


def score(status: str, reason: str | None, payload: dict) -> Reward:
    if status != "ok":
        return Reward(0.0, reason, status, cheat=reason in CHEATS, detail=_short(payload))
    speedup = payload.get("speedup")
    flags = payload.get("flags") or {}
    tier = 0.0 if "impossible_speedup" in flags or "below_bandwidth_floor" in flags else speed_tier(speedup)
    mem = (payload.get("memcheck") or {}).get("ok")
    s = CORRECT + SPEED * tier + MEMORY * (1.0 if mem else 0.5 if mem is None else 0.0)
    return Reward(round(s, 4), None, status, speedup=speedup, detail=_short(payload))


def _short(payload: dict) -> dict:
    keep = ("detail", "static", "errors", "flags", "timing", "memcheck", "why", "log")
    return {k: payload[k] for k in keep if k in payload}


def reward(task: dict | str, candidate_code: str, config: ValidateConfig | None = None, executor=None,
           cache_dir: str | None = None) -> Reward:
    return reward_batch([task], [candidate_code], config, executor, cache_dir)[0]


def serve(port: int):
    """The local reward service (reward_service.py) scoring with this process's warm validator."""
    from sftbuild.validate import reward_service

    return reward_service.make_server(port, lambda tasks, codes: reward_batch(tasks, codes, config=default_config()))


def default_config() -> ValidateConfig:
    """Validation settings for rewards: the validator's own, with memcheck off and fewer timed runs."""
    return ValidateConfig(memcheck="off", runs=30, warmup=5)


_WARM: dict = {}
_WARM_LOCK = threading.Lock()
_RUN_LOCK = threading.Lock()


def warm_executor():
    """The process's executor for rewards: started on first use, kept until exit."""
    with _WARM_LOCK:
        if "ex" not in _WARM:
            from sftbuild.executor import LocalExecutor

            _WARM["ex"] = LocalExecutor(progress=False)
            atexit.register(close_warm)
        return _WARM["ex"]


def close_warm() -> None:
    ex = _WARM.pop("ex", None)
    if ex is not None:
        ex.close()


def refuse(code) -> Reward | None:
    """A score of 0 for code that no check need read: not text, not encodable as UTF-8 (a lone
    surrogate), or larger than MAX_CODE_BYTES; None for code the validator takes."""
    if code is not None and not isinstance(code, str):
        return Reward(0.0, "not_text", "dropped", detail={"detail": f"the completion is {type(code).__name__}, "
                                                                     f"not text"})
    try:
        size = len((code or "").encode("utf-8"))
    except UnicodeEncodeError as e:
        return Reward(0.0, "not_text", "dropped", detail={"detail": f"the completion is not UTF-8 text "
                                                                     f"({e.reason} at character {e.start})"})
    if size > MAX_CODE_BYTES:
        return Reward(0.0, "too_large", "dropped", detail={"detail": f"{size:,} bytes of code, over the "
                                                                      f"{MAX_CODE_BYTES:,} a candidate may have"})
    return None


def merged():
    """The process's batcher: calls that arrive while a batch runs are scored together as the next one."""
    with _WARM_LOCK:
        if _WARM.get("batcher_pid") != os.getpid():  # a forked child has no batcher thread
            from sftbuild.validate import reward_service

            _WARM["batcher"] = reward_service.Batcher(lambda tasks, codes: _score(tasks, codes))
            _WARM["batcher_pid"] = os.getpid()
        return _WARM["batcher"]


def reward_batch(tasks, codes, config=None, executor=None, cache_dir=None) -> list[Reward]:
    """Score many candidates at once: one compile pool, one GPU worker per GPU, both kept warm."""
    url = os.environ.get("SFTBUILD_REWARD_URL")
    if url and executor is None and config is None:
        from sftbuild.validate import reward_service

        return [Reward(**r) for r in reward_service.remote_batch(url, tasks, codes)]
    if executor is None and config is None and cache_dir is None:
        # verl's reward loop calls compute_score once per response, from many threads at once: one batch
        return merged().submit(list(tasks), list(codes))
    return _score(tasks, codes, config, executor, cache_dir)


def _score(tasks, codes, config=None, executor=None, cache_dir=None) -> list[Reward]:
    from sftbuild.context import say_sandbox_once

    say_sandbox_once(lambda line: print(line, file=sys.stderr))  # a missing isolation layer, once a process
    cfg = config or default_config()
    cache = cache_dir or os.path.join(tempfile.gettempdir(), "sftbuild_reward_cache")
    records, bad = [], {}
    for i, (task, code) in enumerate(zip(tasks, codes)):
        refused = refuse(code)
        if refused is not None:
            bad[i] = refused
            records.append(None)
            continue
        task = json.loads(task) if isinstance(task, str) else task
        try:
            records.append(Record(language=task["language"], code=code or "", source="rlvr",
                                  entry=task.get("entry") or {}, binding=task.get("binding")))
        except Exception as e:
            bad[i] = Reward(0.0, "bad_task", "dropped", detail={"detail": repr(e)})
            records.append(None)
    ex = executor or warm_executor()
    live = [r for r in records if r is not None and r.code.strip()]
    out = {}
    # imported here: the package's import (a sandboxed compile gate's) then stays without torch
    from sftbuild.validate import pipeline

    with _RUN_LOCK if executor is None else contextlib.nullcontext():  # one batch at a time on the shared workers
        for rec, status, reason, payload in pipeline.validate(list({r.id: r for r in live}.values()), cfg, ex,
                                                              cache):
            out[rec.id] = score(status, reason, payload)
    result = []
    for i, rec in enumerate(records):
        if i in bad:
            result.append(bad[i])
        elif rec is None or not rec.code.strip():
            result.append(Reward(0.0, "no_code", "dropped"))
        else:
            result.append(out.get(rec.id, Reward(0.0, "not_run", "dropped")))
    return result


FENCE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)```", re.S)


def extract_code(completion, language: str = "") -> str:
    """The code of a completion: the last fenced block (preferring the task's language), else the text."""
    if isinstance(completion, list):  # chat messages
        completion = next((m.get("content", "") for m in reversed(completion)
                           if isinstance(m, dict) and m.get("role", "assistant") == "assistant"), "")
    text = completion or ""
    blocks = FENCE.findall(text)
    if not blocks:
        return text
    want = {"cuda": ("cuda", "cpp", "c++", "cu"), "triton": ("python", "py"), "kernelbench": ("python", "py")}
    preferred = [b for tag, b in blocks if tag.lower() in want.get(language, ())]
    return (preferred or [b for _, b in blocks])[-1]


def trl_reward(prompts=None, completions=None, task=None, **kwargs) -> list[float]:
    """A TRL GRPO reward function: reward_funcs=[trl_reward]; the dataset has a `task` column."""
    tasks = [json.loads(t) if isinstance(t, str) else t for t in task]
    codes = [extract_code(c, t.get("language", "")) for c, t in zip(completions, tasks)]
    return [r.score for r in reward_batch(tasks, codes)]


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """A verl custom_reward_function: ground_truth is the exported task JSON."""
    task = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    return reward(task, extract_code(solution_str, task.get("language", ""))).score


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None, **kwargs) -> list[float]:
    """verl's batch reward manager (reward_model.reward_manager=batch): one call scores a whole step."""
    tasks = [json.loads(g) if isinstance(g, str) else g for g in ground_truths]
    codes = [extract_code(s, t.get("language", "")) for s, t in zip(solution_strs, tasks)]
    return [r.score for r in reward_batch(tasks, codes)]

