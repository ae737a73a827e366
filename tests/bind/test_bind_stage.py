"""Bindings as typed, keyed results: the bind stage, the store's bindings table, revalidation on
a changed binding, re-harvest after a registry change, a probing binder through the sandbox,
`sftbuild bindings`, and a workspace written before bindings had their own table."""
from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from sftbuild import config as C
from sftbuild import stages
from sftbuild.binding import Binding, key_of
from sftbuild.cli import main
from sftbuild.bind import binders as B
from sftbuild.record import Record
from sftbuild.store import Store
from tests.redteam.cases import TRITON_RELU

DATA = Path(__file__).parents[1] / "data" / "harvest"


def run(ctx, stage, **kw):
    return stages.module(stage).run(ctx, **kw)


def registry(path: Path, folder: Path, bindings: list[dict] | None = None, name: str = "mine",
             include: str = "*.cu") -> str:
    """A registry file with one dir source, optionally declaring bindings."""
    rows = "".join(f"      - {json.dumps(b)}\n" for b in bindings or [])
    path.write_text(f"sources:\n  - name: {name}\n    kind: dir\n    location: {folder}\n"
                    f"    license: MIT\n    include: ['{include}']\n"
                    + (f"    bindings:\n{rows}" if rows else ""))
    return str(path)


def by_name(ctx, name):
    return next(r for r in ctx.store.records() if r.name == name)


# ---- the type ---------------------------------------------------------------------------------
def test_binding_reads_legacy_dicts_and_keys_what_validate_checks():
    legacy = {"kind": "op", "op": "softmax", "how": "manifest", "params": {"dim": -1},
              "harness": "generic_launch", "harness_args": {"grid": "rows"}, "dtypes": ["float32"]}
    b = Binding.from_dict(legacy)
    assert (b.kind, b.target, b.how, b.by) == ("op", "softmax", "declared", "manifest")
    d = b.to_dict()
    # the dict validate reads: today's keys, plus by, key
    assert {k: d[k] for k in legacy if k != "how"} == {k: v for k, v in legacy.items() if k != "how"}
    assert d["how"] == "declared" and d["key"] == b.key and Binding.from_dict(d) == b
    assert Binding.from_dict({**d, "evidence": {"worst_error": 1e-7}}).key == b.key  # evidence is no check
    assert Binding.from_dict({**d, "params": {"dim": 0}}).key != b.key
    assert Binding.from_dict({**d, "how": "probed"}).key == b.key
    inductor = {"kind": "inductor", "how": "exact", "program": "p.py", "reference": "class Model: ..."}
    assert {k: Binding.from_dict(inductor).to_dict()[k] for k in inductor} == inductor
    assert Binding.from_dict({"op": "relu", "how": "inferred"}).how == "inferred"
    assert Binding.from_dict({"op": "relu", "how": "by_name"}).by == "by_name"  # a binder's name: kept as `by`
    with pytest.raises(ValueError, match="no op"):
        Binding.from_dict({"kind": "op"})
    assert key_of(None) == "" and key_of(b) == b.key


