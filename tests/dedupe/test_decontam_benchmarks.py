"""Decontamination by benchmark name (`dedupe.benchmarks: [NAME]`): records harvested for a named
benchmark, and records from elsewhere whose program matches one of its programs, are dropped as
`contaminated`; nothing is dropped for a benchmark that is not named. Records are built directly
in a store, as the torch-inductor source writes them (no GPU)."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sftbuild.config import Config, template
from sftbuild.harvest import inductor
from sftbuild.record import Record

KERNELS = Path(__file__).parents[1] / "data" / "dedupe" / "kernels"

BENCH = {
    "7_Conv_GELU_Scale.py": '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Convolution, GELU, then a scale."""

    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scale = scale

    def forward(self, x):
        x = self.conv(x)
        x = torch.nn.functional.gelu(x)
        return x * self.scale


batch_size = 128
in_channels = 3
out_channels = 16
height, width = 32, 32
kernel_size = 3
scale = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale]
''',
    "23_Softmax_Temperature.py": '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dim after dividing by a temperature."""

    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, logits):
        shifted = logits - logits.amax(dim=-1, keepdim=True)
        return torch.softmax(shifted / self.temperature, dim=-1)


batch_size = 16
dim = 16384
temperature = 0.7


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [temperature]
''',
}

UNRELATED = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x, residual):
        h = torch.nn.functional.silu(self.fc1(x))
        return residual + self.fc2(h).clamp(-3.0, 3.0)


hidden = 512


def get_inputs():
    return [torch.randn(64, hidden), torch.randn(64, hidden)]


def get_init_inputs():
    return [hidden]
'''


def _record(code_file: str, program: str, reference: str, benchmark: str | None, catalog: str) -> Record:
    return Record(language="triton", code=(KERNELS / code_file).read_text(), source="torch-inductor",
                  entry={"kernels": ["k"]},
                  binding={"kind": "inductor", "how": "exact", "program": program, "reference": reference},
                  provenance={"source_kind": "torch-inductor", "license": "BSD-3-Clause", "path": program,
                              "catalog": catalog, "benchmark": benchmark})


@pytest.fixture
def records(tmp_path):
    d = tmp_path / "level2"
    d.mkdir()
    for name, text in BENCH.items():
        (d / name).write_text(text)
    progs = inductor.programs(str(d), benchmark="KernelBench")  # what inductor:DIR?benchmark=KernelBench reads
    assert [p.benchmark for p in progs] == ["KernelBench", "KernelBench"]
    conv, soft = (next(p for p in progs if p.name.endswith(n)) for n in ("7_Conv_GELU_Scale.py",
                                                                          "23_Softmax_Temperature.py"))
    return {
        # harvested from the benchmark's own folder
        "bench_conv": _record("add__triton.py", conv.name, conv.src, conv.benchmark, conv.catalog),
        "bench_softmax": _record("softmax__triton.py", soft.name, soft.src, soft.benchmark, soft.catalog),
        # from elsewhere (a catalog), but its program is the benchmark's softmax problem with other sizes
        "copy_elsewhere": _record("softmax__triton_online.py", "handwritten/softmax_temp",
                                  soft.src.replace("dim = 16384", "dim = 4096"), None, "handwritten"),
        # from elsewhere, a program of no benchmark
        "unrelated": _record("layer_norm__triton.py", "handwritten/mlp", UNRELATED, None, "handwritten"),
    }


def _dedupe(make_ctx, records, benchmarks, name):
    from sftbuild.dedupe import stage

    cfg = Config()
    cfg.dedupe.benchmarks = benchmarks
    ctx = make_ctx(name=name, gpus="none", config=cfg)
    ctx.store.add_records(records.values())
    for st in ("harvest", "bind", "describe", "validate"):
        ctx.store.set_stage_config(st, "h", {})
        ctx.store.put_results([(r.id, st, "h", "ok", None, {}) for r in records.values()])
    report = stage.run(ctx)
    res = ctx.store.results_for("dedupe")
    return {k: res[r.id] for k, r in records.items()}, report


def test_named_benchmark_drops_its_records_and_matching_programs(make_ctx, records):
    by, report = _dedupe(make_ctx, records, ["KernelBench"], "named")
    for k in ("bench_conv", "bench_softmax", "copy_elsewhere"):
        assert by[k]["status"] == "dropped" and by[k]["reason"] == "contaminated", (k, by[k])
        assert by[k]["payload"]["benchmark"] == "KernelBench"
    assert by["bench_conv"]["payload"]["field"] == "provenance"
    assert by["copy_elsewhere"]["payload"]["field"] == "reference"
    assert by["copy_elsewhere"]["payload"]["item"].endswith("23_Softmax_Temperature.py")
    assert by["unrelated"]["status"] == "ok"
    assert report["counts"]["by_reason"] == {"contaminated": 3}


@pytest.mark.parametrize("benchmarks", [[], ["TritonBench"]])
def test_benchmark_not_named_is_kept(make_ctx, records, benchmarks):
    by, report = _dedupe(make_ctx, records, benchmarks, f"kept{len(benchmarks)}")
    assert all(v["status"] == "ok" for v in by.values()), by
    assert "contaminated" not in report["counts"]["by_reason"]


def test_a_missing_benchmark_path_is_one_clear_error(make_ctx, records):
    from sftbuild.context import UserError

    with pytest.raises(UserError, match=r"^dedupe.benchmarks: no/such/dir does not exist"):
        _dedupe(make_ctx, records, ["no/such/dir"], "missing")


def test_the_key_is_documented():
    from sftbuild.cli import main

    assert "benchmarks: []  # benchmarks to decontaminate against: a name (e.g. KernelBench)" in template()
    out = CliRunner().invoke(main, ["dedupe", "--help"]).output
    assert "dedupe.benchmarks" in out and "contaminated" in out
