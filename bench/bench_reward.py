"""Reward latency for an RLVR trainer: completions scored in batches through `trl_reward`, on a GPU.

    python bench/bench_reward.py [--completions 256] [--batch 64] [--tasks rlvr_trl.jsonl] [--service]

Tasks are an exported TRL task file (`task` column, JSONL) or, without one, the red-team
twins' tasks. Completions cycle through the tasks: each task's own correct code, and a
broken copy (a constant changed), both in markdown fences as a policy writes them; every
completion is distinct text, so nothing is served from a cache of results. The first call
starts the warm workers; the figures after it are what a training step pays:

  completions/s   over the calls after the first
  overhead/call   the wall time of a call scoring one already-compiled completion of a
                  task seen before: the fixed cost a call adds beyond its own samples

With --service the same calls go through `sftbuild reward serve` (started here, on a free port).
With --compare the same completions then go through `sftbuild validate`'s pipeline, with the reward's
settings, and the verdicts (status and reason) that differ are counted and the first few shown.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tasks_and_codes(path: str | None) -> list[tuple[dict, str]]:
    if path:
        out = []
        for line in open(path):
            row = json.loads(line)
            task = json.loads(row["task"]) if isinstance(row["task"], str) else row["task"]
            out.append((task, task.get("solution") or row.get("completion") or ""))
        return [(t, c) for t, c in out if c]
    from tests.redteam import cases as RT

    pairs = []
    for case in RT.twins():
        rec = case.record
        pairs.append(({"task_id": case.name, "language": rec["language"], "binding": rec["binding"],
                       "entry": rec["entry"], "baseline_ms": {}}, rec["code"]))
    return pairs


def broken(code: str) -> str:
    for a, b in (("0.0f", "0.5f"), ("> 0", "> 1"), ("+", "-")):
        if a in code:
            return code.replace(a, b, 1)
    return code + "\n"


def completions(pairs, n):
    out = []
    for i in range(n):
        task, code = pairs[i % len(pairs)]
        body = code if (i // len(pairs)) % 2 == 0 else broken(code)
        lang = "python" if task["language"] != "cuda" or "load_inline" in code else "cuda"
        out.append((json.dumps(task), f"```{lang}\n{body}\n# completion {i}\n```"))
    return out


def code_of(task: str, completion: str) -> str:
    from sftbuild.validate.reward import extract_code

    return extract_code(completion, json.loads(task).get("language", ""))


def compare(items, rewards) -> None:
    """`sftbuild validate`'s verdicts for the same code (its pipeline, the reward's settings, a fresh cache)
    against the reward's: the differences in status and reason."""
    import tempfile

    from sftbuild.executor import LocalExecutor
    from sftbuild.record import Record
    from sftbuild.validate import pipeline
    from sftbuild.validate.reward import default_config

    recs = []
    for t, c in items:
        task = json.loads(t)
        recs.append(Record(language=task["language"], code=code_of(t, c), source="rlvr", entry=task.get("entry") or {},
                           binding=task.get("binding")))
    with LocalExecutor(progress=False) as ex, tempfile.TemporaryDirectory() as cache:
        got = {rec.id: (status, reason) for rec, status, reason, _ in
               pipeline.validate(list({r.id: r for r in recs}.values()), default_config(), ex, cache)}
    diff = [(i, got.get(rec.id), (r.status, r.reason)) for i, (rec, r) in enumerate(zip(recs, rewards))
            if got.get(rec.id) != (r.status, r.reason)]
    print(f"  verdicts differing from sftbuild validate's: {len(diff)} of {len(recs)}")
    for i, want, have in diff[:5]:
        print(f"    completion {i}: validate {want}, reward {have}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--completions", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--tasks", default=None)
    ap.add_argument("--service", action="store_true")
    ap.add_argument("--compare", action="store_true", help="also validate the completions; count verdict differences")
    a = ap.parse_args()
    proc = None
    if a.service:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "sftbuild.cli", "reward", "serve", "--port", str(port)])
        os.environ["SFTBUILD_REWARD_URL"] = f"http://127.0.0.1:{port}"
        import urllib.request

        for _ in range(300):
            try:
                urllib.request.urlopen(os.environ["SFTBUILD_REWARD_URL"] + "/health")
                break
            except OSError:
                time.sleep(0.2)
    from sftbuild.validate.reward import trl_reward

    pairs = tasks_and_codes(a.tasks)
    items = completions(pairs, a.completions)
    walls, scores = [], []
    for i in range(0, len(items), a.batch):
        chunk = items[i:i + a.batch]
        t0 = time.perf_counter()
        scores += trl_reward(prompts=[""] * len(chunk), completions=[c for _, c in chunk], task=[t for t, _ in chunk])
        walls.append(time.perf_counter() - t0)
        print(f"call {len(walls)}: {len(chunk)} completions in {walls[-1]:.1f} s", flush=True)
    verdicts = []
    if a.compare:  # the reward's own verdicts, for the same completions, through the service or not
        from sftbuild.validate.reward import reward_batch

        for i in range(0, len(items), a.batch):
            chunk = items[i:i + a.batch]
            verdicts += reward_batch([t for t, _ in chunk], [code_of(t, c) for t, c in chunk])
    t, c = items[0]
    trl_reward(prompts=[""], completions=[c], task=[t])  # compiled and cached now
    t0 = time.perf_counter()
    trl_reward(prompts=[""], completions=[c], task=[t])
    overhead = time.perf_counter() - t0
    later = walls[1:] or walls
    n_later = len(items) - (a.batch if len(walls) > 1 else 0)
    print(f"reward: {len(items)} completions of {len(pairs)} tasks in batches of {a.batch}"
          f"{' through the service' if a.service else ''}")
    print(f"  first call {walls[0]:.1f} s (starts the warm workers); later calls median "
          f"{sorted(later)[len(later) // 2]:.1f} s")
    print(f"  completions/s after the first call: {n_later / sum(later):.1f}")
    print(f"  overhead/call (one cached completion): {overhead:.2f} s")
    print(f"  mean score {sum(scores) / len(scores):.3f}; scored > 0: {sum(s > 0 for s in scores)}")
    if a.compare:
        compare(items, verdicts)
    if proc:
        proc.terminate()


if __name__ == "__main__":
    main()
