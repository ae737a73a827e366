"""Source kinds and file filters are registered plug-ins: every spec form parses to the kind
it always did, registry entries name a registered kind, and the configured file filters
are the ones both the stage (paths) and the CPU workers (bytes) apply."""
from __future__ import annotations

import dataclasses
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from sftbuild.config import ConfigError
from sftbuild.executor import LocalExecutor
from sftbuild.harvest import stage
from sftbuild.harvest.filters import FILE_FILTERS, FileFilter
from sftbuild.harvest.kinds import KINDS
from sftbuild.harvest.sources import SourceError
from sftbuild.harvest.specs import load_registry, parse_spec

DATA = Path(__file__).parents[1] / "data" / "harvest"
KERNEL = "__global__ void scale_kernel(float* y, int n) {\n  int i = threadIdx.x;\n  if (i < n) y[i] *= 2;\n}\n"


def one(spec: str) -> dict:
    (src,) = parse_spec(spec, load_registry())
    return {"kind": src.kind, "location": src.location, "revision": src.revision, "network": src.network}


# ---- source kinds ----------------------------------------------------------------
@pytest.mark.parametrize("spec, want", [
    ("torch-aten", {"kind": "torch-aten", "location": "installed", "revision": "", "network": False}),
    ("liger-kernel", {"kind": "pip", "location": "liger-kernel", "revision": "0.5.10", "network": True}),
    ("pip:liger-kernel==0.5.10", {"kind": "pip", "location": "liger-kernel", "revision": "0.5.10", "network": True}),
    ("pip:triton", {"kind": "pip", "location": "triton", "revision": "", "network": True}),
    ("inductor:catalog", {"kind": "torch-inductor", "location": "catalog", "revision": "", "network": False}),
    ("https://github.com/a/b.git@v1.0", {"kind": "git", "location": "https://github.com/a/b.git", "revision": "v1.0",
                                         "network": True}),
    ("git+https://host/x.git@abc1234", {"kind": "git", "location": "https://host/x.git", "revision": "abc1234",
                                        "network": True}),
    ("ssh://git@host/x.git", {"kind": "git", "location": "ssh://git@host/x.git", "revision": "", "network": True}),
    ("file:///srv/repo@main", {"kind": "git", "location": "file:///srv/repo", "revision": "main", "network": False}),
])
def test_string_specs_parse_as_before(spec, want):
    assert one(spec) == want


def test_path_specs_find_their_kind(tmp_path):
    (tmp_path / "pt" / "aten" / "src" / "ATen").mkdir(parents=True)
    shutil.copytree(DATA / "kernelbench", tmp_path / "kb")
    shutil.copytree(DATA / "cuda_tree", tmp_path / "plain")
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / "pkg-1.0.tar.gz").write_bytes(b"")
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "pkg-1.0.tar.gz").write_bytes(b"")
    (tmp_path / "mixed" / "k.cu").write_text(KERNEL)
    for name in ("a.tar.gz", "w-1-py3-none-any.whl", "d.jsonl", "d.parquet", "prog.py"):
        (tmp_path / name).write_bytes(b"")
    kinds = {name: one(str(tmp_path / name))["kind"] for name in
             ("pt", "kb", "plain", "wh", "mixed", "a.tar.gz", "w-1-py3-none-any.whl", "d.jsonl", "d.parquet",
              "prog.py")}
    assert kinds == {"pt": "pytorch", "kb": "kernelbench", "plain": "dir", "wh": "wheelhouse", "mixed": "dir",
                     "a.tar.gz": "archive", "w-1-py3-none-any.whl": "archive", "d.jsonl": "dataset",
                     "d.parquet": "dataset", "prog.py": "torch-inductor"}
    assert one(str(tmp_path / "plain"))["location"] == str((tmp_path / "plain").resolve())


@pytest.mark.parametrize("name, message", [
    ("missing.tar.gz", "archive {spec} does not exist"),
    ("missing.jsonl", "dataset file {spec} does not exist"),
    ("missing.yaml", "registry file {spec} does not exist"),
    ("missing", "path {spec} does not exist"),
    ("notes.txt", "path {spec} is neither a folder, a .py module nor a dataset file"),
    ("dangling", "path {spec} is a broken symlink"),
])
def test_bad_path_specs_say_why(tmp_path, name, message):
    (tmp_path / "notes.txt").write_text("hello")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    spec = str(tmp_path / name)
    with pytest.raises(SourceError) as e:
        parse_spec(spec, {})
    assert str(e.value) == message.format(spec=spec)