# ---- the stage ----------------------------------------------------------------------------------
def test_bind_stage_binds_what_it_can_says_why_not_and_resumes(ctx, tmp_path):
    run(ctx, "harvest", sources=[registry(tmp_path / "r.yaml", DATA / "cuda_tree", [{"kernel": "scale_kernel",
                                                                                       "op": "mul"}],
                                          include="*.cu*")])
    stats = run(ctx, "bind")
    assert stats["bound"]["inferred"] >= 1 and stats["unbound"] >= 1
    # the summary counts the records handled, each either bound or unbound (no `ok=` beside `unbound=`), the
    # bound ones by how, as `sftbuild status` names them
    assert stats["bound"]["declared"] == 1 and set(stats["bound"]) == set(ctx.store.funnel()["bindings"]["bound"])
    assert "ok" not in stats and stats["records"] == sum(stats["bound"].values()) + \
        stats["unbound"] == len(ctx.store.alive("bind"))
    sq = by_name(ctx, "square_kernel")
    assert sq.binding.how == "inferred" and sq.binding.by == "inferred" and sq.binding.op == "square"
    assert ctx.store.binding(sq.id) == sq.binding
    declared = by_name(ctx, "scale_kernel")  # the source declared it: bind leaves it alone
    assert declared.binding.how == "declared" and declared.binding.op == "mul"
    assert ctx.store.binding_row(declared.id)["origin"] == "harvest"
    pair = by_name(ctx, "pair_kernel")
    assert pair.binding is None and pair.unbound.startswith("no binder found a binding")
    assert "inferred" in ctx.store.binding_row(pair.id)["reason"]
    cause = ctx.store.binding_row(pair.id)["evidence"]["cause"]  # a code, counted by `status`'s blockers
    assert cause in B.CAUSES and ctx.store.funnel()["unbound_causes"][cause] >= 1
    assert {r.id for r in ctx.store.alive("describe")} >= {sq.id, pair.id, declared.id}  # unbound moves on
    again = run(ctx, "bind")
    assert again == {}  # resumed: nothing left to do
    # turning the binder off is a new key: the record is rebound, now unbound
    ctx.config.bind.binders = {"inferred": False}
    run(ctx, "bind")
    assert by_name(ctx, "square_kernel").binding is None
    assert by_name(ctx, "scale_kernel").binding.op == "mul"
    funnel = ctx.store.funnel()
    assert funnel["bindings"]["bound"] == {"declared": 1} and "bind" in funnel["stages"]


def test_config_key_moved_to_bind(tmp_path):
    with pytest.raises(C.ConfigError, match=r"describe\.binders: unknown key; it moved to bind\.binders"):
        C.from_dict({"describe": {"binders": {"inferred": False}}})
    assert C.from_dict({"bind": {"binders": {"inferred": False}}}).bind.binders == {"inferred": False}


# ---- re-harvest ---------------------------------------------------------------------------------
def test_reharvest_after_a_registry_change_updates_the_binding_and_redescribes(ctx, tmp_path):
    reg = tmp_path / "r.yaml"
    run(ctx, "harvest", sources=[registry(reg, DATA / "cuda_tree", [{"kernel": "square_kernel", "op": "abs"}])])
    run(ctx, "bind")
    run(ctx, "describe")
    sq = by_name(ctx, "square_kernel")
    assert sq.binding.op == "abs" and sq.id in ctx.store.done_ids("describe", ctx.store.stage_config("describe"))
    first = ctx.store.result(sq.id, "describe")["payload"]["instructions"]
    # the registry now says square: harvest replaces the declared binding, describe redoes that record only
    run(ctx, "harvest", sources=[registry(reg, DATA / "cuda_tree", [{"kernel": "square_kernel", "op": "square"}])])
    sq2 = by_name(ctx, "square_kernel")
    assert sq2.binding.op == "square" and sq2.binding.key != sq.binding.key
    assert sq.id not in ctx.store.done_ids("describe", ctx.store.stage_config("describe"))
    assert ctx.store.funnel()["stages"]["describe"]["waiting"] == {"binding_changed": 1}
    run(ctx, "bind")
    stats = run(ctx, "describe")
    assert sum(v for k, v in stats.items() if k == "ok" or k.startswith("dropped")) == 1
    assert ctx.store.result(sq.id, "describe")["payload"]["instructions"] != first


def test_a_second_source_declaring_a_binding_for_stored_code_is_kept(ctx, tmp_path):
    run(ctx, "harvest", sources=[registry(tmp_path / "a.yaml", DATA / "cuda_tree", name="plain")])
    assert by_name(ctx, "pair_kernel").binding is None
    run(ctx, "harvest", sources=[registry(tmp_path / "b.yaml", DATA / "cuda_tree", [{"kernel": "pair_kernel",
                                                                                       "op": "neg"}],
                                          name="declares")])
    pair = by_name(ctx, "pair_kernel")
    assert pair.source == "plain" and pair.binding.op == "neg" and pair.binding.by == "source:declares"
    run(ctx, "harvest", sources=[registry(tmp_path / "a.yaml", DATA / "cuda_tree", name="plain")])
    assert by_name(ctx, "pair_kernel").binding.op == "neg"  # a source that declares nothing keeps it


