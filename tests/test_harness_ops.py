"""Harness templates around known-good kernels: bound by inference, compiled with nvcc, run on a GPU.

CPU: every harness renders and compiles (nvcc -shared). GPU (marked gpu): each record goes
through validate's trial loop and must come out correct.
"""
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from sftbuild.ops import bind
from sftbuild.record import Record
from sftbuild.validate import compile as C
from sftbuild.validate import harness as H

DATA = Path(__file__).parent / "data" / "ops"
EXPECTED = {"relu_kernel": "relu", "silu_kernel": "silu", "sigmoid_kernel": "sigmoid", "tanh_kernel": "tanh",
            "exp_kernel": "exp", "gelu_kernel": "gelu", "neg_kernel": "neg", "add_kernel": "add",
            "mul_kernel": "mul", "max_kernel": "maximum", "softmax_kernel": "softmax",
            "log_softmax_kernel": "log_softmax", "row_sum_kernel": "row_sum"}
NVCC = shutil.which("nvcc") or "/usr/local/bin/nvcc"
needs_nvcc = pytest.mark.skipif(not Path(NVCC).exists(), reason="nvcc not installed")


def records() -> list[Record]:
    out = []
    for path in sorted(DATA.glob("*.cu")):
        code = path.read_text()
        for m in re.finditer(r"__global__\s+void\s+(\w+)\s*\(([^)]*)\)", code):
            params = [p.strip() for p in m.group(2).split(",")]
            # one record per kernel: a trailing comment keeps their ids apart
            out.append(Record(language="cuda", code=f"{code}\n// entry: {m.group(1)}\n", source="test",
                              entry={"kernels": [m.group(1)], "params": params, "include_sets": []},
                              provenance={"path": path.name}))
    return out


def bound() -> list[Record]:
    recs = records()
    for r in recs:
        r.binding = bind.infer(r)
    return recs


def test_inference_binds_every_known_kernel():
    recs = bound()
    assert {r.name for r in recs} == set(EXPECTED)
    for r in recs:
        assert r.binding and r.binding["how"] == "inferred", r.name
        assert r.binding["op"] == EXPECTED[r.name], (r.name, r.binding["op"])
        assert r.binding["dtypes"] == ["float32"], r.name  # float* params only


def _compile(rec, cache):
    srcs = [H.render(rec, check, rec.binding["dtypes"]) for check in H.checks(rec.binding)]
    return [C.compile_task({"id": rec.id, "code": rec.code, "harness": src, "include_sets": [], "arch": "sm_90",
                            "timeout": 300, "nvcc": NVCC, "cache_dir": str(cache)}) for src in srcs]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    cache = Path("/tmp/sftbuild-test-harness-cache")  # keyed by code hash, so reuse across runs is safe
    cache.mkdir(exist_ok=True)
    recs = bound()
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda r: _compile(r, cache), recs))
    return list(zip(recs, results))


@needs_nvcc
def test_every_harness_compiles(compiled):
    for rec, results in compiled:
        for res in results:
            assert res["ok"], (rec.name, res.get("log", "")[-2000:])
            assert res["so"] and Path(res["so"]).exists()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_known_good_kernels_pass_trials(compiled):
    from sftbuild.validate import trials

    assert len(compiled) >= 10
    for rec, results in compiled:
        task = {"id": rec.id, "sos": [r["so"] for r in results], "binding": rec.binding, "entry": rec.entry,
                "dtypes": rec.binding["dtypes"], "shapes": 4, "seeds": 2, "timing": False, "warmup": 1, "runs": 3}
        out = trials.run_record(task)
        assert out["status"] == "ok", (rec.name, out.get("reason"), out.get("detail"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_wrong_kernel_is_caught(compiled):
    from sftbuild.validate import trials

    rec, results = next((r, res) for r, res in compiled if r.name == "neg_kernel")
    wrong = {**rec.binding, "op": "relu"}  # a negation kernel bound to relu must fail
    task = {"id": rec.id, "sos": [r["so"] for r in results], "binding": wrong, "entry": rec.entry,
            "dtypes": ["float32"], "shapes": 2, "seeds": 1, "timing": False, "warmup": 1, "runs": 3}
    assert trials.run_record(task)["status"] == "dropped"
