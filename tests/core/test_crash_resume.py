"""Crash and resume: `kill -9` the command line again and again, in every stage, then let it finish.

Each command runs as its own process (the real CLI) and is killed at staggered delays after it has
opened the workspace, so every kill lands inside the command's work; the next start resumes it.
After all kills:
  0 results lost       every record alive before a stage has that stage's result under its config
  0 duplicated         one record per code hash, one validate verdict per record, no repeated export row
  0 verdicts lost      a reviewer verdict seen committed once is there after every later kill
  0 processes left     no process the killed command started (workers, compilers) is alive 5 s later

Two workspaces keep it CPU-only and quick: a generated CUDA corpus runs harvest, bind, describe and
validate (with a stand-in nvcc that refuses every build, so the stage's bookkeeping, not a toolchain,
is what is killed), and the export fixture (records validated as on a GPU) runs dedupe, review and export.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sftbuild.store import Store
from tests.output import fixture

REPO = Path(__file__).parents[2]
CLI = [sys.executable, "-m", "sftbuild.cli"]
DELAYS = (0.0, 0.15, 0.4, 0.8)  # seconds after the command opened the workspace


# ---- processes -------------------------------------------------------------------------------------------
def _table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, start time) of every process, read from /proc."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z":
            continue  # a zombie is dead; only its parent's wait is missing
        out[int(d)] = (int(fields[1]), int(fields[2]), fields[19])
    return out


def _descendants(pid: int) -> set[tuple[int, str]]:
    """(pid, start time) of `pid` and everything it started, also those in a session of their own."""
    table = _table()
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in table:
            found.add((p, table[p][2]))
            todo += [c for c, (ppid, _, _) in table.items() if ppid == p]
    return found


def _alive(procs: set[tuple[int, str]], group: int) -> list[int]:
    table = _table()
    return sorted({p for p, start in procs if p in table and table[p][2] == start} |
                  {p for p, (_, pgid, _) in table.items() if pgid == group})


def _opened(pid: int, db: Path) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(db) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


class Runner:
    """Starts the CLI on one workspace, kills it, and checks what the kill left behind."""

    def __init__(self, ws: Path, config: Path, env: dict):
        self.ws, self.config, self.env = ws, config, env
        self.kills: list[str] = []

    def attempt(self, args: list[str], delay: float | None, keys: str = "") -> int | None:
        """Run `sftbuild ARGS`; with a delay, kill -9 it that long after it opened the workspace.
        Returns the exit code, or None when it was killed."""
        cmd = CLI + args + ["-q", "-w", str(self.ws), "-c", str(self.config)]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=self.env, cwd=self.ws.parent, start_new_session=True)
        if keys:
            p.stdin.write(keys.encode())
        p.stdin.close()
        if delay is None:
            err = p.stderr.read().decode()
            rc = p.wait(timeout=300)
            assert rc == 0 and "Traceback" not in err, (args, rc, err)
            return rc
        db = self.ws / "sftbuild.db"
        deadline = time.monotonic() + 120
        while p.poll() is None and not _opened(p.pid, db) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(delay)
        if p.poll() is not None:  # finished first: that is a completed run, not a kill
            err = p.stderr.read().decode()
            assert p.returncode == 0 and "Traceback" not in err, (args, err)
            return p.returncode
        procs = _descendants(p.pid)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        p.stderr.close()
        end = time.monotonic() + 5
        while _alive(procs, p.pid) and time.monotonic() < end:
            time.sleep(0.05)
        left = _alive(procs, p.pid)
        assert not left, f"{args}: processes {left} outlived the kill -9 of {p.pid} by 5 s"
        self.kills.append(" ".join(args[:2]) if args[0] == "review" else args[0])
        return None

    def killed_then_finished(self, args: list[str], kills: int = 3, keys: str = "", after_kill=None,
                             delays=DELAYS) -> None:
        """Kill `sftbuild ARGS` `kills` times at growing delays (shorter again after an attempt that
        finished before its kill), then let it run to the end."""
        done, i, tries = 0, 0, 0
        while done < kills and tries < 3 * kills:
            tries += 1
            if self.attempt(args, delays[i], keys) is None:
                done += 1
                i = min(i + 1, len(delays) - 1)
                if after_kill:
                    after_kill()
            else:
                i = 0
        self.attempt(args, None, keys)


def _env() -> dict:
    env = dict(os.environ)  # its PYTHONPATH leads with the repository (tests/conftest.py)
    env.pop("SFTBUILD_COMPILE_CACHE", None)
    return env


# ---- invariants ------------------------------------------------------------------------------------------
def _complete(store: Store, stages: list[str]) -> None:
    """Every record alive before each stage has its result under the stage's current config."""
    for stage in stages:
        chash = store.stage_config(stage)
        assert chash, f"{stage} never ran"
        alive = {r.id for r in store.alive(stage)}
        done = store.done_ids(stage, chash, statuses=("ok", "dropped", "waiting"))
        assert alive and alive <= done, f"{stage}: {len(alive - done)} of {len(alive)} results lost"