# ---- revalidation: the real CPU path, the Triton interpreter ----------------------------------
def test_a_binding_added_later_is_validated_again(make_ctx, tmp_path, monkeypatch):
    from sftbuild.validate import pipeline

    gpu_task = pipeline.gpu_task  # small shapes: the interpreter runs each program in Python
    monkeypatch.setattr(pipeline, "gpu_task", lambda *a: dataclasses.replace(gpu_task(*a), max_numel=1 << 12))
    cfg = C.Config()
    cfg.validate.shapes, cfg.validate.seeds, cfg.validate.timing, cfg.validate.memcheck = 2, 1, False, "off"
    cfg.bind.binders = {"probed": False}  # the registry, not the probe, supplies the binding here
    ctx = make_ctx(gpus="none", config=cfg)
    src = tmp_path / "src"
    src.mkdir()
    (src / "relu.py").write_text(TRITON_RELU)
    reg = tmp_path / "r.yaml"
    for stage in stages.NAMES[:4]:
        run(ctx, stage, **({"sources": [registry(reg, src, include="*.py")]} if stage == "harvest" else {}))
    (rec,) = ctx.store.records()
    assert rec.binding is None and ctx.store.result(rec.id, "validate")["reason"] == "unbound"
    # the registry gains a binding: the same record is validated again, and the old verdict no longer counts
    run(ctx, "harvest", sources=[registry(reg, src, [{"kernel": "relu_kernel", "op": "relu"}], include="*.py")])
    for stage in ("bind", "describe", "validate"):
        run(ctx, stage)
    verdicts = [v["reason"] or v["verdict"] for v in ctx.store.verdicts(rec.id)]
    assert verdicts == ["unbound", "ok"], verdicts
    assert [r.id for r in ctx.store.alive("dedupe")] == [rec.id]
    assert run(ctx, "validate") == {}  # nothing left: the verdict is keyed on the current binding


# ---- a running binder ---------------------------------------------------------------------------
@pytest.fixture
def fake_probe(monkeypatch):
    # the sandboxed task imports tests.bind.fake_probe, whatever the working directory is
    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))

    @B.BINDERS.register
    class FakeProbe(B.Binder):
        """Probe Triton kernels by running them (a test strategy)."""
        name = "fake_probe"
        order = 80
        languages = ("triton",)
        task_fn = "tests.bind.fake_probe:probe"

        def plan(self, record):
            return {"code": record.code, "entry": record.name}

    yield FakeProbe
    B.BINDERS._members.pop("fake_probe")


def test_a_running_binder_probes_in_a_sandbox_and_keeps_its_evidence(make_ctx, fake_probe):
    ctx = make_ctx(gpus="none")  # the interpreter's probe, on a host with a GPU too
    decoy = TRITON_RELU.replace("tl.where(x > 0, x, 0.0)", "x * 2")
    recs = [Record(language="triton", code=code, source="t", entry={"kernels": ["relu_kernel"]})
            for code in (TRITON_RELU, decoy)]
    ctx.config.bind.binders = {"probed": False}  # only the test strategy runs
    ctx.store.add_records(recs)
    ctx.store.set_stage_config("harvest", "h", {})
    ctx.store.put_results([(r.id, "harvest", "h", "ok", None, None) for r in recs])
    stats = run(ctx, "bind")
    assert stats.get("bound") == {"probed": 1} and stats.get("unbound") == 1, [ctx.store.get(r.id).unbound for r in recs]
    good, bad = (ctx.store.get(r.id) for r in recs)
    assert good.binding.how == "probed" and good.binding.by == "fake_probe" and good.binding.op == "relu"
    assert good.binding.call["entry"] == "relu_kernel"  # the launch contract travels to validate
    ev = ctx.store.binding_row(good.id)["evidence"]
    assert ev["interpreter"] and ev["pid"] != __import__("os").getpid() and len(ev["dtypes"]) == 2
    assert bad.binding is None and "no candidate agreed" in bad.unbound
    assert ctx.store.binding_row(bad.id)["evidence"]["candidates_rejected"] == ["relu", "abs"]
    out = CliRunner().invoke(main, ["bindings", "-w", str(ctx.workspace)])
    assert out.exit_code == 0, out.output
    assert "probed" in out.output and "3 shapes; dtypes float32,float16; worst error 0" in out.output


