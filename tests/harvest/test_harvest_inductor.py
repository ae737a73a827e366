"""The Inductor source: the catalog, the output-code parser, the CPU-side message, and
(on a GPU) real torch.compile kernels bound exactly to their programs."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sftbuild import inductor_code
from sftbuild.harvest import stage
from sftbuild.harvest.catalog.programs import catalog

DATA = Path(__file__).parents[1] / "data" / "harvest" / "inductor"


@pytest.fixture
def ctx(make_ctx):
    return make_ctx(gpus="none", echo=print)


def test_catalog_has_50_programs_that_run_eagerly():
    progs = catalog()
    assert len(progs) >= 50 and len({n for n, _ in progs}) == len(progs)
    for name, src in progs:
        ns: dict = {}
        exec(compile(src, name, "exec"), ns)
        model = ns["Model"](*ns["get_init_inputs"]())
        with torch.no_grad():
            model(*ns["get_inputs"]())


def test_output_code_parser():
    ks = inductor_code.kernels((DATA / "output_code_sample.py").read_text())
    assert [k["name"] for k in ks] == ["triton_poi_fused_add_relu_0"]
    assert "@triton.jit" in ks[0]["code"] and ks[0]["launch_sites"][0]["function"] == "call"


def test_user_module_spec_and_cpu_message(ctx):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    spec = str(DATA / "one_program.py")
    stats = stage.run(ctx, [spec])
    assert "needs a CUDA GPU" in stats["errors"][spec]


@pytest.mark.gpu
def test_inductor_user_module_on_gpu(ctx):
    spec = str(DATA / "one_program.py")
    stats = stage.run(ctx, [spec])
    assert stats["errors"] == {} and stats["sources"][spec] >= 1
    recs = list(ctx.store.records())
    pairs = [r for r in recs if r.language == "kernelbench"]
    kernels = [r for r in recs if r.language == "triton"]
    assert len(pairs) == 1 and "class ModelNew" in pairs[0].code and pairs[0].binding.kind == "kernelbench"
    assert kernels and all(r.binding.kind == "inductor" and r.binding.how == "exact"
                           and r.binding.solution == pairs[0].code for r in kernels)
    assert all(r.binding.program.endswith("one_program.py") and "class Model" in r.binding.reference
               for r in recs)
    assert all("@triton.jit" in r.code for r in kernels)


@pytest.mark.gpu
@pytest.mark.slow
def test_inductor_catalog_on_gpu(ctx):
    stats = stage.run(ctx, ["torch-inductor?programs=120&seed=0"])  # a mixed slice of every catalog
    assert stats["errors"] == {}
    recs = list(ctx.store.records())
    programs = {r.binding.program for r in recs}
    failed = [s for s in ctx.store.skips() if s["reason"] == "compile_failed"]
    pairs = [r for r in recs if r.language == "kernelbench"]
    reasons = sorted({s["reason"] for s in ctx.store.skips()})
    print(f"\ninductor: {len(pairs)} program pairs and {len(recs) - len(pairs)} kernels from {len(programs)} "
          f"programs; {len(failed)} programs failed; skip reasons {reasons}")
    skipped = {}
    for s in ctx.store.skips():
        skipped[s["reason"]] = skipped.get(s["reason"], 0) + 1
    assert all(r.binding for r in recs)
    assert len(programs) >= 90, f"{len(programs)} programs gave records; skipped by reason: {skipped}"
    assert {r.provenance["catalog"] for r in recs} == {"opdb", "fusions", "handwritten"}, \
        sorted({r.provenance["catalog"] for r in recs})
