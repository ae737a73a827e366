"""Sources through `stage.run` on a real Store: dirs, git, archives, KernelBench, datasets,
licences, filters, bad sources (each gets a clear error; the others continue), the CLI."""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sftbuild.cli import main
from sftbuild.harvest import stage
from sftbuild.store import Store

DATA = Path(__file__).parents[1] / "data" / "harvest"


def records(ctx):
    return list(ctx.store.records())


def skips(ctx, reason=None):
    return [s for s in ctx.store.skips() if reason is None or s["reason"] == reason]


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                            GIT_COMMITTER_EMAIL="t@t"))


def make_repo(tmp_path) -> tuple[Path, str]:
    repo = tmp_path / "repo"
    shutil.copytree(DATA / "cuda_tree", repo)
    git("init", "-q", cwd=repo)
    git("add", ".", cwd=repo)
    git("commit", "-q", "-m", "one", cwd=repo)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    (repo / "later.cu").write_text("__global__ void later_kernel(float* y) {\n  y[0] = 1;\n  y[1] = 2;\n}\n")
    git("add", ".", cwd=repo)
    git("commit", "-q", "-m", "two", cwd=repo)
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {tmp_path}/hook-ran\n")
    hook.chmod(0o755)
    return repo, sha


# ---- good sources --------------------------------------------------------------
def test_torch_aten_default_with_binding(ctx):
    stats = stage.run(ctx, [])
    assert stats["errors"] == {} and stats["sources"]["torch-aten"] >= 34
    sm = [r for r in records(ctx) if r.name == "softmax_warp_forward"]
    assert sm and sm[0].binding.how == "declared" and sm[0].binding.op == "softmax"
    r = sm[0]
    assert r.provenance["license"] == "BSD-3-Clause" and r.provenance["package"] == "torch"
    assert r.entry["include_sets"] == ["torch"] and r.entry["launch_sites"]
    assert {s["reason"] for s in skips(ctx)} == {"rocm_only", "in_string_literal"}


def test_local_dir_filters_and_licences(ctx, tmp_path):
    d = tmp_path / "src"
    shutil.copytree(DATA / "cuda_tree", d)
    shutil.copy(DATA / "triton_src" / "ops.py", d / "ops.py")
    (d / "binary.cu").write_bytes(b"__global__ void k() {}\0\0\1")
    (d / "latin1.cu").write_bytes("// caf\xe9\n__global__ void k(float* y) {\n y[0]=1;\n}\n".encode("latin-1"))
    with open(d / "huge.cu", "wb") as f:  # 100 MB, sparse
        f.truncate(100 * 1024 * 1024)
    os.symlink("/etc/passwd", d / "outside.cu")
    os.symlink(tmp_path, d / "loop_dir")
    stats = stage.run(ctx, [str(d)])
    assert stats["errors"] == {}
    names = {n for r in records(ctx) for n in r.entry["kernels"]}
    assert {"row_sum_kernel", "square_kernel", "scale_kernel", "rms_norm_kernel", "add_kernel"} <= names
    assert "vendored_kernel" not in names and "generated_kernel" not in names
    reasons = {s["path"]: s["reason"] for s in skips(ctx) if not s["item"]}
    assert reasons["third_party/vendored.cu"] == "vendored"
    assert reasons["generated_kernels.cu"] == "generated"
    assert reasons["binary.cu"] == "binary"
    assert reasons["latin1.cu"] == "not_utf8"
    assert reasons["huge.cu"] == "oversize"
    assert reasons["outside.cu"] == "symlink_outside_root"
    assert reasons["loop_dir"] == "symlink_outside_root"
    lic = {r.name: r.provenance["license"] for r in records(ctx)}
    assert lic["row_sum_kernel"] == "MIT"  # LICENSE file
    assert lic["scale_kernel"] in ("Apache-2.0", "BSD-3-Clause")  # SPDX headers win
    assert {r.provenance["license"] for r in records(ctx) if r.language == "triton"} == {"BSD-3-Clause"}
    tiny = [r for r in records(ctx) if r.name == "tiny_kernel"][0]
    assert ctx.store.result(tiny.id, "harvest")["reason"] == "trivial"


def test_unknown_licence_is_not_guessed(ctx, tmp_path):
    d = tmp_path / "nolicence"
    d.mkdir()
    (d / "k.cu").write_text("__global__ void k(float* y, int n) {\n  int i = threadIdx.x;\n  if (i < n) y[i] = 0;\n}\n")
    stage.run(ctx, [str(d)])
    assert [r.provenance["license"] for r in records(ctx)] == ["unknown"]


def test_git_pinned_no_hooks_and_cache(ctx, tmp_path):
    repo, sha = make_repo(tmp_path)
    stats = stage.run(ctx, [f"file://{repo}@{sha}"])
    assert stats["errors"] == {}, stats["errors"]
    recs = records(ctx)
    assert recs and all(r.provenance["commit"] == sha for r in recs)
    assert "later_kernel" not in {r.name for r in recs}  # pinned to the first commit
    assert not (tmp_path / "hook-ran").exists()
    assert list((ctx.workspace / "cache" / "git").iterdir())
    n = ctx.store.count_records()
    stage.run(ctx, [f"file://{repo}@{sha}"])  # from the cache, no duplicates
    assert ctx.store.count_records() == n


