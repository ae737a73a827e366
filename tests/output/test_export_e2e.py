"""Export end to end on a fixture workspace (tests/output/fixture.py): the gate, every file loading
with `datasets`, verl and TRL columns, the card's YAML and funnel, splits, and exports that are never
lost to an empty or smaller one."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from sftbuild import config as C
from sftbuild.producers import producers
from sftbuild.store import Store
from tests.core.test_cli import invoke
from tests.output import fixture

CONFIGS = {"sft_messages", "sft_prompt_completion", "sft_alpaca", "rlvr_verl", "rlvr_trl"}


def _review_all(ws: str) -> None:
    assert invoke("review", "sample", "-q", "-w", ws).exit_code == 0
    s = Store(ws)
    sampled = [row["record_id"] for row in s.review_rows()]
    s.close()
    for rid in sampled:
        assert invoke("review", "verdict", rid, "accept", "--reviewer", "ann", "-w", ws).exit_code == 0


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The fixture workspace, reviewed and exported once; tests read it (copy it before writing)."""
    root = tmp_path_factory.mktemp("export")
    ws = str(root / "ws")
    recs = fixture.build(ws)
    r = invoke("export", "-q", "-w", ws)
    assert r.exit_code != 0 and "waiting for review" in r.output  # refused before verdicts
    assert not (root / "ws" / "export").exists()
    _review_all(ws)
    r = invoke("export", "-q", "-w", ws)  # accepted after
    assert r.exit_code == 0, r.output
    return root / "ws", recs


def _load(path, config=None, **kw):
    import datasets  # 2 s to import: only where used, not in every test process's collection

    return datasets.load_dataset(str(path), config, cache_dir=str(Path(path).parent / "hf-cache"), **kw)


def test_every_export_file_loads_with_datasets(exported):
    import datasets

    ws, recs = exported
    out = ws / "export"
    default = _load(out)
    assert set(default) == {"train"} and "messages" in default["train"].column_names
    for config in CONFIGS:
        ds = _load(out, config)
        assert ds["train"].num_rows > 0, config
    files = sorted(out.glob("data/*/*.parquet")) + sorted(out.glob("jsonl/*/*.jsonl"))
    assert len(files) == 2 * len(CONFIGS)
    for f in files:
        kind = "parquet" if f.suffix == ".parquet" else "json"
        ds = datasets.load_dataset(kind, data_files=str(f), split="train", cache_dir=str(ws / "hf-cache"))
        assert ds.num_rows > 0 and "id" in (ds.column_names if "verl" not in f.parts[-2] else ds[0]["extra_info"]), f
    # 4 GPU-checked CUDA records (of 6: one dropped, one waiting), 3 KernelBench pairs, 3 Inductor kernels
    gpu_ids = {r.id for r in recs["cuda"][:4] + recs["kernelbench"] + recs["inductor"]}
    rows = default["train"]
    assert set(rows["id"]) == gpu_ids and rows.num_rows == 4 * len(gpu_ids)  # en/zh x brief/detailed
    code = {r.id: r.code for rs in recs.values() for r in rs}
    assert all(row["messages"][1]["content"] == code[row["id"]] for row in rows)  # byte for byte


def test_every_row_carries_provenance_validation_and_review(exported):
    ws, recs = exported
    rows = _load(ws / "export", "sft_prompt_completion")["train"]
    for row in rows:
        assert row["language"] in ("cuda", "triton") and row["source"] and row["license"]
        assert row["op"] or row["program"]
        v = row["validation"]
        assert v["where"] == "gpu" and v["gpu"] == "NVIDIA H200" and v["torch"] == "2.11.0"
        assert v["worst_max_rel"] is not None and v["speedup"] > 0 and v["trials"] == 2
    sampled = [row for row in rows if row["review"]["sampled"]]
    assert sampled and all(row["review"]["verdict"] == "accept" and row["review"]["reviewer"] == "ann"
                           for row in sampled)
    kb = next(row for row in rows if row["binding"] == "kernelbench")
    assert kb["language"] == "triton" and kb["program"].startswith("level1/")


