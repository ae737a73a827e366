"""The red-team set end to end.

CPU: Triton cases run through the real pipeline with the Triton interpreter in a sandbox
process, for fp32 and fp16 only (the interpreter's bf16 arithmetic is silently wrong, so a
bf16 verdict there would mean nothing). GPU: every case, printing case -> expected -> got.
Run on a GPU machine with:  pytest -m gpu -s -n 0 tests/validate/test_validate_redteam.py
(SFTBUILD_REDTEAM=name,name,... runs only those cases on the GPU).
"""
import dataclasses
import os

import pytest

from sftbuild.config import ValidateConfig
from sftbuild.executor import LocalExecutor
from sftbuild.record import Record
from sftbuild.validate import pipeline
from tests.redteam.cases import cases


def _run(selected, cfg, gpus, cache, cpu_workers=0):
    """Each case's verdict; `cpu_workers` 0 (every core) runs the compile gates as the validate stage
    does, 1 runs them in this process and the interpreter runs one case at a time (on 2 cores, where
    the other test processes fill the second, that costs the least CPU: one interpreter worker, no pool)."""
    recs = {Record(source="redteam", **c.record).id: c for c in selected}
    got = {}
    with LocalExecutor(cpu_workers=cpu_workers, gpus=gpus, progress=False) as ex:
        for rec, status, reason, payload in pipeline.validate(
                [Record(source="redteam", **c.record) for c in selected], cfg, ex, cache):
            got[recs[rec.id].name] = (status, reason, str(payload.get("detail") or payload.get("why") or "")[:120])
    return got


def _table(selected, got) -> list[str]:
    rows, escapes = [f"{'case':28} {'expected':34} got"], []
    for c in selected:
        status, reason, detail = got.get(c.name, ("missing", None, ""))
        outcome = "ok" if status == "ok" else reason
        rows.append(f"{c.name:28} {'|'.join(c.expect):34} {outcome}  {detail}")
        if outcome not in c.expect:
            escapes.append(c.name)
    print("\n".join(rows))
    return escapes


def test_triton_redteam_in_the_interpreter(tmp_path, monkeypatch):
    selected = [c for c in cases() if c.cpu]
    cfg = ValidateConfig(shapes=2, seeds=1, sample_timeout=120, memcheck="off", timing=False)
    # the interpreter runs each program in Python: shapes of a million elements take tens of seconds
    # and decide nothing that the pool's small awkward sizes (1, 7, 31, 4097, ...) do not
    gpu_task = pipeline.gpu_task
    monkeypatch.setattr(pipeline, "gpu_task", lambda *a: dataclasses.replace(gpu_task(*a), max_numel=1 << 16))
    got = _run(selected, cfg, "none", str(tmp_path), cpu_workers=1)
    assert _table(selected, got) == []


def _named(pool):
    """The cases SFTBUILD_REDTEAM names (comma-separated), or every one."""
    names = [n.strip() for n in os.environ.get("SFTBUILD_REDTEAM", "").split(",") if n.strip()]
    unknown = set(names) - {c.name for c in pool}
    assert not unknown, f"SFTBUILD_REDTEAM names no case {sorted(unknown)}"
    return [c for c in pool if c.name in names] if names else pool


@pytest.mark.gpu
def test_redteam_on_gpu(tmp_path):
    selected = _named(cases())
    cfg = ValidateConfig(sample_timeout=60, memcheck="off", runs=20, warmup=3)
    got = _run(selected, cfg, "auto", str(tmp_path))
    assert _table(selected, got) == []


@pytest.mark.gpu
def test_memcheck_catches_what_comparison_may_miss(tmp_path):
    # the shared-memory twins pass racecheck and synccheck too; the guard trips get memcheck's message
    selected = [c for c in cases() if c.name in ("twin_relu_cuda", "illegal_address", "missing_syncthreads",
                                                 "twin_rowsum_cuda", "twin_matmul_cuda", "oob_read_cuda",
                                                 "oob_write_cuda")]
    cfg = dataclasses.replace(ValidateConfig(), memcheck="all", sample_timeout=400, timing=False)
    got = _run(selected, cfg, "auto", str(tmp_path))
    assert _table(selected, got) == []
