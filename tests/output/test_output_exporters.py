"""Exporters as plug-ins: export.formats selects them by name; each writes its files atomically."""
from __future__ import annotations

import json

import pytest

from sftbuild.context import UserError
from sftbuild.output import stage
from sftbuild.output.exporters import EXPORTERS, Batch, Sample
from sftbuild.record import Record
from sftbuild.store import Store
from tests.core.test_cli import _pipeline_store, invoke


def test_formats_name_registered_exporters():
    assert set(EXPORTERS.names()) == {"sft", "chat", "rlvr", "card"}
    assert [e.name for e in stage.selected(["card", "rlvr", "sft", "sft"])] == ["sft", "rlvr", "card"]
    with pytest.raises(UserError, match=r"export\.formats: unknown exporter 'jsonl' \(known: .*sft"):
        stage.selected(["sft", "jsonl"])


def test_each_exporter_writes_its_files(tmp_path):
    store = Store(tmp_path / "ws")
    rec = Record(language="cuda", code="__global__ void k(float* x) { x[0] = 1; }\n", source="src",
                 entry={"kernels": ["k"]}, binding={"op": "relu"}, provenance={"license": "MIT"})
    store.add_records([rec])
    batch = Batch([Sample(rec, {"zh:brief": "实现", "en:detailed": "Write k."},
                          {"timing": {"fp32": {"eager_ms": {"median": 0.5}}}})], store)
    out = {name: EXPORTERS.create(name).write(batch, tmp_path) for name in EXPORTERS.names()}
    assert out["sft"] == {"sft.jsonl": 2} and out["chat"] == {"chat.jsonl": 2}
    assert out["rlvr"] == {"rlvr_trl.jsonl": 1, "rlvr_verl.parquet": 1}
    sft = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["variant"] for r in sft] == ["en:detailed", "zh:brief"] and sft[0]["output"] == rec.code
    trl = json.loads((tmp_path / "rlvr_trl.jsonl").read_text())
    assert trl["prompt"] == "Write k." and json.loads(trl["task"])["baseline_ms"] == {"fp32": 0.5}
    assert "## Funnel" in (tmp_path / "README.md").read_text()
    assert not list(tmp_path.glob("*.tmp"))
    store.close()


def test_export_writes_only_the_selected_formats(tmp_path):
    ws = str(tmp_path / "ws")
    _pipeline_store(ws)
    assert invoke("review", "sample", "-q", "-w", ws).exit_code == 0
    s = Store(ws)
    sampled = [row["record_id"] for row in s.review_rows()]
    s.close()
    for rid in sampled:
        assert invoke("review", "verdict", rid, "accept", "--reviewer", "r", "-w", ws).exit_code == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("export: {formats: [sft, parquet]}\n")
    r = invoke("export", "-q", "-w", ws, "-c", str(bad))
    assert r.exit_code != 0 and "export.formats" in r.output and "Traceback" not in r.output
    good = tmp_path / "good.yaml"
    good.write_text("export: {formats: [sft]}\n")
    r = invoke("export", "-q", "-w", ws, "-c", str(good))
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "ws" / "export").iterdir()) == ["sft.jsonl"]
