"""The program catalogs of the torch-inductor source: size, mix, determinism, distinct fusions,
programs that run, spec parameters, folders of reference modules and the `programs` command.
Nothing here needs a GPU."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from sftbuild.cli import main
from sftbuild.harvest import inductor, specs, stage
from sftbuild.harvest.catalog import DEFAULT_PROGRAMS, counts, fusions, select
from sftbuild.harvest.sources import SourceError

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def default_catalog():
    return inductor.programs("catalog", DEFAULT_PROGRAMS, 0)


def test_default_catalog_size_and_coverage(default_catalog):
    c = counts(default_catalog)
    assert c["programs"] == DEFAULT_PROGRAMS and c["distinct"] == DEFAULT_PROGRAMS >= 1500
    assert c["by_catalog"]["fusions"] >= 500
    assert c["opdb_ops"] >= 300
    assert c["by_catalog"]["handwritten"] >= 40
    assert len({p.name for p in default_catalog}) == len(default_catalog)


def test_a_slice_is_a_mix(default_catalog):
    head = counts(inductor.programs("catalog", 300, 0))["by_catalog"]
    assert set(head) == {"opdb", "fusions", "handwritten"} and min(head.values()) >= 5
    # the slice is the head of the full catalog: asking for fewer programs never reorders them
    assert [p.name for p in inductor.programs("catalog", 300, 0)] == [p.name for p in default_catalog[:300]]


def test_locations_pick_catalogs():
    assert {p.catalog for p in inductor.programs("catalog:opdb", 50, 0)} == {"opdb"}
    both = inductor.programs("catalog:handwritten,fusions", 100, 0)
    assert {p.catalog for p in both} == {"handwritten", "fusions"} and len(both) == 100
    assert len(inductor.programs("catalog:fusions", 700, 3)) == 700
    with pytest.raises(SourceError, match="unknown program catalog nope"):
        inductor.programs("catalog:nope", 10, 0)
    with pytest.raises(SourceError, match="between 1 and"):
        inductor.programs("catalog", 0, 0)


def test_same_seed_same_programs_other_seed_other_fusions():
    a, b = select(["handwritten", "opdb", "fusions"], 400, 7), select(["handwritten", "opdb", "fusions"], 400, 7)
    assert [(p.name, p.src) for p in a] == [(p.name, p.src) for p in b]
    f0, f1 = fusions.programs(200, 0), fusions.programs(200, 1)
    assert [p.src for p in f0] == [p.src for p in fusions.programs(200, 0)]
    assert not {p.src for p in f0} & {p.src for p in f1}
    assert [p.name for p in select(["opdb"], 400, 7)] != [p.name for p in select(["opdb"], 400, 8)]


def test_generated_fusions_are_not_collapsed_by_near_dedupe():
    """Dedupe's own near-duplicate machinery (MinHash LSH, sftbuild.dedupe.near) at its defaults:
    plain 5-gram Jaccard threshold 0.7, identifier-abstracted threshold 0.85."""
    from sftbuild.dedupe.near import Doc, find_clusters
    from sftbuild.dedupe.params import Params

    progs = fusions.programs(600, 0)
    params = Params()
    assert (params.threshold, params.abstract_threshold) == (0.7, 0.85)
    clusters = find_clusters([Doc(id=p.name, text=p.src, language="kernelbench") for p in progs], params)
    assert clusters.dropped == {}, list(clusters.dropped.items())[:3]
    assert len({(p.head, p.epilogues) for p in progs}) == 600
    assert all(1 <= len(p.epilogues) <= 4 for p in progs)
    heads = {p.head for p in progs}
    assert {"Gemm", "Conv2d", "LayerNorm", "CausalAttention", "Attention", "BMM"} <= heads


RUNNER = textwrap.dedent("""
    import json, sys, torch
    failed = {}
    for name, src in json.load(sys.stdin):
        ns = {"__name__": "catalog_program"}
        try:
            exec(compile(src, name, "exec"), ns)
            torch.manual_seed(0)
            with torch.no_grad():
                out = ns["Model"](*ns["get_init_inputs"]())(*ns["get_inputs"]())
            outs = out if isinstance(out, (tuple, list)) else [out]
            if any(o.is_floating_point() and not torch.isfinite(o).all() for o in outs if isinstance(o, torch.Tensor)):
                failed[name] = "non-finite output"
        except Exception as e:
            failed[name] = f"{type(e).__name__}: {e}"[:300]
    print(json.dumps(failed))
