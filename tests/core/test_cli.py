import json

import pytest
from click.testing import CliRunner

from sftbuild.cli import main
from sftbuild.producers import producers
from sftbuild.record import Record
from sftbuild.store import Store


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_every_command_has_an_example():
    for name, cmd in main.commands.items():
        assert "Example:" in (cmd.help or ""), name
        for sub in getattr(cmd, "commands", {}).values():
            assert "Example:" in (sub.help or ""), f"{name} {sub.name}"


def test_init_writes_a_loadable_config(tmp_path):
    p = tmp_path / "sftbuild.yaml"
    r = invoke("init", str(p))
    assert r.exit_code == 0 and p.exists()
    r = invoke("init", str(p))
    assert r.exit_code != 0 and "exists" in r.output


def test_bad_config_is_a_message_not_a_traceback(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("validate: {compile_timeout: soon}\n")
    r = invoke("status", "-w", str(tmp_path / "ws"), "-c", str(p))
    assert r.exit_code != 0
    assert "validate.compile_timeout" in r.output and "Traceback" not in r.output


def test_unknown_source_fails_cleanly(tmp_path):
    r = invoke("harvest", "no-such-source", "-q", "-w", str(tmp_path / "ws"))
    assert r.exit_code != 0 and "no-such-source" in r.output


def test_a_stage_command_prepares_its_records_and_says_when_it_has_nothing_to_do(tmp_path):
    from pathlib import Path

    ws = str(tmp_path / "ws")
    out = invoke("validate", "-q", "-w", ws).output
    assert "there is no sftbuild workspace at" in out  # only harvest and run create one
    Store(ws).close()
    out = invoke("validate", "-q", "-w", ws).output
    assert "validate: nothing to do: `harvest` has not run in this workspace yet" in out
    src = Path(__file__).parents[1] / "data" / "harvest" / "cuda_tree"
    assert invoke("harvest", str(src), "-q", "-w", ws).exit_code == 0
    out = invoke("describe", "-q", "-w", ws).output  # bind runs first: harvest && describe just works
    assert out.startswith("bind: ") and "\ndescribe: " in out and "ok=" in out.split("describe: ")[1]
    out = invoke("describe", "-q", "-w", ws).output
    assert out.strip() == "describe: nothing to do: every record is done under this config; " \
                          "`sftbuild status` shows the funnel"


def _pipeline_store(ws, n=20):
    """A store where n records passed harvest..dedupe, as if the stages had run (with this code)."""
    s = Store(ws)
    recs = [Record(language="cuda", code=f"__global__ void k{i}(float* x) {{ x[0] = {i}; }}\n", source="src",
                   entry={"kernels": [f"k{i}"]}, binding={"op": "relu" if i % 2 else "exp"},
                   provenance={"license": "MIT", "path": f"f{i}.cu"}) for i in range(n)]
    s.add_records(recs)
    for stage in ("harvest", "bind", "describe", "validate", "dedupe"):
        s.set_stage_config(stage, "c", {}, producers(stage))
        payload = {"instructions": {"en:brief": f"Write k{{}}", "zh:brief": "实现"}} if stage == "describe" else \
            {"env": {"gpu": "test GPU"}} if stage == "validate" else {}
        s.put_results([(r.id, stage, "c", "ok", None, payload) for r in recs])
    s.close()
    return recs


def test_review_gate_blocks_export_until_every_verdict(tmp_path):
    ws = str(tmp_path / "ws")
    recs = _pipeline_store(ws)
    r = invoke("export", "-q", "-w", ws)
    assert r.exit_code != 0 and "review" in r.output
    r = invoke("review", "sample", "-q", "-w", ws)
    assert r.exit_code == 0, r.output
    s = Store(ws)
    sampled = [row["record_id"] for row in s.review_rows()]
    s.close()
    # 20 records are fewer than the 59 a zero-defect plan for 5% at 95% needs: all are sampled
    assert len(sampled) == 20
    r = invoke("export", "-q", "-w", ws)
    assert r.exit_code != 0 and "no verdict" in r.output
    r = invoke("review", "verdict", sampled[0][:10], "reject", "--reviewer", "r1", "-w", ws)
    assert r.exit_code != 0 and "reason" in r.output
    for rid in sampled:
        assert invoke("review", "verdict", rid[:10], "accept", "--reviewer", "r1", "-w", ws).exit_code == 0
    r = invoke("export", "-q", "-w", ws)
    assert r.exit_code == 0, r.output
    out = tmp_path / "ws" / "export"
    rows = [json.loads(x) for x in (out / "jsonl" / "sft_alpaca" / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * len(recs)
    by_id = {r.id: r.code for r in recs}
    assert all(row["output"] == by_id[row["id"]] for row in rows)  # byte-exact code
    assert (out / "README.md").read_text().count("## Funnel") == 1
    assert (out / "data" / "rlvr_verl" / "train-00000-of-00001.parquet").exists()


def test_review_status_gate_is_what_export_says(tmp_path):
    """The sample passed, but the records were checked only in the CPU interpreter: both refuse alike."""
    ws = str(tmp_path / "ws")
    recs = _pipeline_store(ws, 4)
    s = Store(ws)
    s.put_results([(r.id, "validate", "c", "ok", None, {}) for r in recs])  # no GPU in the payload
    s.close()
    assert invoke("review", "sample", "-q", "-w", ws).exit_code == 0
    for r in recs:
        assert invoke("review", "verdict", r.id, "accept", "--reviewer", "r1", "-w", ws).exit_code == 0
    refused = invoke("export", "-q", "-w", ws)
    assert refused.exit_code != 0 and "CPU Triton interpreter" in refused.output
    gate = [ln for ln in invoke("review", "status", "-w", ws).output.splitlines() if ln.startswith("export gate:")]
    assert gate == [f"export gate: {refused.output.strip().removeprefix('Error: ')}"]


def test_review_sample_is_seeded(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _pipeline_store(a, 50)
    _pipeline_store(b, 50)
    invoke("review", "sample", "-q", "-w", a)
    invoke("review", "sample", "-q", "-w", b)
    sa, sb = Store(a), Store(b)
    assert [r["record_id"] for r in sa.review_rows()] == [r["record_id"] for r in sb.review_rows()]


def test_rejected_sample_fails_the_gate(tmp_path):
    ws = str(tmp_path / "ws")
    _pipeline_store(ws)
    invoke("review", "sample", "-q", "-w", ws)
    s = Store(ws)
    sampled = [row["record_id"] for row in s.review_rows()]
    s.close()
    invoke("review", "verdict", sampled[0], "reject", "--reason", "wrong", "--reviewer", "r", "-w", ws)
    invoke("review", "verdict", sampled[1], "reject", "--reason", "wrong", "--reviewer", "r", "-w", ws)
    r = CliRunner().invoke(main, ["review", "next", "--reviewer", "r", "-w", ws], input="a" * 18)
    assert "18 verdicts this session" in r.output
    r = invoke("export", "-q", "-w", ws)
    assert r.exit_code != 0 and "failed" in r.output


def test_status_json(tmp_path):
    ws = str(tmp_path / "ws")
    _pipeline_store(ws, 4)
    r = invoke("status", "--json", "-w", ws)
    f = json.loads(r.output)
    assert f["records"] == 4 and f["stages"]["validate"]["ok"] == 4
    assert "src" in f["by_source"]


def test_status_lists_each_dropped_record_and_why(tmp_path):
    ws = str(tmp_path / "ws")
    _pipeline_store(ws, 4)
    s = Store(ws)
    chash = s.stage_config("validate")
    ids = sorted(r.id for r in s.records())
    s.put_result(ids[0], "validate", chash, "dropped", "compile_error",
                 {"detail": "kernel.cuh:4:10: fatal error: curand.h: No such file or directory\nmore"})
    s.close()
    out = invoke("status", "--dropped", "validate", "-w", ws).output
    assert ids[0][:12] in out and "compile_error" in out and "curand.h: No such file" in out and "more" not in out
    assert all(i[:12] not in out for i in ids[1:])  # records that passed are not listed
    assert "no record dropped" in invoke("status", "--dropped", "dedupe", "-w", ws).output
