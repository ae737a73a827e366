"""`sftbuild run` on the built-in default: no config, no network."""
import json
import os

import pytest
from click.testing import CliRunner

from sftbuild.cli import main
from sftbuild.store import Store
from tests.conftest import HAS_GPU, HAS_NVCC


@pytest.mark.skipif(not HAS_NVCC, reason="needs nvcc")
def test_run_on_the_default_sources(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["run", "-q"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "records:" in r.output and "validate" in r.output
    s = Store(tmp_path / "sftbuild-work")
    f = s.funnel()
    assert f["records"] >= 30
    v = f["stages"]["validate"]
    if not HAS_GPU:
        assert v["waiting"].get("needs_gpu", 0) >= 1  # the bound softmax kernel waits, it does not fail
    prov = next(s.records()).provenance
    assert prov["license"] == "BSD-3-Clause" and prov["package"] == "torch" and prov["lines"][0] >= 1
    runs = {m["stage"] for m in s.manifests()}
    assert {"harvest", "describe", "validate", "dedupe", "review"} <= runs
    assert all(m["env"].get("torch") for m in s.manifests())
    # a rerun does no new work and duplicates nothing
    r2 = CliRunner().invoke(main, ["run", "-q"], catch_exceptions=False)
    assert r2.exit_code == 0
    assert Store(tmp_path / "sftbuild-work").funnel() == f
    st = CliRunner().invoke(main, ["status", "--json"], catch_exceptions=False)
    assert json.loads(st.output)["records"] == f["records"]
