"""What earlier harvests found stays: a harvest setting changed for one source does not hide the records
of the others, and the same code found in two sources keeps both provenances and both declared bindings."""
from __future__ import annotations

import shutil
from pathlib import Path

from sftbuild.config import Config
from sftbuild.harvest import stage
from sftbuild.store import Store

DATA = Path(__file__).parents[1] / "data" / "harvest"


def test_records_of_earlier_sources_stay_visible_after_a_harvest_setting_changes(make_ctx):
    first = make_ctx(gpus="none")
    stage.run(first, [str(DATA / "cuda_tree")])
    cuda = {r.id for r in first.store.alive("bind")}
    assert cuda
    cfg = Config()
    cfg.harvest.min_kernel_lines = 2  # another harvest config: another config hash
    second = make_ctx(gpus="none", config=cfg)
    stats = stage.run(second, [str(DATA / "triton_src")])
    assert stats["errors"] == {}
    alive = {r.id: r.source for r in second.store.alive("bind")}
    assert cuda <= set(alive), "records of the earlier source disappeared"
    assert str(DATA / "triton_src") in alive.values()
    funnel = second.store.funnel()
    assert funnel["by_source"][str(DATA / "cuda_tree")]["stages"]["harvest"]["ok"] == len(cuda)


def test_a_source_harvested_again_under_new_settings_follows_them(make_ctx):
    first = make_ctx(gpus="none")
    stage.run(first, [str(DATA / "cuda_tree")])
    before = {r.id for r in first.store.alive("bind")}
    cfg = Config()
    cfg.harvest.min_kernel_lines = 400  # every kernel of the tree is now too short
    second = make_ctx(gpus="none", config=cfg)
    stage.run(second, [str(DATA / "cuda_tree")])
    assert before and not {r.id for r in second.store.alive("bind")} & before


def test_a_failed_source_keeps_what_it_gave_before(make_ctx, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(DATA / "cuda_tree", tree)
    first = make_ctx(gpus="none")
    stage.run(first, [str(tree)])
    before = {r.id for r in first.store.alive("bind")}
    shutil.rmtree(tree)
    cfg = Config()
    cfg.harvest.min_kernel_lines = 2
    second = make_ctx(gpus="none", config=cfg)
    stats = stage.run(second, [str(tree), str(DATA / "triton_src")])
    assert str(tree) in stats["errors"]
    assert before <= {r.id for r in second.store.alive("bind")}


def test_the_same_code_from_two_sources_keeps_both_provenances_and_both_bindings(make_ctx, tmp_path):
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        shutil.copy(DATA / "cuda_tree" / "kernels.cu", tmp_path / name / "kernels.cu")
    reg = tmp_path / "reg.yaml"
    reg.write_text(f"sources:\n"
                   f"  - {{name: first, kind: dir, location: {tmp_path / 'first'}, license: MIT,\n"
                   f"     bindings: [{{kernel: square_kernel, op: square}}]}}\n"
                   f"  - {{name: second, kind: dir, location: {tmp_path / 'second'}, license: Apache-2.0,\n"
                   f"     bindings: [{{kernel: square_kernel, op: relu}}]}}\n")
    ctx = make_ctx(gpus="none")
    stats = stage.run(ctx, [str(reg)])
    assert stats["errors"] == {} and stats["sources"] == {"first": 5, "second": 5}
    (rec,) = [r for r in ctx.store.records() if r.name == "square_kernel"]
    origins = ctx.store.origins(rec.id)
    assert [(o["source"], o["path"]) for o in origins] == [("first", "kernels.cu"), ("second", "kernels.cu")]
    assert [o["provenance"]["url"] for o in origins] == [(tmp_path / n).as_uri() for n in ("first", "second")]
    assert [o["binding"]["op"] for o in origins] == ["square", "relu"]
    assert [o["binding"]["by"] for o in origins] == ["source:first", "source:second"]
    # the first declaration stays current; the record says where else it was found, and what that declared
    assert rec.binding.op == "square" and rec.binding.by == "source:first"
    assert [(o["source"], o["license"], o["binding"]["op"]) for o in rec.provenance["origins"]] == \
        [("first", "MIT", "square"), ("second", "Apache-2.0", "relu")]
    assert ctx.store.get(rec.id).provenance["origins"] == rec.provenance["origins"]
    # a record found once has no origins list
    assert all("origins" not in r.provenance for r in ctx.store.records() if r.name != "square_kernel"
               and len(ctx.store.origins(r.id)) == 1)


def test_a_source_that_changes_its_own_declaration_replaces_it(make_ctx, tmp_path):
    (tmp_path / "src").mkdir()
    shutil.copy(DATA / "cuda_tree" / "kernels.cu", tmp_path / "src" / "kernels.cu")
    reg = tmp_path / "reg.yaml"
    ctx = make_ctx(gpus="none")
    for op in ("square", "relu"):
        reg.write_text(f"sources:\n  - {{name: mine, kind: dir, location: {tmp_path / 'src'},\n"
                       f"     bindings: [{{kernel: square_kernel, op: {op}}}]}}\n")
        stage.run(ctx, [str(reg)])
    (rec,) = [r for r in ctx.store.records() if r.name == "square_kernel"]
    assert rec.binding.op == "relu" and [o["binding"]["op"] for o in ctx.store.origins(rec.id)] == ["relu"]


def test_a_workspace_from_before_origins_gets_one_per_record(tmp_path):
    ws = tmp_path / "ws"
    s = Store(ws)
    from tests.review.workspace import records

    s.add_records(records(3))
    s.db.execute("DELETE FROM origins")
    s.close()
    s = Store(ws)
    try:
        assert all(len(s.origins(r.id)) == 1 and s.origins(r.id)[0]["path"] == r.provenance["path"]
                   for r in s.records())
    finally:
        s.close()


def test_review_show_names_every_source_of_the_code(make_ctx, tmp_path):
    from sftbuild.review.evidence import gather, lines

    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        shutil.copy(DATA / "cuda_tree" / "kernels.cu", tmp_path / name / "kernels.cu")
    reg = tmp_path / "reg.yaml"
    reg.write_text(f"sources:\n"
                   f"  - {{name: first, kind: dir, location: {tmp_path / 'first'}, license: MIT}}\n"
                   f"  - {{name: second, kind: dir, location: {tmp_path / 'second'}, license: Apache-2.0,\n"
                   f"     bindings: [{{kernel: square_kernel, op: relu}}]}}\n")
    ctx = make_ctx(gpus="none")
    stage.run(ctx, [str(reg)])
    (rec,) = [r for r in ctx.store.records() if r.name == "square_kernel"]
    text = "\n".join(lines(gather(ctx.store, rec.id)))
    assert "also in: second   path: kernels.cu   license: Apache-2.0   declared: relu" in text
