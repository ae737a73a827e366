"""`sftbuild run` end to end, no config, no network: on small checked-in sources (seconds), and on
the built-in default (torch's ATen kernels: some 70 builds against torch's headers, a sweep that
.ci/gpu-tests runs; on the CPU CI the slow tests build representatives of those ATen kernels and
harnesses, and the small run here covers every stage, the rerun and the waiting for a GPU)."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from sftbuild.cli import main
from sftbuild.store import Store

DATA = Path(__file__).parents[1] / "data"
STAGES = {"harvest", "bind", "describe", "validate", "dedupe", "review"}


def _run_twice(*sources) -> dict:
    """`sftbuild run` in the current folder, then a rerun that must do no new work; the funnel."""
    r = CliRunner().invoke(main, ["run", "-q", *sources], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "records:" in r.output and "validate" in r.output
    # dedupe's summary once (validate's first step clustered the records), its report a file, not a dump
    said = [ln for ln in r.output.splitlines() if ln.startswith("dedupe (") and "clusters of near" in ln]
    assert len(said) == 1 and "  params:" not in r.output and "config_hash=" not in r.output, r.output
    f = Store("sftbuild-work").funnel()
    r2 = CliRunner().invoke(main, ["run", "-q", *sources], catch_exceptions=False)
    assert r2.exit_code == 0, r2.output
    assert Store("sftbuild-work").funnel() == f
    st = CliRunner().invoke(main, ["status", "--json"], catch_exceptions=False)
    assert json.loads(st.output)["records"] == f["records"]
    return f


@pytest.mark.nvcc
def test_run_on_small_sources(tmp_path, monkeypatch):
    """Three op kernels that bind by inference: no torch headers, so quick builds."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops").mkdir()
    shutil.copy(DATA / "ops" / "rowwise.cu", tmp_path / "ops")
    f = _run_twice("ops")
    assert f["records"] == f["by_source"]["ops"]["records"] == 3
    ops_validate = f["by_source"]["ops"]["stages"]["validate"]
    # softmax and log_softmax share most of their code: validate checks one, and the other waits behind it
    # as a duplicate (dedupe after validation would keep one of the two)
    if torch.cuda.is_available():
        assert ops_validate["waiting"] in ({}, {"duplicate": 1})  # each has its verdict, or stands behind one
    else:
        assert ops_validate["waiting"] == {"needs_gpu": 2, "duplicate": 1}  # bound kernels wait for a GPU
    s = Store(tmp_path / "sftbuild-work")
    assert STAGES <= {m["stage"] for m in s.manifests()}
    assert all(m["env"].get("torch") for m in s.manifests())
    prov = next(r for r in s.records() if r.source == "ops").provenance
    assert prov["path"] == "rowwise.cu" and prov["lines"][0] >= 1


@pytest.mark.sweep
@pytest.mark.nvcc
def test_run_on_the_default_sources(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # no index here: the packages are left out
    (tmp_path / "sftbuild.yaml").write_text("harvest: {programs: 12}\n")  # with a GPU, a slice of the catalog
    f = _run_twice()
    assert f["records"] >= 30
    v = f["stages"]["validate"]
    if not torch.cuda.is_available():
        assert v["waiting"].get("needs_gpu", 0) >= 1  # the bound softmax kernel waits, it does not fail
        assert set(f["by_source"]) == {"torch-aten"}
    else:
        assert {"torch-aten", "torch-inductor"} <= set(f["by_source"])
    s = Store(tmp_path / "sftbuild-work")
    prov = next(s.records()).provenance
    assert prov["license"] == "BSD-3-Clause" and prov["package"] == "torch" and prov["lines"][0] >= 1
    assert STAGES <= {m["stage"] for m in s.manifests()}
    assert all(m["env"].get("torch") for m in s.manifests())