""")


def test_a_seeded_sample_of_the_catalog_runs_as_reference(default_catalog):
    """60 programs, mixed catalogs, run on the CPU in a child process (generated code never runs here),
    each with finite outputs."""
    sample = random.Random(0).sample(default_catalog, 60)
    assert len({p.catalog for p in sample}) == 3
    out = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps([[p.name, p.src] for p in sample]),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}


# ---- source specs ----------------------------------------------------------------------------------

def test_spec_parameters():
    reg = specs.load_registry()
    (src,) = specs.parse_spec("torch-inductor?programs=300&seed=1", reg)
    assert (src.name, src.kind, src.location, src.params) == ("torch-inductor", "torch-inductor", "catalog",
                                                              {"programs": 300, "seed": 1})
    assert reg["torch-inductor"].params == {}  # the registry entry itself is untouched
    (src,) = specs.parse_spec("inductor:catalog:fusions?programs=20", reg)
    assert src.location == "catalog:fusions" and src.params == {"programs": 20}
    for bad, msg in [("torch-inductor?programs=many", "must be an integer"),
                     ("torch-inductor?size=3", "takes no parameter 'size'"),
                     ("torch-inductor?programs", "key=value"),
                     ("torch-aten?programs=3", "takes no parameter")]:
        with pytest.raises(SourceError, match=msg):
            specs.parse_spec(bad, reg)


def test_registry_entry_params(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("sources:\n  - {name: small, kind: torch-inductor, location: 'catalog:opdb', "
                 "params: {programs: '40', seed: 2}}\n")
    (src,) = specs.parse_spec(str(f), {})
    assert src.params == {"programs": 40, "seed": 2}
    f.write_text("sources:\n  - {name: small, kind: torch-inductor, params: {colour: red}}\n")
    with pytest.raises(SourceError, match="takes no parameter 'colour'"):
        specs.load_registry(f)


# ---- folders of reference modules ------------------------------------------------------------------

PROGRAM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * {k}

batch = 8
def get_inputs():
    return [torch.randn(batch, 16)]

def get_init_inputs():
    return []
"""


def _bench(tmp_path: Path) -> Path:
    d = tmp_path / "level1"
    d.mkdir()
    (d / "1_relu.py").write_text(PROGRAM.format(k=2))
    (d / "2_relu.py").write_text(PROGRAM.format(k=3))
    (d / "helpers.py").write_text("def util():\n    return 1\n")
    (d / "broken.py").write_text("class Model(:\n")
    (d / "notes.txt").write_text("not python")
    (d / "sub").mkdir()
    (d / "sub" / "3_relu.py").write_text(PROGRAM.format(k=4))  # not read: folders are not recursive
    return d


def test_folder_programs(tmp_path):
    d = _bench(tmp_path)
    skipped: list = []
    progs = inductor.programs(str(d), skipped=skipped)
    assert [Path(p.name).name for p in progs] == ["1_relu.py", "2_relu.py"]
    assert {p.catalog for p in progs} == {"folder"} and {p.benchmark for p in progs} == {"level1"}
    assert progs[0].meta["shapes"] == [[8, 16]]
    why = dict(skipped)
    assert set(why) == {"broken.py", "helpers.py"} and why["broken.py"].startswith("not valid Python")
    assert why["helpers.py"] == "defines no Model and no get_inputs at module level"
    assert {p.benchmark for p in inductor.programs(str(d), benchmark="KernelBench")} == {"KernelBench"}
    (src,) = specs.parse_spec(f"inductor:{d}?benchmark=KernelBench", {})
    assert src.location == str(d.resolve()) and src.params == {"benchmark": "KernelBench"}


def test_folder_harvest_reports_files_that_are_not_programs(tmp_path, make_ctx):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the GPU test covers the harvest")
    d = _bench(tmp_path)
    ctx = make_ctx(gpus="none")
    stats = stage.run(ctx, [f"inductor:{d}?benchmark=KernelBench"])
    assert "needs a CUDA GPU" in stats["errors"][f"inductor:{d}"]
    skips = {s["path"]: s for s in ctx.store.skips()}
    assert {k: v["reason"] for k, v in skips.items()} == {"helpers.py": "not_a_program", "broken.py": "not_a_program"}


