import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from sftbuild.binding import Binding
from sftbuild.record import Record
from sftbuild.store import Store, StoreError


def rec(i, source="s"):
    return Record(language="cuda", code=f"__global__ void k{i}(float* x) {{ x[{i}] = {i}; }}\n",
                  source=source, entry={"kernels": [f"k{i}"]}, provenance={"license": "MIT"})


def test_record_id_is_code_hash():
    a, b = rec(1), rec(1)
    assert a.id == b.id
    assert rec(2).id != a.id
    with pytest.raises(ValueError):
        Record(language="cuda", code="x", source="s", id="0" * 24)
    with pytest.raises(ValueError):
        Record(language="fortran", code="x", source="s")


def test_a_record_is_immutable_and_a_change_is_a_new_record():
    a = rec(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.code = "__global__ void k() {}\n"
    with pytest.raises(ValueError, match="does not match its code hash"):  # a changed code keeps no stale id
        dataclasses.replace(a, code="__global__ void k() {}\n")
    b = dataclasses.replace(a, id="", code="__global__ void k() {}\n")
    assert b.id != a.id and a.code.startswith("__global__ void k1")
    assert dataclasses.replace(a, source="t").id == a.id


def test_a_binding_round_trips_between_the_store_and_its_type(tmp_path):
    declared = {"op": "relu", "harness": "generic_launch", "harness_args": {"args": ["ptr:0"]}, "dtypes": ["float32"]}
    r = dataclasses.replace(rec(1), binding=declared)  # a source's dict is read as its declaration
    assert isinstance(r.binding, Binding) and (r.binding.how, r.binding.by) == ("declared", "source:s")
    s = Store(tmp_path)
    s.add_records([r])
    back = s.get(r.id).binding
    assert back == r.binding and (back.op, back.harness, back.dtypes) == ("relu", "generic_launch", ("float32",))
    (text,) = s.db.execute("SELECT binding FROM bindings WHERE record_id=?", (r.id,)).fetchone()
    assert json.loads(text) == r.binding.to_dict() and json.loads(text)["key"] == back.key  # JSON on disk only
    assert s.binding_row(r.id)["binding"] == back


def test_add_records_is_idempotent(tmp_path):
    s = Store(tmp_path)
    assert s.add_records([rec(i) for i in range(5)]) == 5
    assert s.add_records([rec(i) for i in range(7)]) == 2
    assert s.count_records() == 7
    assert [r.id for r in s.records()] == [rec(i).id for i in range(7)]
    assert s.get(rec(3).id).code == rec(3).code
    assert s.find(rec(3).id[:10]).id == rec(3).id


def test_results_keyed_by_stage_and_config(tmp_path):
    s = Store(tmp_path)
    s.add_records([rec(i) for i in range(3)])
    s.set_stage_config("harvest", "h1", {})
    s.put_results([(rec(i).id, "harvest", "h1", "ok", None, None) for i in range(3)])
    s.set_stage_config("bind", "b1", {})
    s.put_results([(rec(i).id, "bind", "b1", "ok", None, None) for i in range(3)])
    s.set_stage_config("describe", "d1", {})
    s.put_result(rec(0).id, "describe", "d1", "ok")
    s.put_result(rec(1).id, "describe", "d1", "dropped", "description_mismatch")
    s.put_result(rec(1).id, "describe", "d1", "dropped", "description_mismatch")  # rerun: no duplicate
    assert [r.id for r in s.alive("validate")] == [rec(0).id]
    assert s.done_ids("describe", "d1") == {rec(0).id, rec(1).id}
    # a new config hash makes the old results not current
    s.set_stage_config("describe", "d2", {})
    assert s.alive("validate") == []
    f = s.funnel()
    assert f["records"] == 3 and f["stages"]["harvest"]["ok"] == 3


def test_funnel_counts_reasons_per_source(tmp_path):
    s = Store(tmp_path)
    s.add_records([rec(1, "a"), rec(2, "b"), rec(3, "b")])
    s.set_stage_config("harvest", "h", {})
    s.put_result(rec(1).id, "harvest", "h", "ok")
    s.put_result(rec(2).id, "harvest", "h", "dropped", "trivial")
    s.put_result(rec(3).id, "harvest", "h", "waiting", "needs_gpu")
    f = s.funnel()
    assert f["stages"]["harvest"] == {"ok": 1, "dropped": {"trivial": 1}, "waiting": {"needs_gpu": 1}}
    assert f["by_source"]["b"]["stages"]["harvest"]["dropped"] == {"trivial": 1}
    assert f["by_source"]["a"]["records"] == 1


def test_not_a_database(tmp_path):
    (tmp_path / "sftbuild.db").write_bytes(b"garbage" * 1000)
    with pytest.raises(StoreError, match="not a usable"):
        Store(tmp_path)


WRITER = textwrap.dedent("""
    import sys, time
    from sftbuild.store import Store
    from sftbuild.record import Record
    s = Store(sys.argv[1])
    s.set_stage_config("harvest", "h", {})
    for i in range(100000):
        r = Record(language="cuda", code=f"__global__ void k{i}() {{}}\\n", source="s")
        s.add_records([r])
        s.put_result(r.id, "harvest", "h", "ok")
        if i == 50:
            print("started", flush=True)
""")


def test_kill_9_mid_stage_then_resume(tmp_path):
    """A writer killed with SIGKILL leaves a consistent store; a rerun completes it with no duplicates."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"started"
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    s = Store(tmp_path)
    n = s.count_records()
    assert n > 50
    ids = [r.id for r in s.records()]
    assert len(ids) == len(set(ids))
    # every committed record has its result: record and result were separate small commits,
    # so at most the one in flight lacks one
    assert len(s.done_ids("harvest", "h")) >= n - 1
    db = sqlite3.connect(tmp_path / "sftbuild.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
