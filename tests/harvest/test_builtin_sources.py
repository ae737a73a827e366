"""`builtin`, the default sources: ATen everywhere; with a GPU also the program catalog and the pinned
packages whose server answers (one line for each left out); catalog compiles kept by content, so a cut
harvest resumes. No test here harvests: resolving the selection is what changed."""
from __future__ import annotations

import pytest

from sftbuild.harvest import inductor, stage
from sftbuild.harvest import sources as S
from sftbuild.harvest import specs
from sftbuild.harvest.catalog import Program


def _gpu_ctx(make_ctx, said):
    ctx = make_ctx(echo=said.append)
    ctx.executor.__dict__["gpus"] = ["0"]  # a GPU, as the executor would count it (nothing runs on it)
    return ctx


def test_builtin_on_a_cpu_machine_is_aten_only(make_ctx):
    said = []
    ctx = make_ctx(gpus="none", echo=said.append)
    assert ctx.config.harvest.sources == ["builtin"]
    assert [s.name for s in stage.resolve(ctx, [])] == ["torch-aten"] and said == []


def test_builtin_with_a_gpu_takes_the_catalog_and_skips_an_unreachable_index(make_ctx, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # the discard port: nothing listens
    said = []
    chosen = stage.resolve(_gpu_ctx(make_ctx, said), [])
    assert [s.name for s in chosen] == ["torch-aten", "torch-inductor"]
    assert said == ["harvest: source liger-kernel skipped: it needs the network and "
                    "http://127.0.0.1:9/simple cannot be reached"]


def test_a_reachable_index_keeps_the_packages(make_ctx, monkeypatch):
    tried = []
    monkeypatch.setattr(S, "reachable", lambda url: tried.append(url) or True)
    said = []
    names = [s.name for s in stage.resolve(_gpu_ctx(make_ctx, said), [])]
    assert names == ["torch-aten", "torch-inductor", "liger-kernel"] and said == []
    assert tried == ["https://pypi.org/simple"]


def test_a_downloaded_package_needs_no_network(make_ctx, monkeypatch):
    ctx = make_ctx()
    src = specs.load_registry()["liger-kernel"]
    kind = stage.KINDS.create("pip")
    assert kind.endpoint(src, ctx.workspace, ctx.config.harvest) == "https://pypi.org/simple"
    done = S.cache_dir(ctx.workspace, ctx.config.harvest) / "pip" / "liger-kernel==0.5.10" / ".sftbuild-done"
    done.parent.mkdir(parents=True)
    done.write_text("liger_kernel-0.5.10.tar.gz\n")
    assert kind.endpoint(src, ctx.workspace, ctx.config.harvest) is None


def test_reachable_says_no_quickly_for_a_closed_port_and_a_bad_url():
    assert S.reachable("http://127.0.0.1:9/", timeout=2) is False
    assert S.reachable("https://[::1/", timeout=2) is False  # not even a URL: unreachable, not a traceback
    assert S.reachable("/srv/local/folder") is True  # a path: nothing to reach


def test_a_registry_default_must_be_one_it_knows(tmp_path):
    reg = tmp_path / "r.yaml"
    reg.write_text("sources:\n  - {name: x, kind: dir, location: /tmp, default: always}\n")
    with pytest.raises(S.SourceError, match="default must be one of"):
        specs.load_registry(reg)


def test_catalog_compiles_are_kept_by_content_so_a_cut_harvest_resumes(tmp_path, monkeypatch):
    progs = [Program(f"p{i}", f"src {i}", catalog="test") for i in range(3)]
    compiled = []

    def fake(todo, device="cuda", processes=0):
        for p in todo:
            compiled.append(p.name)
            if p.name == "p2":
                yield p, f"{inductor.PROCESS_FAILED} (timeout: no result within 600 s)"
            else:
                yield p, p.name if p.name == "p1" else inductor.Compiled(["code"], [["x"]], "tensor", "float32")

    monkeypatch.setattr(inductor, "compile_isolated", fake)
    first = dict((p.name, c) for p, c in inductor.compile_cached(progs, tmp_path / "cache"))
    again = dict((p.name, c) for p, c in inductor.compile_cached(progs, tmp_path / "cache"))
    assert compiled == ["p0", "p1", "p2", "p2"]  # only the program whose process died is compiled again
    assert again == first and isinstance(again["p0"], inductor.Compiled) and again["p1"] == "p1"
    progs[0] = progs[0]._replace(src="src 0, edited")
    list(inductor.compile_cached(progs, tmp_path / "cache"))
    assert compiled[-2:] == ["p0", "p2"]  # a changed program is a new compile