def test_verl_columns_as_verl_documents_them(exported):
    ws, _ = exported
    ds = _load(ws / "export", "rlvr_verl")["train"]
    assert ds.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    row = ds[0]
    assert isinstance(row["data_source"], str) and row["ability"]
    assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"]
    assert row["reward_model"]["style"] == "rule"
    task = json.loads(row["reward_model"]["ground_truth"])
    assert {"task_id", "language", "binding", "entry", "baseline_ms"} <= set(task)
    assert {"index", "split", "id", "license", "validation"} <= set(row["extra_info"])
    assert sorted(ds["extra_info"], key=lambda e: e["index"])[0]["index"] == 0


def test_trl_columns_as_grpo_trainer_passes_them(exported):
    ws, _ = exported
    ds = _load(ws / "export", "rlvr_trl")["train"]
    assert {"prompt", "task", "task_id", "id", "language", "license", "validation"} <= set(ds.column_names)
    row = ds[0]
    assert row["prompt"] == [{"role": "user", "content": row["prompt"][0]["content"]}]  # conversational
    assert json.loads(row["task"])["task_id"] == row["task_id"] == row["id"]
    assert "completion" not in ds.column_names and "completions" not in ds.column_names  # names TRL passes itself


def test_card_yaml_parses_and_its_funnel_is_the_store_funnel(exported):
    ws, recs = exported
    text = (ws / "export" / "README.md").read_text(encoding="utf-8")
    head = yaml.safe_load(text.split("---\n")[1])
    assert head["license"] == "other" and head["license_name"]  # MIT and BSD-3-Clause
    assert head["task_categories"] == ["text-generation"] and head["size_categories"] == ["n<1K"]
    assert "gpu-kernels" in head["tags"]
    configs = {c["config_name"]: c for c in head["configs"]}
    assert set(configs) == CONFIGS and configs["sft_messages"].get("default") is True
    assert all((ws / "export" / f["path"]).is_file() for c in configs.values() for f in c["data_files"])
    status = invoke("status", "-w", str(ws)).output.strip()
    card_funnel = re.search(r"## Funnel\n.*?```\n(.*?)\n```", text, re.S).group(1)
    assert card_funnel == status
    assert "export    ok=10  dropped:interpreter_only=4" in card_funnel
    assert "| MIT | 7 |" in text and "| BSD-3-Clause | 3 |" in text and "| torch-inductor | 3 |" in text
    assert "NVIDIA H200" in text and "570.86.15" in text and "release 12.8" in text
    assert re.search(r"defect rate <= \d+\.\d% at 95% confidence", text)
    assert "interpreter_only: 4" in text
    for png in ("funnel", "speedup", "errors"):
        data = (ws / "export" / "plots" / f"{png}.png").read_bytes()
        assert data.startswith(b"\x89PNG") and f"plots/{png}.png" in text


def test_pair_and_program_instructions_quote_their_reference(exported):
    ws, recs = exported
    rows = _load(ws / "export", "sft_alpaca")["train"]
    for kind in ("kernelbench", "inductor"):
        for rec in recs[kind]:
            texts = [row["instruction"] for row in rows if row["id"] == rec.id]
            assert len(texts) == 4
            assert all(rec.binding.reference.strip() in t and "```python" in t for t in texts)
    kb = [row["instruction"] for row in rows if row["binding"] == "kernelbench" and row["text_lang"] == "en"]
    assert all("ModelNew" in t and "Triton" in t for t in kb)