def test_unknown_name_lists_the_registry():
    with pytest.raises(SourceError, match=r"unknown source 'nosuch': not a registry name \(.*torch-aten"):
        parse_spec("nosuch", load_registry())


def test_registry_file_spec_and_unknown_kind(tmp_path):
    reg = tmp_path / "mine.yml"
    reg.write_text(f"sources:\n  - {{name: a, kind: dir, location: {tmp_path}}}\n"
                   f"  - {{name: b, kind: wheelhouse, location: {tmp_path}}}\n")
    assert [(s.name, s.kind) for s in parse_spec(str(reg), {})] == [("a", "dir"), ("b", "wheelhouse")]
    reg.write_text("sources:\n  - {name: a, kind: tarball, location: x}\n")
    with pytest.raises(SourceError, match=r"sources\[0\]: source 'a': unknown kind 'tarball' \(known: .*archive"):
        load_registry(reg)


def test_every_builtin_registry_entry_names_a_registered_kind():
    assert {s.kind for s in load_registry().values()} <= set(KINDS.names())
    assert {"torch-aten", "pytorch", "torch-inductor", "git", "dir", "pip", "archive", "kernelbench",
            "dataset", "wheelhouse"} <= set(KINDS.names())


# ---- file filters ----------------------------------------------------------------
def test_default_filters_in_their_order():
    # every registered filter runs by default; the built-in ones keep their order among them
    names = [f.name for f in FILE_FILTERS.configured({})]
    builtin = ["vendored", "other_accelerator", "oversize", "binary", "not_utf8", "generated"]
    assert sorted(names) == sorted(FILE_FILTERS.names()) and [n for n in names if n in builtin] == builtin


def test_backend_folders_of_other_accelerators_are_skipped_with_their_reason():
    f = FILE_FILTERS.create("other_accelerator")
    assert "another accelerator" in f.check_path("liger_kernel/ops/backends/_ascend/ops/rms_norm.py", 10)
    assert f.check_path("flag_gems/runtime/backend/_kunlunxin/ops/abs.py", 10)
    assert f.check_path("flag_gems/runtime/backend/_nvidia/ops/abs.py", 10) is None  # a GPU backend stays
    assert f.check_path("flag_gems/ops/abs.py", 10) is None
    assert f.check_path("kernels/ascend/rms.py", 10) is None  # a vendor name alone, not a backend folder
    g = FILE_FILTERS.create("other_accelerator", {"names": ["_mychip"]})
    assert g.check_path("pkg/backends/_mychip/k.py", 10)
    # Triton written for another chip, named so: under backends/ or anywhere
    assert f.check_path("fla/ops/common/backends/triton_ascend/chunk_o.py", 10)
    assert f.check_path("fla/modules/norm/triton_ascend/l2norm.py", 10)
    assert f.check_path("fla/modules/activations/triton_ascend.py", 10)
    assert f.check_path("fla/modules/activations/ops.py", 10) is None
    assert f.check_path("fla/ops/common/backends/tilelang/chunk_o.py", 10) is None


def tree(tmp_path) -> Path:
    d = tmp_path / "src"
    shutil.copytree(DATA / "cuda_tree", d)
    (d / "mylib").mkdir()
    (d / "mylib" / "k.cu").write_text(KERNEL.replace("scale_kernel", "mylib_kernel"))
    (d / "binary.cu").write_bytes(KERNEL.replace("scale_kernel", "binary_kernel").encode() + b"\0")
    (d / "big.cu").write_text(KERNEL.replace("scale_kernel", "big_kernel") + "// pad\n" * 100)
    return d


def skip_reasons(ctx) -> dict[str, str]:
    return {s["path"]: s["reason"] for s in ctx.store.skips() if not s["item"]}


def test_filters_configured_by_name(ctx, tmp_path):
    d = tree(tmp_path)
    stage.run(ctx, [str(d)])
    assert {p: r for p, r in skip_reasons(ctx).items()} == {
        "third_party/vendored.cu": "vendored", "generated_kernels.cu": "generated", "binary.cu": "binary"}
    ctx.config.harvest.file_filters = {"vendored": {"dirs": ["mylib"]}, "oversize": {"max_bytes": 300},
                                       "binary": False, "generated": False}
    stats = stage.run(ctx, [str(d)])
    assert stats["errors"] == {}
    reasons = skip_reasons(ctx)
    assert reasons["mylib/k.cu"] == "vendored" and reasons["big.cu"] == "oversize"
    names = {n for r in ctx.store.records() for n in r.entry["kernels"]}
    assert {"binary_kernel", "generated_kernel"} <= names  # off: read and extracted


