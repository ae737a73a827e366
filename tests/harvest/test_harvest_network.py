"""A real package from PyPI (skipped when the download fails, e.g. offline)."""
from __future__ import annotations

import ast

import pytest

from sftbuild.harvest import stage
from sftbuild.harvest.triton_extract import count_jit, may_define_kernels


@pytest.mark.network
def test_liger_kernel_recall(tmp_path, make_ctx):
    ctx = make_ctx(gpus="none", cpu_workers=2, echo=print)
    store = ctx.store
    spec = "pip:liger-kernel==0.5.10"
    stats = stage.run(ctx, [spec])
    if spec in stats["errors"]:
        pytest.skip(f"download failed: {stats['errors'][spec]}")
    tree = next((tmp_path / "ws" / "cache" / "pip").iterdir()) / "tree"
    total = sum(count_jit(p.read_text()) for p in tree.rglob("*.py") if may_define_kernels(p.read_bytes()))
    extracted = sum(len(r.entry["kernels"]) for r in store.records())
    listed = sum(1 for s in store.skips() if s["item"])
    print(f"\nliger-kernel 0.5.10: {total} @triton.jit: {extracted} extracted, {listed} listed")
    assert extracted + listed == total
    assert {r.provenance["license"] for r in store.records()} <= {"BSD-2-Clause", "Apache-2.0"}
    for r in store.records():
        ast.parse(r.code)
