"""GPU time goes to distinct work: dedupe before validation clusters near duplicates, validate checks one
record per cluster first and the next only when it is dropped; held-back records wait, lose nothing,
and are checked when the verdict they stand behind changes.

Validation is faked on the CPU (the checks themselves are tested elsewhere): `pipeline.validate` is
replaced by one that records what it was asked to check and drops code marked BROKEN.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sftbuild.binding import Binding
from sftbuild.dedupe import stage as dedupe
from sftbuild.dedupe.near import Doc as _Doc
from sftbuild.dedupe.near import validation_order
from sftbuild.record import Record
from sftbuild.trial import compile as C
from sftbuild.validate import pipeline
from sftbuild.validate import stage as validate
from sftbuild.validate.clusters import Rounds

KERNELS = Path(__file__).parents[1] / "data" / "dedupe" / "kernels"


def kernel(name: str) -> str:
    return (KERNELS / name).read_text()


def _record(code: str, op: str | None, how: str = "declared", **prov) -> Record:
    return Record(language="cuda", code=code, source="test", entry={"kernels": ["k"]},
                  binding={"kind": "op", "op": op, "how": how} if op else None,
                  provenance={"source_kind": "git", "license": "MIT", **prov})


def corpus() -> dict[str, Record]:
    """Two clusters of near duplicates, another sum kernel, and a loner."""
    s = kernel("sum__shared_tree.cu")
    sm = kernel("softmax__block_row.cu")
    return {
        # cluster of sum, in the order validate checks it: declared, probed, inferred binding
        "sum_declared": _record(s.replace("// Sum reduction", "// Sum, declared"), "sum", "declared"),
        "sum_inferred": _record(s, "sum", "probed"),
        "sum_renamed": _record(s.replace("cache", "smem").replace("partial", "out_part").replace("acc", "total"),
                               "sum", "inferred"),
        # another way to sum: distinct work
        "sum_shuffle": _record(kernel("sum__warp_shuffle.cu"), "sum", "declared"),
        # cluster of softmax: a copy whose comments differ (exact after normalisation)
        "softmax": _record(sm, "softmax", "declared", priority=1),
        "softmax_copy": _record(sm.replace("//", "// copy:"), "softmax", "declared"),
        "loner": _record(kernel("matmul__tiled.cu"), "matmul", "declared"),
    }


def _prepared(ctx, recs: dict[str, Record]) -> None:
    """The stages before validate, all ok."""
    ctx.store.add_records(recs.values())
    for st in ("harvest", "bind", "describe"):
        ctx.store.set_stage_config(st, "h", {})
        ctx.store.put_results([(r.id, st, "h", "ok", None, {}) for r in recs.values()])


class FakeValidator:
    """Stands in for pipeline.validate: ok on a GPU (needs_gpu without one), dropped for code marked BROKEN
    or ids in `fail`; remembers every batch; `stop_after` raises there, like a kill mid-run."""

    def __init__(self, gpu: bool = True, fail=(), stop_after: int | None = None):
        self.gpu, self.fail, self.stop_after = gpu, set(fail), stop_after
        self.batches: list[list[str]] = []
        self.seen = 0

    def __call__(self, records, cfg, executor, cache_dir, nvcc=""):
        self.batches.append([r.id for r in records])
        for r in records:
            if self.stop_after is not None and self.seen >= self.stop_after:
                raise KeyboardInterrupt("killed")
            self.seen += 1
            if not r.binding:
                yield r, "dropped", "unbound", {"detail": r.unbound or "no binder found a binding"}
            elif "BROKEN" in r.code or r.id in self.fail:
                yield r, "dropped", "incorrect", {"detail": "wrong values"}
            elif not self.gpu:
                yield r, "waiting", "needs_gpu", {}
            else:
                yield r, "ok", None, {"speedup": 1.0}

    @property
    def checked(self) -> list[str]:
        return [i for b in self.batches for i in b]


@pytest.fixture
def fake(monkeypatch):
    def install(**kw) -> FakeValidator:
        f = FakeValidator(**kw)
        monkeypatch.setattr(pipeline, "validate", f)
        return f

    monkeypatch.setattr(C, "find_nvcc", lambda configured="": "nvcc")
    return install


def _messages(make_ctx, recs):
    lines: list[str] = []
    ctx = make_ctx(gpus="none", echo=lines.append)
    _prepared(ctx, recs)
    return ctx, lines


def _validate(ctx) -> dict:
    return validate.run(ctx)


def _state(ctx, recs) -> dict[str, tuple]:
    res = ctx.store.results_for("validate")
    return {k: (res[r.id]["status"], res[r.id]["reason"]) for k, r in recs.items() if r.id in res}


# ---- the rule -----------------------------------------------------------------------------------
def test_validation_order_rule():
    def Doc(id, **kw):  # noqa: N802
        return _Doc(id, **{"text": "x", "op": "sum", "license": "MIT", **kw})

    docs = [Doc("a", how=None), Doc("b", how="inferred"), Doc("c", how="declared"),
            Doc("d", how="declared", evidence=4), Doc("e", how="exact"),
            Doc("f", how="declared", evidence=4, priority=2, n_tokens=9),
            Doc("g", how="declared", evidence=4, priority=2, n_tokens=5),
            Doc("h", how="declared", evidence=4, priority=2, n_tokens=5, license="unknown"),
            Doc("i", how=None, validated=True)]
    ordered = [d.id for d in sorted(docs, key=validation_order)]
    # ok first; bound before unbound; exact, declared, ..., inferred; evidence; priority; known licence; shorter
    assert ordered == ["i", "e", "g", "f", "h", "d", "c", "b", "a"]


def test_rounds_without_clusters_check_everything_at_once():
    r = Rounds({}, ["a", "b", "c"], {})
    assert r.next() == ["a", "b", "c"] and r.next() == [] and r.held() == {}


def test_rounds_widen_in_a_cluster_that_keeps_failing():
    clusters = {f"m{i}": {"cluster": "m0", "rank": i, "link": {}} for i in range(8)}
    r = Rounds(clusters, [f"m{i}" for i in range(8)], {})
    sizes = []
    while batch := r.next():
        sizes.append(len(batch))
        for m in batch:
            r.record(m, "dropped")
    assert sizes == [1, 1, 2, 4]  # one at a time while the first two fail, then twice as many each round


def test_rounds_stop_widening_at_a_member_that_passes():
    clusters = {f"m{i}": {"cluster": "m0", "rank": i, "link": {}} for i in range(8)}
    r = Rounds(clusters, [f"m{i}" for i in range(8)], {})
    for want in (["m0"], ["m1"], ["m2", "m3"]):
        assert r.next() == want
        for m in want:
            r.record(m, "ok" if m == "m2" else "dropped")
    assert r.next() == [] and set(r.held()) == {"m4", "m5", "m6", "m7"}
    assert r.held()["m4"]["duplicate_of"] == "m2"


def test_rounds_check_a_better_member_that_joined_after_a_verdict():
    """b was validated ok; a, ranked before it, came later: a is checked; c, ranked after b, is not."""
    clusters = {k: {"cluster": "a", "rank": i, "link": {}} for i, k in enumerate("abc")}
    r = Rounds(clusters, ["a", "c"], {"b": "ok"})
    assert r.next() == ["a"]
    r.record("a", "dropped")
    assert r.next() == []
    assert r.held() == {"c": {**r.held()["c"], "duplicate_of": "b", "because": "ok"}}


# ---- dedupe before validation ---------------------------------------------------------------
def test_dedupe_before_validation_clusters_and_says_so(make_ctx):
    recs = corpus()
    ctx, lines = _messages(make_ctx, recs)
    report = dedupe.run(ctx)
    assert report["mode"] == "before validation" and "(before validation)" in lines[-1]
    assert lines[-2].startswith("dedupe (before validation): clustering 7 records (0 MB of code)")
    assert lines[-1].endswith(" records/s)") and "clustered in " in lines[-1]
    clusters = ctx.store.clusters()
    by = {k: clusters.get(r.id) for k, r in recs.items()}
    first = recs["sum_declared"].id
    assert [by[k]["rank"] for k in ("sum_declared", "sum_inferred", "sum_renamed")] == [0, 1, 2]
    assert {by[k]["cluster"] for k in ("sum_declared", "sum_inferred", "sum_renamed")} == {first}
    assert by["softmax"]["cluster"] == recs["softmax"].id and by["softmax_copy"]["rank"] == 1
    assert by["sum_shuffle"] is None and by["loner"] is None
    assert report["counts"]["clusters"] == 2 and report["counts"]["held_back"] == 3
    assert report["counts"]["to_validate_first"] == 4
    assert ctx.store.results_for("dedupe") == {}  # nothing dropped before validation
    again = dedupe.run(ctx)
    assert "nothing changed" in lines[-1] and again["counts"] == report["counts"]


def test_records_dedupe_will_drop_rank_after_those_it_keeps(make_ctx):
    sm = kernel("softmax__block_row.cu")
    recs = {"unlicensed": Record(language="cuda", code=sm, source="test", entry={"kernels": ["k"]},
                                 binding={"kind": "op", "op": "softmax", "how": "exact"},
                                 provenance={"license": "NOASSERTION", "priority": 5}),
            "licensed": _record(sm.replace("//", "// mit:"), "softmax", "inferred"),
            # a cluster whose members the licence filter will all drop still costs one check
            "lone_a": _record(kernel("sum__warp_shuffle.cu"), "sum", license="NOASSERTION"),
            "lone_b": _record(kernel("sum__warp_shuffle.cu").replace("//", "// b:"), "sum", license="NOASSERTION")}
    ctx, _ = _messages(make_ctx, recs)
    report = dedupe.run(ctx)
    clusters = ctx.store.clusters()
    assert clusters[recs["licensed"].id]["rank"] == 0 and clusters[recs["unlicensed"].id]["rank"] == 1
    assert report["counts"]["filtered"] == {"license": 3} and report["counts"]["held_back"] == 2


def test_dedupe_after_validation_says_so(make_ctx, fake):
    recs = corpus()
    ctx, lines = _messages(make_ctx, recs)
    fake()
    dedupe.run(ctx)
    _validate(ctx)
    report = dedupe.run(ctx)
    assert report["mode"] == "after validation" and lines[-1].startswith("dedupe (after validation):")
    assert report["counts"]["input"] == 4  # the validated records: one per cluster, and the two outside


# ---- validate follows the clusters ----------------------------------------------------------
def test_validate_checks_one_record_per_cluster(make_ctx, fake):
    recs = corpus()
    ctx, _ = _messages(make_ctx, recs)
    dedupe.run(ctx)
    f = fake()
    stats = _validate(ctx)
    firsts = {recs[k].id for k in ("sum_declared", "sum_shuffle", "softmax", "loner")}
    assert f.batches == [sorted(firsts, key=[r.id for r in recs.values()].index)]  # one round
    state = _state(ctx, recs)
    assert all(state[k] == ("ok", None) for k in ("sum_declared", "sum_shuffle", "softmax", "loner"))
    assert {k for k, v in state.items() if v == ("waiting", "duplicate")} == {"sum_inferred", "sum_renamed",
                                                                             "softmax_copy"}
    held = ctx.store.result(recs["sum_renamed"].id, "validate")["payload"]
    assert held["duplicate_of"] == recs["sum_declared"].id and held["because"] == "ok"
    assert stats["ok"] == 4 and stats["waiting:duplicate"] == 3
    funnel = ctx.store.funnel()["stages"]["validate"]
    assert funnel["ok"] == 4 and funnel["waiting"] == {"duplicate": 3}
    assert all(len(ctx.store.verdicts(r.id)) == (1 if r.id in firsts else 0) for r in recs.values())
    # a rerun checks nothing again: the held records stay behind the same records
    f2 = fake()
    _validate(ctx)
    assert f2.checked == [] and _state(ctx, recs) == state


def test_unbound_members_are_dropped_at_once_and_take_no_round(make_ctx, fake):
    """Unbound copies rank after the bound member they join: dropped before the rounds, not one by one."""
    recs = corpus()
    s = recs["sum_declared"].code
    recs.update({f"sum_unbound{i}": _record(s.replace("// Sum, declared", f"// unbound {i}"), None)
                 for i in range(4)})
    recs["sum_declared"] = _record(s.replace("// Sum, declared", "// BROKEN"), "sum")
    ctx, _ = _messages(make_ctx, recs)
    dedupe.run(ctx)
    f = fake()
    _validate(ctx)
    unbound = [recs[f"sum_unbound{i}"].id for i in range(4)]
    # the unbound at once, then each cluster's first, then the member after the broken one
    assert sorted(f.batches[0]) == sorted(unbound) and len(f.batches) == 3
    assert not set(unbound) & set(f.checked[4:])
    state = _state(ctx, recs)
    assert all(state[f"sum_unbound{i}"] == ("dropped", "unbound") for i in range(4))
    assert state["sum_inferred"] == ("ok", None) and f.batches[2] == [recs["sum_inferred"].id]


def test_an_unbound_record_is_dropped_without_a_compile(ctx, monkeypatch):
    rec = dataclasses.replace(_record(kernel("sum__shared_tree.cu"), None),
                              unbound="no binder found a binding: manifest; inferred")
    compiled = []
    monkeypatch.setattr(ctx.executor, "map_cpu", lambda fn, items, desc="", **kw: compiled.extend(items) or iter(()))
    (out,) = pipeline.validate([rec], ctx.config.validate, ctx.executor, "/nonexistent", "nvcc")
    assert out[1:3] == ("dropped", "unbound") and out[3]["detail"] == rec.unbound and compiled == []


def test_next_member_is_checked_when_the_first_fails(make_ctx, fake):
    recs = corpus()
    recs["sum_declared"] = _record(recs["sum_declared"].code.replace("// Sum, declared", "// BROKEN"), "sum")
    ctx, _ = _messages(make_ctx, recs)
    dedupe.run(ctx)
    f = fake()
    _validate(ctx)
    assert len(f.batches) == 2 and f.batches[1] == [recs["sum_inferred"].id]
    state = _state(ctx, recs)
    assert state["sum_declared"] == ("dropped", "incorrect") and state["sum_inferred"] == ("ok", None)
    assert state["sum_renamed"] == ("waiting", "duplicate")
    held = ctx.store.result(recs["sum_renamed"].id, "validate")["payload"]
    assert held["duplicate_of"] == recs["sum_inferred"].id


def test_every_member_is_tried_until_one_passes(make_ctx, fake):
    recs = corpus()
    ctx, _ = _messages(make_ctx, recs)
    dedupe.run(ctx)
    order = [recs[k].id for k in ("sum_declared", "sum_inferred", "sum_renamed")]
    f = fake(fail=order)
    _validate(ctx)
    assert [[i for i in b if i in order] for b in f.batches if set(b) & set(order)] == [[o] for o in order]
    assert all(_state(ctx, recs)[k] == ("dropped", "incorrect") for k in ("sum_declared", "sum_inferred",
                                                                           "sum_renamed"))


def test_held_records_are_checked_when_the_verdict_they_stand_behind_changes(make_ctx, fake):
    recs = corpus()
    ctx, _ = _messages(make_ctx, recs)
    dedupe.run(ctx)
    fake()
    _validate(ctx)
    # the first of the sum cluster gets another binding: its verdict no longer counts, and the new one fails
    rep = recs["sum_declared"]
    ctx.store.put_binding(rep.id, Binding(kind="op", target="sum", how="declared", params={"dim": 0}),
                          origin="harvest")
    ctx.store.put_results([(rep.id, "describe", "h", "ok", None, {})])
    f = fake(fail=[rep.id])
    _validate(ctx)
    assert f.batches == [[rep.id], [recs["sum_inferred"].id]]
    state = _state(ctx, recs)
    assert state["sum_declared"] == ("dropped", "incorrect") and state["sum_inferred"] == ("ok", None)
    assert ctx.store.result(recs["sum_renamed"].id, "validate")["payload"]["duplicate_of"] == recs["sum_inferred"].id


def test_without_a_gpu_the_rest_wait_behind_the_first(make_ctx, fake):
    recs = corpus()
    ctx, _ = _messages(make_ctx, recs)
    dedupe.run(ctx)
    f = fake(gpu=False)
    _validate(ctx)
    assert len(f.batches) == 1
    held = ctx.store.result(recs["sum_inferred"].id, "validate")["payload"]
    assert held["duplicate_of"] == recs["sum_declared"].id and held["because"] == "pending"
    assert _state(ctx, recs)["sum_declared"] == ("waiting", "needs_gpu")
    # then on a GPU machine: the first ones are checked, the others stay behind them
    f = fake()
    _validate(ctx)
    assert f.batches == [[recs[k].id for k in ("sum_declared", "sum_shuffle", "softmax", "loner")]]
    assert ctx.store.result(recs["sum_inferred"].id, "validate")["payload"]["because"] == "ok"


def test_resume_after_a_kill_loses_nothing(make_ctx, fake):
    recs = corpus()
    recs["softmax"] = _record(recs["softmax"].code.replace("//", "// BROKEN", 1), "softmax", priority=1)
    # the same run without interruption, in a workspace of its own
    clean, _ = _messages(make_ctx, recs)
    dedupe.run(clean)
    fake()
    _validate(clean)
    want = _state(clean, recs)

    ctx = make_ctx("killed", gpus="none")
    _prepared(ctx, recs)
    dedupe.run(ctx)
    fake(stop_after=4)  # dies in the second round, after the four records of the first
    with pytest.raises(KeyboardInterrupt):
        _validate(ctx)
    assert len(_state(ctx, recs)) == 4
    f = fake()
    _validate(ctx)
    assert _state(ctx, recs) == want and len(want) == len(recs)
    assert not set(f.checked) & {recs[k].id for k in ("sum_declared", "sum_shuffle", "softmax", "loner")}
    assert all(len(ctx.store.verdicts(r.id)) <= 1 for r in recs.values())  # nothing checked twice


# ---- end to end, with real builds -----------------------------------------------------------
@pytest.mark.nvcc
def test_harvest_dedupe_validate_builds_one_kernel_per_cluster(tmp_path):
    """Row-wise kernels and a vendored copy whose kernels carry comments of their own: `sftbuild dedupe`
    clusters them before validation and `sftbuild validate` builds and checks only the first of each
    cluster (on a GPU it runs them; without one they wait for it, and the copies wait behind them)."""
    import torch
    from click.testing import CliRunner

    from sftbuild.cli import main
    from sftbuild.store import Store

    src = tmp_path / "ops"
    src.mkdir()
    code = (Path(__file__).parents[1] / "data" / "ops" / "rowwise.cu").read_text()
    (src / "rowwise.cu").write_text(code)
    (src / "vendored.cu").write_text(code.replace("float buf[];", "float buf[];  // 2 * blockDim.x floats"))
    ws = str(tmp_path / "ws")

    def cli(*args):
        r = CliRunner().invoke(main, [*args, "-w", ws], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        return r.output

    cli("harvest", str(src), "-q")
    out = cli("dedupe")
    # the copies, and softmax with log_softmax (89% of their 5-grams shared: dedupe after validation
    # would keep one of the two), make two clusters; every record here is unlicensed, so each cluster
    # is one the licence filter will drop: it still costs one check, not one per member
    assert "dedupe (before validation): 6 records, 6 in 2 clusters" in out
    out = cli("validate")
    assert "duplicate: 4 records were not checked" in out
    s = Store(ws)
    clusters = s.clusters()
    firsts = {rid for rid, c in clusters.items() if c["rank"] == 0}
    res = s.results_for("validate")
    assert len(res) == 6 and len(firsts) == 2
    for rid, r in res.items():
        if rid in firsts:
            assert r["reason"] != "duplicate" and len(s.verdicts(rid)) == 1
            if not torch.cuda.is_available():
                assert (r["status"], r["reason"]) == ("waiting", "needs_gpu")
        elif res[clusters[rid]["cluster"]]["status"] == "dropped":  # the first failed: the copy had its turn
            assert r["reason"] != "duplicate"
        else:
            assert (r["status"], r["reason"]) == ("waiting", "duplicate") and not s.verdicts(rid)
    s.close()


def test_validate_clusters_first_and_a_bad_benchmark_is_one_sentence(make_ctx, tmp_path):
    from sftbuild import stages
    from sftbuild.config import Config
    from sftbuild.context import UserError
    from sftbuild.dedupe import prevalidate

    assert stages.first("validate") is prevalidate  # `sftbuild validate` and `sftbuild run` cluster first
    cfg = Config()
    cfg.dedupe.benchmarks = [str(tmp_path / "missing")]
    ctx = make_ctx(gpus="none", config=cfg)
    _prepared(ctx, corpus())
    with pytest.raises(UserError, match="dedupe.benchmarks: .*missing does not exist"):
        prevalidate.run(ctx)


def test_clustering_before_validation_can_be_turned_off(make_ctx, fake):
    recs = corpus()
    ctx, lines = _messages(make_ctx, recs)
    dedupe.run(ctx)
    ctx.config.dedupe.before_validation = False
    report = dedupe.run(ctx)
    assert report["off"] and "off (dedupe.before_validation: false)" in lines[-1] and ctx.store.clusters() == {}
    f = fake()
    _validate(ctx)
    assert sorted(f.checked) == sorted(r.id for r in recs.values())