def test_folder_without_programs_is_one_clear_error(tmp_path, make_ctx):
    d = tmp_path / "empty"
    d.mkdir()
    (d / "helpers.py").write_text("x = 1\n")
    with pytest.raises(SourceError, match=r"^folder .* holds no reference program .*helpers.py: defines no Model"):
        inductor.programs(str(d))
    ctx = make_ctx(gpus="none")
    stats = stage.run(ctx, [f"inductor:{d}"])
    (msg,) = stats["errors"].values()
    assert msg.startswith(f"folder {d.resolve()} holds no reference program") and "\n" not in msg


# ---- the programs command --------------------------------------------------------------------------

def test_programs_command(tmp_path):
    r = CliRunner().invoke(main, ["programs", "catalog:fusions", "--programs", "12", "--seed", "1", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["counts"]["by_catalog"] == {"fusions": 12} and len(out["programs"]) == 12
    row = out["programs"][0]
    assert set(row) == {"name", "catalog", "family", "shapes", "dtypes", "benchmark"} and row["shapes"]

    r = CliRunner().invoke(main, ["programs", "--programs", "300", "--limit", "4"])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 8 and lines[-2].startswith("programs: 300 (fusions ")
    assert lines[0].split() == ["name", "catalog", "family", "or", "op", "input", "shapes", "dtypes", "benchmark"]
    assert "distinct ops among single-op programs" in lines[-2]
    assert lines[-1].startswith("op_db samples (or ops) left out: ") and "sample not renderable" in lines[-1]

    cfg = tmp_path / "sftbuild.yaml"  # the config keys the torch-inductor source reads too
    cfg.write_text("harvest: {programs: 7, seed: 3}\n")
    r = CliRunner().invoke(main, ["programs", "catalog:fusions", "-c", str(cfg), "--json"])
    assert [p["name"] for p in json.loads(r.output)["programs"]] == [p.name for p in fusions.programs(7, 3)]

    d = _bench(tmp_path)
    r = CliRunner().invoke(main, ["programs", str(d), "--benchmark", "KernelBench"])
    assert r.exit_code == 0 and "KernelBench" in r.output and "skipped helpers.py" in r.output
    r = CliRunner().invoke(main, ["programs", "catalog:nope"])
    assert r.exit_code == 1 and "unknown program catalog nope" in r.output and "Traceback" not in r.output


@pytest.mark.gpu
def test_folder_harvest_on_gpu_carries_the_benchmark(tmp_path, make_ctx):
    d = _bench(tmp_path)
    ctx = make_ctx(gpus="auto")
    spec = f"inductor:{d}?benchmark=KernelBench"
    stats = stage.run(ctx, [spec])
    assert stats["errors"] == {} and stats["sources"][f"inductor:{d}"] >= 2  # a source is named without its ?params
    recs = list(ctx.store.records())
    assert {r.provenance["benchmark"] for r in recs} == {"KernelBench"}
    assert {r.provenance["catalog"] for r in recs} == {"folder"}
    assert {Path(r.binding.program).name for r in recs} == {"1_relu.py", "2_relu.py"}
    assert {s["reason"] for s in ctx.store.skips() if s["path"] in ("helpers.py", "broken.py")} == {"not_a_program"}


def test_hostile_program_files_are_skipped_with_a_reason(tmp_path):
    d = tmp_path / "hostile"
    d.mkdir()
    (d / "1_ok.py").write_text(PROGRAM.format(k=2))
    (d / "deep.py").write_text("x = " + "1+" * 100_000 + "1\nclass Model: pass\ndef get_inputs(): return []\n")
    (d / "big.py").write_text("# pad\n" * 200_000)
    (d / "latin1.py").write_bytes(b"# \xff\xfe\nclass Model: pass\n")
    (d / "link.py").symlink_to(d / "1_ok.py")
    skipped: list = []
    progs = inductor.programs(str(d), skipped=skipped)
    assert [Path(p.name).name for p in progs] == ["1_ok.py"]
    why = dict(skipped)
    assert why["deep.py"].startswith("not valid Python") and why["big.py"].startswith("larger than")
    assert why["latin1.py"] == "not UTF-8 text" and why["link.py"] == "a symlink (not followed)"