def test_bad_filter_selection_is_a_config_error(ctx):
    ctx.config.harvest.file_filters = {"nope": {}}
    with pytest.raises(ConfigError, match=r"harvest.file_filters.nope: unknown file_filter \(known: .*vendored"):
        stage.run(ctx, ["torch-aten"])
    ctx.config.harvest.file_filters = {"oversize": {"max_bytes": 0}}
    with pytest.raises(ConfigError, match=r"harvest.file_filters.oversize.max_bytes: must be >= 1"):
        stage.run(ctx, ["torch-aten"])


class Shouty(FileFilter):
    """Files that shout."""
    name = "shouty"

    @dataclasses.dataclass
    class Params:
        word: str = "SHOUT"

    def check_data(self, rel, data):
        return f"says {self.params.word}" if self.params.word.encode() in data else None


def test_a_registered_data_filter_runs_on_the_workers(ctx, tmp_path, monkeypatch):
    monkeypatch.setitem(FILE_FILTERS._members, "shouty", Shouty)
    d = tmp_path / "src"
    d.mkdir()
    for i in range(4):
        (d / f"k{i}.cu").write_text(("// LOUD\n" if i % 2 else "") + KERNEL.replace("scale_kernel", f"k{i}"))
    ctx.config.harvest.file_filters = {"shouty": {"word": "LOUD"}}
    ctx.executor = LocalExecutor(cpu_workers=2, gpus="none", progress=False)  # real worker processes
    try:
        stage.run(ctx, [str(d)])
    finally:
        ctx.executor.close()
    assert skip_reasons(ctx) == {"k1.cu": "shouty", "k3.cu": "shouty"}
    assert {s["detail"] for s in ctx.store.skips()} == {"says LOUD"}


# ---- the wheelhouse kind ----------------------------------------------------------
TRITON = "import triton\n\n\n@triton.jit\ndef double_kernel(x_ptr, n):\n    i = 0\n    x = 1\n    y = x * 2\n"


def wheelhouse(tmp_path) -> Path:
    import zipfile

    wh = tmp_path / "wheelhouse"
    wh.mkdir()
    with zipfile.ZipFile(wh / "tritonops-1.0-py3-none-any.whl", "w") as z:
        z.writestr("tritonops/ops.py", TRITON)
        z.writestr("tritonops-1.0.dist-info/METADATA", "Metadata-Version: 2.4\nName: tritonops\nVersion: 1.0\n"
                                                       "License-Expression: MIT\n\n")
    src = tmp_path / "sdist"
    (src / "cudaops-0.2" / "csrc").mkdir(parents=True)
    (src / "cudaops-0.2" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: cudaops\nVersion: 0.2\n"
                                                  "License: Apache-2.0\n\n")
    (src / "cudaops-0.2" / "csrc" / "scale.cu").write_text(KERNEL)
    with tarfile.open(wh / "cudaops-0.2.tar.gz", "w:gz") as t:
        t.add(src / "cudaops-0.2", "cudaops-0.2")
    (wh / "broken-0.1.zip").write_bytes(b"not a zip")
    return wh


def test_wheelhouse_each_archive_with_its_package_and_licence(ctx, tmp_path):
    wh = wheelhouse(tmp_path)
    stats = stage.run(ctx, [str(wh)])
    assert stats["errors"] == {} and stats["sources"][str(wh)] == 2
    recs = {r.name: r for r in ctx.store.records()}
    assert set(recs) == {"double_kernel", "scale_kernel"}
    t, c = recs["double_kernel"].provenance, recs["scale_kernel"].provenance
    assert (t["source_kind"], t["package"], t["version"], t["license"], t["path"]) == \
        ("wheelhouse", "tritonops", "1.0", "MIT", "tritonops/ops.py")
    assert (c["package"], c["version"], c["license"], c["archive"]) == \
        ("cudaops", "0.2", "Apache-2.0", "cudaops-0.2.tar.gz")
    assert recs["double_kernel"].language == "triton" and recs["scale_kernel"].language == "cuda"
    bad = [s for s in ctx.store.skips() if s["reason"] == "bad_archive"]
    assert [s["path"] for s in bad] == ["broken-0.1.zip"] and "cannot unpack" in bad[0]["detail"]
    n = ctx.store.count_records()
    stage.run(ctx, [str(wh)])  # unpacked once, from the cache after
    assert ctx.store.count_records() == n and len(list((ctx.workspace / "cache" / "archive").iterdir())) == 2
