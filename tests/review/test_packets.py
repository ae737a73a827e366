"""Review packets: Label Studio task import and Argilla dataset layout out, their verdicts back in."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from sftbuild.store import Store
from tests.review import workspace
from tests.review.test_flow import invoke, sampled


def _sampled_ws(tmp_path, n=12):
    ws = str(tmp_path / "ws")
    workspace.make(ws, n)
    assert invoke("review", "sample", "-q", "-w", ws).exit_code == 0
    return ws


def test_label_studio_round_trip(tmp_path):
    ws = _sampled_ws(tmp_path)
    out = tmp_path / "ls" / "tasks.json"
    r = invoke("review", "packet", "--format", "label-studio", str(out), "-w", ws)
    assert r.exit_code == 0 and "wrote 12 records" in r.output
    tasks = json.loads(out.read_text())
    assert isinstance(tasks, list) and len(tasks) == 12
    assert set(tasks[0]) == {"data", "meta"}
    d = tasks[0]["data"]
    assert d["headline"].split(":")[0] in ("GPU-VALIDATED on NVIDIA H200", "INTERPRETER ONLY")
    assert "trials: 8/8 passed" in d["evidence"] and d["code"].startswith("__global__") and d["reference"]
    config = ET.fromstring((tmp_path / "ls" / "tasks.label_config.xml").read_text())
    names = {c.get("name"): [x.get("value") for x in c] for c in config.iter("Choices")}
    assert names["verdict"] == ["accept", "reject"] and "wrong_code" in names["reason"]
    # a Label Studio JSON export: tasks with annotations whose results are choices
    export = []
    for i, t in enumerate(tasks):
        result = [{"from_name": "verdict", "to_name": "code", "type": "choices",
                   "value": {"choices": ["reject" if i == 0 else "accept"]}}]
        if i == 0:
            result.append({"from_name": "reason", "to_name": "code", "type": "choices",
                           "value": {"choices": ["license"]}})
        export.append({"id": i + 1, "data": t["data"],
                       "annotations": [{"id": 100 + i, "completed_by": {"id": 7, "email": "ann@example.org"},
                                        "result": result, "was_cancelled": False}]})
    export[1]["annotations"].append({"completed_by": 8, "result": [], "was_cancelled": True})
    f = tmp_path / "export.json"
    f.write_text(json.dumps(export))
    r = invoke("review", "import", str(f), "-w", ws)
    assert r.exit_code == 0 and "verdicts=12" in r.output and "skipped=0" in r.output
    rows = {row["record_id"]: row for row in sampled(ws)}
    first = rows[tasks[0]["data"]["record_id"]]
    assert first["verdict"] == "reject" and first["reason"] == "license"
    assert first["reviewer"] == "label-studio:ann@example.org"
    assert sum(row["verdict"] == "accept" for row in rows.values()) == 11
    s = Store(ws)
    assert {v["via"] for v in s.review_log()} == {"label-studio"}
    s.close()


def test_argilla_round_trip(tmp_path):
    ws = _sampled_ws(tmp_path)
    out = tmp_path / "argilla"
    assert invoke("review", "packet", "--format", "argilla", str(out), "-w", ws).exit_code == 0
    settings = json.loads((out / ".argilla" / "settings.json").read_text())
    assert [f["name"] for f in settings["fields"]] == ["headline", "evidence", "instruction", "reference", "code"]
    q = {x["name"]: x for x in settings["questions"]}
    assert q["verdict"]["settings"]["type"] == "label_selection"
    assert [o["value"] for o in q["verdict"]["settings"]["options"]] == ["accept", "reject"]
    records = json.loads((out / "records.json").read_text())
    assert len(records) == 12 and set(records[0]["fields"]) == set(settings_fields(settings))
    assert records[0]["fields"]["code"].startswith("```")
    # annotators answered in Argilla: responses per question, per user
    for i, rec in enumerate(records):
        verdict = "reject" if i < 2 else "accept"
        rec["responses"] = {"verdict": [{"value": verdict, "user_id": "u-1"}]}
        if verdict == "reject":
            rec["responses"]["reason"] = [{"value": "trivial", "user_id": "u-1"}]
    records[3]["responses"] = {}  # not answered yet
    (out / "records.json").write_text(json.dumps(records))
    r = invoke("review", "import", str(out), "-w", ws)
    assert r.exit_code == 0 and "verdicts=11" in r.output
    rows = {row["record_id"]: row for row in sampled(ws)}
    assert rows[records[0]["id"]]["verdict"] == "reject" and rows[records[0]["id"]]["reason"] == "trivial"
    assert rows[records[3]["id"]]["verdict"] is None
    assert rows[records[5]["id"]]["reviewer"] == "argilla:u-1"


def settings_fields(settings):
    return [f["name"] for f in settings["fields"]]


def test_import_reports_bad_input_in_one_sentence(tmp_path):
    ws = _sampled_ws(tmp_path, 4)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = invoke("review", "import", str(bad), "-w", ws)
    assert r.exit_code != 0 and "is not a readable JSON export" in r.output and "Traceback" not in r.output
    stranger = tmp_path / "stranger.json"
    stranger.write_text(json.dumps([{"id": "feedface", "responses": {"verdict": [{"value": "accept",
                                                                                     "user_id": 1}]}},
                                     {"id": sampled(ws)[0]["record_id"],
                                      "responses": {"verdict": [{"value": "reject", "user_id": 1}]}}]))
    r = invoke("review", "import", str(stranger), "-w", ws)
    assert r.exit_code == 0 and "verdicts=0" in r.output and "skipped=2" in r.output
    assert "no record matches 'feedface'" in r.output and "a reject needs --reason" in r.output