def _corpus(root: Path, n: int) -> Path:
    d = root / "corpus"
    for i in range(n):
        sub = d / f"part{i % 7}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"k{i}.cu").write_text(
            f"// SPDX-License-Identifier: MIT\n"
            f"__global__ void scale_{i}(float* y, const float* x, int n) {{\n"
            f"  int j = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"  if (j < n) y[j] = x[j] * {i}.5f;\n}}\n")
    return d


@pytest.mark.slow
def test_kill9_in_every_stage_loses_nothing_and_leaves_no_process(tmp_path):
    env = _env()
    kills: list[str] = []

    # harvest, bind, describe, validate on a generated corpus
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvcc: error: this toolchain builds nothing' >&2\nexit 1\n")
    nvcc.chmod(0o755)
    cfg = tmp_path / "corpus.yaml"
    cfg.write_text(f"executor: {{cpu_workers: 2, gpus: none}}\nvalidate: {{nvcc: {nvcc}}}\n")
    n = 240
    corpus = _corpus(tmp_path, n)
    run = Runner(tmp_path / "ws", cfg, env)
    run.killed_then_finished(["harvest", str(corpus)], kills=4)
    run.killed_then_finished(["bind"])
    run.killed_then_finished(["describe"])
    run.killed_then_finished(["validate"])
    kills += run.kills
    store = Store(tmp_path / "ws")
    try:
        ids = [r.id for r in store.records()]
        assert len(ids) == len(set(ids)) == n
        _complete(store, ["harvest", "bind", "describe", "validate"])
        validated = {r.id for r in store.alive("validate")}
        for rid in validated:
            logged = [v for v in store.verdicts(rid) if v["stage"] == "validate"]
            assert len(logged) == 1, f"{rid}: {len(logged)} validate verdicts"
        last = {m["stage"]: m for m in store.manifests()}  # each stage's latest run: the one that finished the work
        assert all(last[st]["finished"] for st in ("harvest", "bind", "describe", "validate")), last
        # the killed runs' manifests: marked interrupted by the run that took the workspace lock after them
        assert all(m["finished"] or m["stats"]["interrupted"] for m in store.manifests())
        assert store.runs() == {"holder": None, "running": [], "interrupted": []}
    finally:
        store.close()

    # dedupe, review (sample and verdicts) and export on records validated as on a GPU
    ws2 = tmp_path / "ws2"
    fixture.build(ws2)
    cfg2 = tmp_path / "review.yaml"
    cfg2.write_text("executor: {cpu_workers: 1, gpus: none}\nreview: {fraction: 1.0}\n"
                    "export: {interpreter_only: split}\n")
    run2 = Runner(ws2, cfg2, env)
    run2.killed_then_finished(["dedupe"])
    run2.killed_then_finished(["review", "sample"])
    seen: set[tuple[str, str]] = set()

    def no_verdict_lost():
        s = Store(ws2)
        try:
            now = {(r["record_id"], r["verdict"]) for r in s.review_rows() if r["verdict"]}
        finally:
            s.close()
        assert seen <= now, f"verdicts lost: {seen - now}"
        seen.update(now)

    s = Store(ws2)
    sampled = len(s.review_rows())
    s.close()
    keys = "a" * (sampled + 2) + "q"
    run2.killed_then_finished(["review", "next", "--reviewer", "ann"], kills=4, keys=keys,
                              after_kill=no_verdict_lost, delays=(0.05, 0.3, 0.6, 1.0))
    no_verdict_lost()
    run2.killed_then_finished(["export"])
    kills += run2.kills

    s = Store(ws2)
    try:
        rows = s.review_rows()
        assert rows and all(r["verdict"] == "accept" for r in rows)
        per = {}
        for entry in s.review_log():
            per[(entry["record_id"], entry["reviewer"])] = per.get((entry["record_id"], entry["reviewer"]), 0) + 1
        assert set(per.values()) == {1}, "a verdict was logged twice"
        _complete(s, ["dedupe", "review", "export"])
        exported = s.done_ids("export", s.stage_config("export"), statuses=("ok",))
    finally:
        s.close()
    out = ws2 / "export"
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["records"] == len(exported) > 0
    lines = [line for f in sorted(out.glob("jsonl/sft_messages/*.jsonl")) for line in f.read_text().splitlines()]
    assert {json.loads(line)["id"] for line in lines} == exported
    assert len(lines) == len(set(lines)), "an export row was written twice"
    assert not [p.name for p in ws2.iterdir() if p.name.startswith((".export", "export.old"))]

    print(f"kill -9 x{len(kills)}: " + ", ".join(f"{c} x{kills.count(c)}" for c in dict.fromkeys(kills)))
    assert len(kills) >= 20 and {"harvest", "bind", "describe", "validate", "dedupe", "review sample",
                                 "review next", "export"} <= set(kills)
