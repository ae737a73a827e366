"""Exporters as plug-ins, the folder swap, the review bound and the legacy export count."""
from __future__ import annotations

import json

import pytest

from sftbuild import config as C
from sftbuild.context import UserError
from sftbuild.output import stage
from sftbuild.output.exporters import EXPORTERS
from sftbuild.review_gate import upper_bound

DEFAULTS = ["sft_messages", "sft_prompt_completion", "sft_alpaca", "rlvr_verl", "rlvr_trl", "card"]


def test_formats_name_registered_exporters():
    # every registered exporter runs unless export.formats selects some
    assert set(DEFAULTS) <= set(EXPORTERS.names()) and C.Config().export.formats == []
    assert sorted(e.name for e in stage.selected([])) == sorted(EXPORTERS.names())
    assert [e.name for e in stage.selected(["card", "rlvr_trl", "sft_messages", "sft_messages"])] == \
        ["sft_messages", "rlvr_trl", "card"]
    with pytest.raises(UserError, match=r"export\.formats: unknown exporter 'jsonl' \(known: .*sft_messages"):
        stage.selected(["sft_messages", "jsonl"])


def test_swap_replaces_the_folder_whole(tmp_path):
    target, new = tmp_path / "export", tmp_path / ".export.new"
    target.mkdir()
    (target / "old.txt").write_text("old")
    new.mkdir()
    (new / "new.txt").write_text("new")
    stage.swap(new, target)
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]
    fresh = tmp_path / ".other.new"
    fresh.mkdir()
    stage.swap(fresh, tmp_path / "other")  # no folder there yet: a plain rename
    assert (tmp_path / "other").is_dir() and not fresh.exists()


def test_clopper_pearson_upper_bound():
    # zero defects in n: 1 - alpha^(1/n); 59 clean reviews bound the rate at 5% with 95% confidence
    assert upper_bound(0, 59, 0.95) == pytest.approx(0.0495, abs=1e-3)
    assert upper_bound(1, 20, 0.95) == pytest.approx(0.2161, abs=1e-3)  # beta.ppf(.95, 2, 19)
    assert upper_bound(0, 0, 0.95) == 1.0


def test_previous_records_reads_the_manifest_or_a_legacy_export(tmp_path):
    assert stage.previous_records(tmp_path / "none") == 0
    (tmp_path / "sft.jsonl").write_text("".join(json.dumps({"id": i % 3}) + "\n" for i in range(12)))
    assert stage.previous_records(tmp_path) == 3
    (tmp_path / "export.json").write_text(json.dumps({"records": 25}))
    assert stage.previous_records(tmp_path) == 25


def test_out_dir_that_is_a_file_is_one_sentence(tmp_path):
    from tests.core.test_cli import _pipeline_store, invoke

    ws = str(tmp_path / "ws")
    _pipeline_store(ws, 4)
    (tmp_path / "afile").write_text("x")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"export: {{out_dir: {tmp_path / 'afile'}}}\n")
    invoke("review", "sample", "-q", "-w", ws)
    r = invoke("export", "-q", "-w", ws, "-c", str(cfg))
    assert r.exit_code != 0 and "Traceback" not in r.output


def test_an_export_set_aside_by_a_killed_swap_comes_back(tmp_path):
    from sftbuild.config import Config
    from sftbuild.context import Context
    from sftbuild.executor import LocalExecutor
    from sftbuild.store import Store

    aside = tmp_path / "ws" / "export.old"
    aside.mkdir(parents=True)
    (aside / "export.json").write_text(json.dumps({"records": 25}))
    ctx = Context(Store(tmp_path / "ws"), Config(), LocalExecutor(cpu_workers=1, progress=False))
    out = stage._out_dir(ctx)
    ctx.store.close()
    assert out == tmp_path / "ws" / "export" and stage.previous_records(out) == 25 and not aside.exists()


def test_card_header_names_the_one_licence_every_record_shares(tmp_path):
    from sftbuild.output.exporters import Batch
    from sftbuild.output.exporters.card import header
    from sftbuild.output.rows import Sample
    from sftbuild.store import Store
    from tests.output import fixture

    store = Store(tmp_path / "ws")
    mit = [Sample(r, {}, {}) for r in fixture.records()["cuda"]]
    batch = Batch(mit, store, configs={"sft_messages": {"train": {"path": "data/x.parquet", "rows": 2000}}})
    head = header(batch)
    assert head["license"] == "mit" and "license_name" not in head and head["size_categories"] == ["1K<n<10K"]
    mixed = Batch(mit + [Sample(r, {}, {}) for r in fixture.records()["inductor"]], store, configs=batch.configs)
    assert header(mixed)["license"] == "other" and header(mixed)["license_name"]
    store.close()


def test_every_binding_kind_counts_as_bound():
    from sftbuild.output.rows import bound
    from sftbuild.record import Record

    def rec(binding):
        return Record(language="cuda", code="__global__ void k() {}", source="t", binding=binding)

    assert bound(rec({"kind": "op", "op": "relu"})) and bound(rec({"kind": "kernelbench", "reference": "x"}))
    assert bound(rec({"kind": "program", "program": "scale.cu:scale_cpu", "how": "file_reference"}))
    assert not bound(rec(None))
