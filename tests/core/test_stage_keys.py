"""A stage's key holds what produced its results: plug-in names and versions, templates and tables, the
project's version; a change waits in `status` and reaches only the languages its plug-ins read."""
from __future__ import annotations

from sftbuild import producers as keys
from sftbuild.context import StageRun
from sftbuild.producers import changes, producers, reached, waiting
from sftbuild.describe.describers.atomics import Atomics
from sftbuild.bind.binders.inferred import Inferred
from sftbuild.record import LANGUAGES, Record
from sftbuild.trial.checks.output_type import OutputType
from sftbuild.validate.static.triton_launch import TritonLaunch


def test_the_key_holds_plugins_templates_tables_and_the_project_version(ctx, monkeypatch):
    made = producers("validate")
    assert made["plugins"]["runtime_check"]["output_type"] == [1, None]
    assert made["plugins"]["static_check"]["triton_launch"] == [1, ["kernelbench", "triton"]]
    assert {"trial/templates/generic_launch.cu.j2", "ops/tolerance.py"} <= set(made["files"])
    assert made["sftbuild"] and set(producers("describe")["files"]) >= {"describe/templates/en_brief.j2"}
    key = StageRun(ctx, "validate", {"a": 1}).chash
    assert StageRun(ctx, "validate", {"a": 1}).chash == key != StageRun(ctx, "validate", {"a": 2}).chash
    monkeypatch.setattr(OutputType, "version", 2)
    assert StageRun(ctx, "validate", {"a": 1}).chash != key
    monkeypatch.setattr(keys, "_version", lambda: "9.9")
    assert changes(made, producers("validate")) == [f"sftbuild {made['sftbuild']}→9.9", "runtime_check output_type v1→v2"]


def test_bind_and_describe_plugins_leave_validates_verdicts_standing(monkeypatch):
    """validate reads the binding (its results carry the binding's key) and none of describe's output."""
    before = producers("validate")
    monkeypatch.setattr(Atomics, "version", 2)
    monkeypatch.setattr(Inferred, "version", 2)
    assert producers("validate") == before
    assert changes(producers("describe"), producers("describe")) == []


def test_a_change_reaches_the_languages_its_plugins_read():
    old = producers("validate")
    bump = {**old, "plugins": {**old["plugins"], "static_check": {**old["plugins"]["static_check"],
                                                                   "triton_launch": [2, ["kernelbench", "triton"]]}}}
    assert reached(old, bump) == {"triton", "kernelbench"}
    assert changes(old, bump) == ["static_check triton_launch v1→v2"]
    assert reached(old, {**old, "files": {}}) == set(LANGUAGES) == reached(None, old)
    assert changes(None, old) == ["results stored before they were keyed to what produced them"]


def test_status_names_what_changed_and_a_workspace_from_before_keys_is_stale_not_broken(ctx, monkeypatch):
    rec = Record(language="triton", code="import triton\n", source="t", entry={"kernels": ["k"]})
    ctx.store.add_records([rec])
    with StageRun(ctx, "validate", {}) as run:
        run.put(rec.id, "ok")
    assert waiting(ctx.store) == []
    monkeypatch.setattr(TritonLaunch, "version", 3)
    assert waiting(ctx.store) == ["validate: 1 records wait: static_check triton_launch v1→v3"]
    monkeypatch.setattr(OutputType, "version", 2)  # a check of every language: the CUDA records too
    assert "runtime_check output_type v1→v2" in waiting(ctx.store)[0]
    ctx.store.db.execute("DELETE FROM stage_producers")  # as a workspace written before this table
    assert waiting(ctx.store) == ["validate: 1 records wait: results stored before they were keyed to what "
                                  "produced them"]
    with StageRun(ctx, "validate", {}) as run:  # its next run keys it and redoes the record
        assert run.done() == set()


def test_a_fresh_process_imports_no_plugin_to_learn_nothing_changed(make_ctx, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(keys, "_loaded", lambda stage: False)  # as in a fresh `sftbuild status`
    ctx = make_ctx("first")
    with StageRun(ctx, "validate", {}):  # reads the versions once, and caches them by fingerprint
        pass
    made = ctx.store.stage_producers("validate")
    assert made["fingerprint"] == keys.fingerprint("validate") and made["producers"] == producers("validate")
    monkeypatch.setattr(keys, "producers", lambda stage: 1 / 0)
    assert keys.stale(ctx.store, "validate") == (set(), [])
    assert StageRun(ctx, "validate", {}).producers == made["producers"]
    assert StageRun(make_ctx("another"), "validate", {}).producers == made["producers"]  # a new workspace