# ---- the listing --------------------------------------------------------------------------------
def test_bindings_command_lists_how_evidence_and_reasons(ctx, tmp_path):
    run(ctx, "harvest", sources=[registry(tmp_path / "r.yaml", DATA / "cuda_tree", [{"kernel": "scale_kernel",
                                                                                       "op": "mul"}],
                                          include="*.cu*")])
    run(ctx, "bind")
    ws = str(ctx.workspace)
    out = CliRunner().invoke(main, ["bindings", "-w", ws])
    assert out.exit_code == 0, out.output
    lines = {ln.split()[1]: ln for ln in out.output.splitlines()}
    assert out.output.splitlines()[0].split()[:4] == ["id", "kernel", "target", "how"]
    assert "declared" in lines["scale_kernel"] and "mul" in lines["scale_kernel"]
    assert "inferred" in lines["square_kernel"] and "square" in lines["square_kernel"]
    assert "unbound" in lines["pair_kernel"] and "no binder found a binding" in lines["pair_kernel"]
    rows = [json.loads(ln) for ln in CliRunner().invoke(main, ["bindings", "-w", ws, "--how", "unbound",
                                                               "--json"]).output.splitlines()]
    assert rows and all(r["how"] == "unbound" and r["reason"] for r in rows)
    assert "pair_kernel" in {r["kernel"] for r in rows}
    none = CliRunner().invoke(main, ["bindings", "-w", ws, "--how", "package_reference"])
    assert none.output == "no binding: no record is bound as 'package_reference'\n"
    bad = CliRunner().invoke(main, ["bindings", "-w", ws, "--how", "guessed"])
    assert bad.exit_code != 0 and "expected one of" in bad.output and "Traceback" not in bad.output
    status = CliRunner().invoke(main, ["status", "-w", ws])
    assert "bind" in status.output and "bound: declared=1 inferred=" in status.output


# ---- migration ----------------------------------------------------------------------------------
OLD_SCHEMA = """
CREATE TABLE records (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, language TEXT NOT NULL, source TEXT NOT NULL,
    code TEXT NOT NULL, entry TEXT NOT NULL, binding TEXT, provenance TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE results (record_id TEXT NOT NULL REFERENCES records(id), stage TEXT NOT NULL,
    config_hash TEXT NOT NULL, status TEXT NOT NULL CHECK (status IN ('ok', 'dropped', 'waiting')), reason TEXT,
    payload TEXT NOT NULL DEFAULT '{}', updated REAL NOT NULL, PRIMARY KEY (record_id, stage, config_hash));
CREATE TABLE stage_state (stage TEXT PRIMARY KEY, config_hash TEXT NOT NULL, config TEXT NOT NULL,
    updated REAL NOT NULL);
"""