def test_git_unpinned_refused_unless_allowed(ctx, tmp_path):
    repo, _ = make_repo(tmp_path)
    stats = stage.run(ctx, [f"file://{repo}"])
    assert "not pinned" in stats["errors"][f"file://{repo}"]
    ctx.config.harvest.allow_unpinned = True
    stats = stage.run(ctx, [f"file://{repo}"])
    assert stats["errors"] == {} and "later_kernel" in {r.name for r in records(ctx)}


def test_pytorch_checkout_detected(ctx, tmp_path):
    d = tmp_path / "pytorch" / "aten" / "src" / "ATen" / "native" / "cuda"
    d.mkdir(parents=True)
    shutil.copy(DATA / "cuda_tree" / "kernels.cu", d / "Demo.cu")
    (d.parent / "Other.cu").write_text("__global__ void not_in_glob(float* y) {\n y[0] = 1;\n y[1] = 1;\n}\n")
    stats = stage.run(ctx, [str(tmp_path / "pytorch")])
    assert stats["errors"] == {}
    recs = records(ctx)
    assert recs and all(r.provenance["source_kind"] == "pytorch" for r in recs)
    assert "not_in_glob" not in {r.name for r in recs}


def test_kernelbench_dir(ctx):
    stats = stage.run(ctx, [str(DATA / "kernelbench")])
    assert stats["errors"] == {} and stats["sources"][str(DATA / "kernelbench")] == 3
    recs = {r.name: r for r in records(ctx)}
    assert set(recs) == {"relu_new", "scale", "selfcontained"}
    assert all(r.language == "kernelbench" and r.binding.kind == "kernelbench" and r.binding.how == "exact"
               for r in recs.values())
    assert recs["relu_new"].entry["backend"] == "triton" and recs["scale"].entry["backend"] == "cuda"
    assert "class Model(" in recs["scale"].binding.reference
    assert "ModelNew" not in recs["selfcontained"].binding.reference


def test_kernelbench_dir_keeps_its_plain_kernels(ctx, tmp_path):
    d = tmp_path / "kb"
    shutil.copytree(DATA / "kernelbench", d)
    shutil.copy(DATA / "cuda_tree" / "kernels.cu", d / "kernels.cu")
    shutil.copy(DATA / "triton_src" / "ops.py", d / "ops.py")
    stats = stage.run(ctx, [str(d)])
    assert stats["errors"] == {}
    by_path: dict = {}
    for r in records(ctx):
        by_path.setdefault(r.provenance["path"], []).append(r)
    assert {r.language for r in by_path["kernels.cu"]} == {"cuda"} and {r.language for r in by_path["ops.py"]} == {
        "triton"}
    # each pair is one record, never harvested again as a plain module
    assert [r.language for r in by_path["relu_new.py"]] == ["kernelbench"] and "relu.py" not in by_path