def test_interpreter_only_records_get_their_own_split(exported, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(exported[0], ws)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("export: {interpreter_only: split}\n")
    r = invoke("export", "-q", "-w", str(ws), "-c", str(cfg))
    assert r.exit_code == 0, r.output
    ds = _load(ws / "export", "sft_messages")
    assert set(ds) == {"train", "cpu_interpreter"}
    assert set(ds["cpu_interpreter"]["id"]) == {rec.id for rec in exported[1]["triton"]}
    assert all(v["where"] == "cpu_interpreter" and v["gpu"] is None for v in ds["cpu_interpreter"]["validation"])
    text = (ws / "export" / "README.md").read_text()
    assert "checked only in the CPU Triton interpreter" in text and "never on a GPU" in text


def test_an_export_is_never_replaced_by_an_empty_or_smaller_one(exported, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(exported[0], ws)
    out = ws / "export"
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    s = Store(ws)  # upstream change: validate under a new config, every record waiting for a GPU
    s.set_stage_config("validate", "v2", {}, producers("validate"))
    s.put_results([(r.id, "validate", "v2", "waiting", "needs_gpu", {}) for r in s.records()])
    s.close()
    r = invoke("export", "-q", "-w", str(ws))
    assert r.exit_code != 0 and "0 records validated" in r.output and "GPU machine" in r.output
    assert "Traceback" not in r.output
    s = Store(ws)  # two records back: a smaller export needs --force
    kb = [r for r in s.records() if r.language == "kernelbench"][:2]
    s.put_results([(r.id, "validate", "v2", "ok", None, fixture.gpu_payload(1)) for r in kb])
    s.close()
    r = invoke("export", "-q", "-w", str(ws))
    assert r.exit_code != 0 and "fewer than the 10" in r.output and "--force" in r.output
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    r = invoke("export", "-q", "--force", "-w", str(ws))
    assert r.exit_code == 0, r.output
    assert json.loads((out / "export.json").read_text())["records"] == 2
    assert not list(ws.glob(".export*")) and not (ws / "export.old").exists()


def test_unbound_records_are_left_out_unless_asked_for(tmp_path):
    from sftbuild.config import Config
    from sftbuild.context import Context
    from sftbuild.executor import LocalExecutor
    from sftbuild.output import stage

    ws = tmp_path / "ws"
    recs = fixture.build(ws)
    s = Store(ws)
    rid = recs["inductor"][0].id
    kept = {stage: s.result(rid, stage) for stage in ("describe", "validate")}
    s.put_binding(rid, None, reason="no binder found a binding")
    # as if describe and validate had run again for the unbound record and passed it
    s.put_results([(rid, stage, s.stage_config(stage), r["status"], r["reason"], r["payload"]) for stage, r in kept.items()])
    s.close()
    _review_all(str(ws))
    for include, expect in ((False, 9), (True, 10)):
        cfg = Config()
        cfg.export.include_unbound = include
        ctx = Context(Store(ws), cfg, LocalExecutor(cpu_workers=1, progress=False), echo=lambda m: None)
        stats = stage.run(ctx, force=True)
        ctx.store.close()
        assert stats["records"] == expect and stats.get("split_unbound", 0) == int(include)
    assert "`unbound`: 1 records, no reference is bound" in (ws / "export" / "README.md").read_text()
    status = invoke("status", "-w", str(ws)).output
    assert "dropped:interpreter_only=4" in status


def test_push_to_hub_uploads_the_folder(exported, tmp_path, monkeypatch):
    import huggingface_hub

    calls = []

    class FakeApi:
        def create_repo(self, repo_id, **kw):
            calls.append(("create_repo", repo_id, kw))

        def upload_folder(self, **kw):
            calls.append(("upload_folder", kw["repo_id"], kw))
            assert (Path(kw["folder_path"]) / "README.md").is_file()
            return type("Info", (), {"commit_url": f"https://hub.example/{kw['repo_id']}/commit/1"})()

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    ws = tmp_path / "ws"
    shutil.copytree(exported[0], ws)
    r = invoke("export", "-q", "-w", str(ws), "--push-to-hub", "me/kernels")
    assert r.exit_code == 0, r.output
    assert [c[0] for c in calls] == ["create_repo", "upload_folder"]
    assert calls[0][2]["repo_type"] == "dataset" and calls[1][2]["repo_type"] == "dataset"
    assert "hub.example/me/kernels" in r.output
    r = invoke("export", "-q", "-w", str(ws), "--push-to-hub", "not-a-repo")
    assert r.exit_code != 0 and "OWNER/NAME" in r.output and "Traceback" not in r.output


def test_no_empty_success_on_a_machine_without_a_gpu(tmp_path):
    """Every record waits for a GPU: the review sample is empty, so the gate is open, and export
    still refuses with one sentence that says why and what to do, writing nothing."""
    ws = tmp_path / "ws"
    fixture.build(ws)
    s = Store(ws)
    s.set_stage_config("validate", "cpu", {})
    s.put_results([(r.id, "validate", "cpu", "waiting", "needs_gpu", {}) for r in s.records()])
    s.close()
    assert invoke("review", "sample", "-q", "-w", str(ws)).exit_code == 0
    r = invoke("export", "-q", "-w", str(ws))
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert "0 records validated: 16 wait for a GPU; run `sftbuild validate` on a GPU machine" in r.output
    assert not (ws / "export").exists()


def test_exports_hold_no_local_path_of_the_builder(tmp_path, monkeypatch):
    """Records of a local folder: every row's fields, the RLVR task and the card name paths relative to
    the source (the folder itself by its name), never the builder's absolute ones."""
    src = tmp_path / "home" / "builder" / "llm.c"
    ws = tmp_path / "ws"
    made = fixture.records

    def local() -> dict:
        recs = made()
        recs["cuda"] = [dataclasses.replace(r, source=str(src),
                                            provenance={**r.provenance, "url": src.as_uri(),
                                                        "tree": str(ws / "trees" / "0a1b")},
                                            binding=dataclasses.replace(r.binding, launch={
                                                **r.binding.launch, "reference_file": str(src / "dev" / "ref.py")}),
                                            entry={**r.entry, "module": str(ws / "trees" / "0a1b" / "relu.cu")})
                        for r in recs["cuda"]]
        return recs
    monkeypatch.setattr(fixture, "records", local)
    fixture.build(str(ws))
    _review_all(str(ws))
    r = invoke("export", "-q", "-w", str(ws))
    assert r.exit_code == 0, r.output
    written = {p: p.read_text(encoding="utf-8") for p in (ws / "export").rglob("*") if p.suffix in (".jsonl", ".md", ".json")}
    assert len(written) > 5 and not [p for p, text in written.items() if str(tmp_path) in text]
    rows = [json.loads(x) for x in (ws / "export" / "jsonl" / "rlvr_trl" / "train.jsonl").read_text().splitlines()]
    cuda = [row for row in rows if row["source"] == "llm.c"]
    assert cuda and all(row["url"] is None and row["path"].startswith("relu") for row in cuda)
    task = json.loads(cuda[0]["task"])
    assert task["binding"]["reference_file"] == "llm.c/dev/ref.py" and task["entry"]["module"] == "trees/0a1b/relu.cu"
    assert "| llm.c |" in written[ws / "export" / "README.md"]


def test_a_check_version_bump_redoes_exactly_its_verdicts_and_export_refuses_the_older_ones(
        exported, tmp_path, monkeypatch):
    """A Python-only static check at v2: the Triton and KernelBench verdicts wait and export refuses them,
    naming how many; validate redoes exactly those (and what still waited), keeps the CUDA ones."""
    from sftbuild.context import Context
    from sftbuild.producers import waiting
    from sftbuild.executor import LocalExecutor
    from sftbuild.validate import pipeline
    from sftbuild.validate import stage as validate_stage
    from sftbuild.validate.static.triton_launch import TritonLaunch

    ws = tmp_path / "ws"
    shutil.copytree(exported[0], ws)
    store = Store(ws)
    ctx = Context(store=store, config=C.Config(), executor=LocalExecutor(cpu_workers=1, progress=False),
                  echo=lambda s: None, progress=False)
    first = store.results_for("validate")  # the fixture's verdicts, given again by a validator that logs its work
    redone: list[str] = []

    def validate(records, *args):
        for rec in records:
            redone.append(rec.id)
            r = first[rec.id]
            yield rec, r["status"], r["reason"], r["payload"]

    monkeypatch.setattr(pipeline, "validate", validate)
    validate_stage.run(ctx)  # under this code's key: every record once
    assert sorted(redone) == sorted(first) and waiting(store) == []
    waited = {rid for rid, r in first.items() if r["status"] == "waiting"}

    monkeypatch.setattr(TritonLaunch, "version", 2)
    python = {r.id for r in store.records() if r.language in ("triton", "kernelbench") and r.id not in waited}
    assert python and waiting(store) == [f"validate: {len(python)} records wait: static_check triton_launch v1→v2"]
    r = invoke("export", "-q", "-w", str(ws))
    passed = python & {rec.id for rec in store.alive("export")}
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert f"{len(passed)} verdicts were given by an older validator (static_check triton_launch v1→v2)" in r.output
    assert "run `sftbuild validate`" in r.output and not (ws / ".export.new").exists()

    redone.clear()
    validate_stage.run(ctx)
    assert sorted(redone) == sorted(python | waited)  # the CUDA verdicts stand
    assert waiting(store) == [] and store.results_for("validate") == first
    r = invoke("export", "-q", "-w", str(ws))
    assert r.exit_code == 0, r.output
    ctx.executor.close()
    store.close()