def test_an_old_workspace_with_the_binding_column_migrates(tmp_path):
    recs = [Record(language="cuda", code=f"__global__ void k{i}(float* y) {{ y[0] = {i}; }}\n", source="s",
                   entry={"kernels": [f"k{i}"]}) for i in range(3)]
    legacy = [{"kind": "op", "op": "relu", "how": "manifest"}, {"kind": "op", "op": "exp", "how": "inferred"}, None]
    db = sqlite3.connect(tmp_path / "sftbuild.db")
    db.executescript(OLD_SCHEMA)
    for i, (r, b) in enumerate(zip(recs, legacy)):
        db.execute("INSERT INTO records VALUES (?,?,?,?,?,?,?,?,?)",
                   (r.id, i, r.language, r.source, r.code, json.dumps(r.entry), b and json.dumps(b), "{}", 0.0))
        for st in ("harvest", "describe", "validate"):
            db.execute("INSERT INTO results VALUES (?,?,?,?,?,?,?)", (r.id, st, "c", "ok", None, "{}", 0.0))
    for st in ("harvest", "describe", "validate"):
        db.execute("INSERT INTO stage_state VALUES (?,?,?,?)", (st, "c", "{}", 0.0))
    db.commit()
    db.close()
    s = Store(tmp_path)
    got = {r.id: r for r in s.records()}
    assert got[recs[0].id].binding.how == "declared" and got[recs[0].id].binding.op == "relu"
    assert got[recs[1].id].binding.how == "inferred" and got[recs[2].id].binding is None
    assert s.binding_row(recs[0].id)["origin"] == "harvest" and s.binding_row(recs[1].id)["origin"] == "bind"
    # verdicts reached before the move still count: they were reached under these very bindings
    assert s.done_ids("validate", "c") == {r.id for r in recs}
    assert s.db.execute("SELECT COUNT(*) FROM records WHERE binding IS NOT NULL").fetchone()[0] == 0
    s.close()
    s = Store(tmp_path)  # opening again changes nothing
    assert s.done_ids("validate", "c") == {r.id for r in recs} and len(s.binding_rows()) == 2
    # a later binding change makes the old verdict stale
    s.put_binding(recs[1].id, Binding.from_dict({"op": "exp", "params": {"x": 1}, "how": "inferred"}))
    assert s.done_ids("validate", "c") == {recs[0].id, recs[2].id}
    s.close()


class _OneGpu:
    """An executor with one pretend GPU whose worker is this process (the task is our own test code)."""
    gpu_count = 1

    def __init__(self):
        self.seen = []

    def map_gpu(self, fn, items, timeout, desc="", per_gpu=1, unit="items"):
        for item in items:
            self.seen.append(item)
            yield item, fn(item)

    def close(self):
        pass


def test_with_a_gpu_running_binders_go_to_the_gpu_workers(make_ctx, fake_probe):
    from sftbuild.bind import stage

    recs = [Record(language=lang, code=TRITON_RELU + f"# {lang}\n", source="t", entry={"kernels": ["relu_kernel"]})
            for lang in ("triton", "cuda")]
    ex = _OneGpu()
    ctx = make_ctx(executor=ex)
    out = {r.name + r.language: (b, why) for r, b, why, _ in stage.bind(recs, [fake_probe()], ctx, "gpu")}
    assert [i["task"]["device"] for i in ex.seen] == ["cuda"]  # fake_probe binds Triton only
    assert out["relu_kerneltriton"][0].how == "probed" and out["relu_kerneltriton"][0].target == "relu"
    assert out["relu_kernelcuda"] == (None, "no binder handles cuda kernels")


def test_a_probe_ends_itself_before_its_workers_timeout():
    """A probe that runs out of time answers `unbound` itself: the executor's timeout would kill the
    worker, and with it the package the worker keeps imported for the next probe."""
    import types

    from sftbuild.bind import stage

    seen = []

    def map_gpu(fn, items, **kw):
        seen.extend(items)
        return [(item, {"unbound": "x"}) for item in items]

    ctx = types.SimpleNamespace(executor=types.SimpleNamespace(map_gpu=map_gpu, gpu_count=1),
                                config=types.SimpleNamespace(bind=types.SimpleNamespace(probe_workers_per_gpu=2)))
    rec = types.SimpleNamespace(language="triton")
    queued = [(rec, None, {"time_limit": 120}), (rec, None, {"time_limit": 5})]
    queued = [(r, types.SimpleNamespace(task_fn="m:f"), t) for r, _, t in queued]
    assert [n for n, _ in stage._run_tasks(queued, ctx, "gpu", 50)] == [0, 1]
    assert [i["task"]["time_limit"] for i in seen] == [40.0, 5]


def test_probe_workers_default_to_three_quarters_of_the_cores_per_gpu(monkeypatch):
    import os
    import types

    from sftbuild.bind.stage import probe_workers

    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert probe_workers(types.SimpleNamespace(probe_workers_per_gpu=0), 1) == 12
    assert probe_workers(types.SimpleNamespace(probe_workers_per_gpu=0), 8) == 1
    assert probe_workers(types.SimpleNamespace(probe_workers_per_gpu=5), 1) == 5  # set: kept