def test_a_name_that_is_not_utf8_is_skipped_and_the_rest_harvested(ctx, tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    for name in (b"good.cu", b"bad\xff.cu", b"sub\xfe/k.cu"):
        path = os.path.join(os.fsencode(d), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copy(DATA / "cuda_tree" / "kernels.cu", path)
    shutil.copy(DATA / "triton_src" / "ops.py", os.path.join(os.fsencode(d), b"tri\xfd.py"))
    stats = stage.run(ctx, [str(d)])
    assert stats["errors"] == {} and stats["sources"][str(d)] >= 5
    assert {r.provenance["path"] for r in records(ctx)} == {"good.cu"}
    bad = {s["path"] for s in skips(ctx, "not_utf8_name")}
    assert bad == {"bad\\xff.cu", "sub\\xfe/", "tri\\xfd.py"}, bad


def test_datasets_kernelbook_and_ai_cuda_engineer(ctx, tmp_path):
    kb = tmp_path / "kernelbook.jsonl"
    kb.write_text("\n".join(json.dumps(r) for r in [
        {"python_code": "class Model: pass\ndef get_inputs(): return []", "triton_code": "@triton.jit\ndef k(): pass",
         "repo_name": "someone/repo", "licenses": ["MIT"], "sha": "a" * 40},
        {"python_code": "class Model: pass", "triton_code": "import triton\n", "repo_name": "x/y",
         "licenses": [], "sha": "b" * 40},
    ]) + "\n")
    import pandas as pd

    pq = tmp_path / "ai_cuda_engineer.parquet"
    pd.DataFrame({"PyTorch_Code_Module": ["class Model: pass"] * 2,
                  "CUDA_Code": ["__global__ void k() {}\n// 1", "__global__ void k() {}\n// 2"],
                  "Correct": [True, False], "Op_Name": ["relu", "gelu"]}).to_parquet(pq)
    stats = stage.run(ctx, [str(kb), str(pq)])
    assert stats["errors"] == {}
    recs = records(ctx)
    assert len(recs) == 4
    by_name = {r.name: r for r in recs}
    assert by_name["someone/repo"].provenance["license"] == "MIT"
    assert by_name["someone/repo"].provenance["commit"] == "a" * 40
    assert by_name["x/y"].provenance["license"] == "unknown"
    assert ctx.store.result(by_name["gelu"].id, "harvest")["reason"] == "marked_incorrect"


def test_archive_source_and_licence(ctx, tmp_path):
    arc = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(arc, "w:gz") as t:
        t.add(DATA / "triton_src" / "ops.py", "pkg-1.0/pkg/ops.py")
    stats = stage.run(ctx, [str(arc)])
    assert stats["errors"] == {} and stats["sources"][str(arc)] == 3


# ---- bad sources -----------------------------------------------------------------
def traversal_archive(tmp_path) -> Path:
    arc = tmp_path / "evil-1.0.tar.gz"
    with tarfile.open(arc, "w:gz") as t:
        data = b"pwned"
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return arc


def test_bad_sources_each_fail_clearly_and_others_continue(ctx, tmp_path):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("sources: [unclosed\n")
    arc = traversal_archive(tmp_path)
    specs = ["https://127.0.0.1:9/nothing.git@0123456789abcdef0123456789abcdef01234567",
             str(tmp_path / "missing"), str(bad_yaml), str(arc), "no-such-registry-name", "torch-aten"]
    stats = stage.run(ctx, specs)
    err = stats["errors"]
    assert "git clone failed" in err[specs[0]] and "network" in err[specs[0]]
    assert "does not exist" in err[specs[1]]
    assert "not valid YAML" in err[specs[2]]
    assert "path-traversal" in err[specs[3]]
    assert "unknown source" in err[specs[4]]
    assert not (tmp_path.parent / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()
    assert stats["sources"]["torch-aten"] >= 34


def test_config_registries_invalid_yaml_reported(ctx, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources:\n  - {name: x\n")
    ctx.config.harvest.registries = [str(bad)]
    stats = stage.run(ctx, ["torch-aten"])
    assert "not valid YAML" in stats["errors"][str(bad)] and stats["sources"]["torch-aten"] >= 34


def test_user_registry_file(ctx, tmp_path):
    reg = tmp_path / "mine.yaml"
    reg.write_text(f"sources:\n  - name: mine\n    kind: dir\n    location: {DATA / 'cuda_tree'}\n"
                   f"    license: BSD-3-Clause\n    include: ['*.cu']\n"
                   f"    bindings:\n      - {{kernel: square_kernel, op: square}}\n")
    stats = stage.run(ctx, [str(reg)])
    assert stats["errors"] == {} and stats["sources"]["mine"] >= 4
    sq = [r for r in records(ctx) if r.name == "square_kernel"][0]
    assert {k: getattr(sq.binding, k) for k in ("kind", "op", "how", "by")} == {"kind": "op", "op": "square",
                                                                       "how": "declared", "by": "source:mine"}


def test_cli_exit_codes(tmp_path):
    runner = CliRunner()
    ws = str(tmp_path / "ws")
    res = runner.invoke(main, ["harvest", "-w", ws, "-q", str(tmp_path / "missing"), str(DATA / "cuda_tree")])
    assert res.exit_code != 0 and "1 of 2 sources could not be harvested" in res.output, res.output
    assert "does not exist" in res.output and "sources: " + str(DATA / "cuda_tree") in res.output
    res = runner.invoke(main, ["harvest", "-w", ws, "-q", str(tmp_path / "missing")])
    assert res.exit_code != 0 and "no source could be harvested" in res.output
    res = runner.invoke(main, ["harvest", "-w", ws, "-q", f"file://{tmp_path}/nothing"])
    assert res.exit_code != 0 and "--allow-unpinned" in res.output


def test_inductor_needs_gpu_message_on_cpu(ctx):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    stats = stage.run(ctx, ["torch-inductor", "torch-aten"])
    assert "needs a CUDA GPU" in stats["errors"]["torch-inductor"]
    assert stats["sources"]["torch-aten"] >= 34


# ---- resumability ------------------------------------------------------------------
def test_kill9_then_rerun_gives_same_records(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(300):
        (corpus / f"k{i}.cu").write_text(
            f"__global__ void kernel_{i}(float* y, int n) {{\n  int j = threadIdx.x;\n  if (j < n) y[j] = {i};\n}}\n")
    cmd = [sys.executable, "-m", "sftbuild.cli", "harvest", "-q", "-w"]
    p = subprocess.Popen(cmd + [str(tmp_path / "a"), str(corpus)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2.5)
    p.send_signal(signal.SIGKILL)
    p.wait()
    subprocess.run(cmd + [str(tmp_path / "a"), str(corpus)], check=True, capture_output=True)
    subprocess.run(cmd + [str(tmp_path / "b"), str(corpus)], check=True, capture_output=True)
    a, b = Store(tmp_path / "a"), Store(tmp_path / "b")
    ids_a = [r.id for r in a.records()]
    assert len(ids_a) == len(set(ids_a)) == 300
    assert set(ids_a) == {r.id for r in b.records()}
