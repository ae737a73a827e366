"""`pip:NAME==VERSION` with no network: pip reads a local find-links folder (`--no-index`) holding a
tiny wheel built here, from the default, relative workspace; a version the folder lacks is pip's
own reason, never blamed on the network."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from sftbuild.cli import main
from sftbuild.store import Store

DATA = Path(__file__).parents[1] / "data" / "harvest"


def _wheel(folder: Path) -> None:
    folder.mkdir()
    dist = "tinyk-0.1.0.dist-info"
    with zipfile.ZipFile(folder / "tinyk-0.1.0-py3-none-any.whl", "w") as z:
        z.writestr("tinyk/ops.py", (DATA / "triton_src" / "ops.py").read_text())
        z.writestr(f"{dist}/METADATA", "Metadata-Version: 2.1\nName: tinyk\nVersion: 0.1.0\nLicense: MIT\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")


@pytest.fixture
def offline_pip(tmp_path, monkeypatch):
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode:
        pytest.skip("this Python has no pip")
    _wheel(tmp_path / "wheels")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # no machine-wide index or links
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    (tmp_path / "c.yaml").write_text("executor: {cpu_workers: 1, gpus: none}\n")
    monkeypatch.chdir(tmp_path)


def test_pip_source_with_the_default_relative_workspace(tmp_path, offline_pip):
    r = CliRunner().invoke(main, ["harvest", "-q", "-c", "c.yaml", "pip:tinyk==0.1.0"])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    store = Store(tmp_path / "sftbuild-work")
    try:
        recs = list(store.records())
        assert recs and {x.provenance["package"] for x in recs} == {"tinyk"}
    finally:
        store.close()


def test_a_version_the_index_lacks_is_pips_reason_not_the_network(tmp_path, offline_pip):
    r = CliRunner().invoke(main, ["harvest", "-q", "-c", "c.yaml", "pip:tinyk==9.9.9"])
    assert r.exit_code != 0 and "Traceback" not in r.output, r.output
    (said,) = [ln for ln in r.output.splitlines() if ln.startswith("harvest: source pip:tinyk==9.9.9:")]
    assert "no such package or version" in said and "tinyk==9.9.9" in said and "network" not in said, said
