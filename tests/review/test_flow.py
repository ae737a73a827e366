"""The review commands end to end on a fixture workspace: sample, status, show, the terminal flow,
double review and kappa, and verdicts that survive a new sample."""
from __future__ import annotations

import re

from click.testing import CliRunner

from sftbuild.cli import main
from sftbuild.binding import Binding
from sftbuild.store import Store
from tests.review import workspace


def invoke(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def sampled(ws) -> list[dict]:
    s = Store(ws)
    try:
        return s.review_rows()
    finally:
        s.close()


def config(tmp_path, text: str) -> str:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return str(p)


def test_sample_states_its_bound_and_status_reports_it(tmp_path):
    ws = str(tmp_path / "ws")
    workspace.make(ws, 100)
    r = invoke("review", "sample", "-q", "-w", ws)
    assert r.exit_code == 0, r.output
    assert "59 of 100 records sampled" in r.output
    assert "defect rate <= 5% at 95% confidence" in r.output
    rows = sampled(ws)
    assert len(rows) == 59
    r = invoke("review", "status", "-w", ws)
    assert "sampled: 59 of 100 records; verdicts: 0" in r.output
    assert "the sample proves: defect rate <= 5% at 95% confidence" in r.output
    strata = re.search(r"strata \(source/op family/language, \* = merged\): (.*)", r.output).group(1)
    assert sum(int(part.rsplit(" ", 1)[1]) for part in strata.split(", ")) == 59
    invoke("review", "next", "--reviewer", "r", "-w", ws, input="a" * 59)
    r = invoke("review", "status", "-w", ws)
    assert "defect rate <= 4.95% at 95% confidence (Clopper-Pearson, 0 rejected of 59 reviewed)" in r.output
    assert "export gate: open" in r.output


def test_show_carries_the_evidence(tmp_path):
    ws = str(tmp_path / "ws")
    recs = workspace.make(ws, 4)
    invoke("review", "sample", "-q", "-w", ws)
    cuda, triton = recs[0], recs[1]
    out = invoke("review", "show", cuda.id[:12], "-w", ws).output
    first, *rest = out.splitlines()
    assert first.startswith("GPU-VALIDATED on NVIDIA H200: cuda kernel bound to op relu; 8 of 8 trials passed, 1.50x")
    body = "\n".join(rest)
    for want in ("shapes [7, 33], [1025, 33]", "dtypes float32, float16", "layouts contiguous", "seeds 0, 1",
                 "worst error: max_abs 1e-06", "float32: rtol 0.0001", "candidate 0.01 ms vs eager 0.015 ms (1.5x)",
                 "torch.compile 0.012 ms", "registers 32, smem 1024 B", "gpu NVIDIA H200", "driver 12080",
                 "torch 2.11.0", "--- op relu (torch reference) ---", "reference = torch.relu", "license: MIT",
                 "instruction[en:detailed]: Write the CUDA kernel k for relu."):
        assert want in body, want
    out = invoke("review", "show", triton.id[:12], "-w", ws).output
    assert out.splitlines()[0].startswith("INTERPRETER ONLY: triton kernel bound to op exp; 8 of 8 trials passed "
                                          "on CPU with TRITON_INTERPRET=1, never on a GPU")
    s = Store(ws)
    s.put_binding(recs[2].id, None, reason="no binder found a binding")
    s.close()
    assert invoke("review", "show", recs[2].id[:12], "-w", ws).output.startswith("UNBOUND cuda kernel")


def _keys_for(n: int) -> str:
    """Accept every item but reject each 20th as wrong_code."""
    return "".join("rc" if i % 20 == 19 else "a" for i in range(n))


def test_terminal_flow_reviews_200_items_by_keystrokes_alone(tmp_path):
    ws = str(tmp_path / "ws")
    workspace.make(ws, 200)
    cfg = config(tmp_path, "review: {fraction: 1.0, max_reject_rate: 0.1}\n")
    assert invoke("review", "sample", "-q", "-w", ws, "-c", cfg).exit_code == 0
    keys = _keys_for(200)
    r = invoke("review", "next", "--reviewer", "alice", "-w", ws, "-c", cfg, input=keys)
    assert r.exit_code == 0, r.output
    m = re.search(r"alice: (\d+) verdicts this session.*?(\d+) keys \(([\d.]+) per verdict\)", r.output, re.S)
    assert m and int(m.group(1)) == 200 and int(m.group(2)) == len(keys) == 210
    assert float(m.group(3)) == 1.05
    rows = sampled(ws)
    assert all(row["verdict"] for row in rows) and sum(row["verdict"] == "reject" for row in rows) == 10
    assert {row["reason"] for row in rows if row["verdict"] == "reject"} == {"wrong_code"}
    assert "export gate: open" in invoke("review", "status", "-w", ws, "-c", cfg).output


def test_terminal_flow_resumes_skips_goes_back_and_needs_a_name(tmp_path):
    ws = str(tmp_path / "ws")
    workspace.make(ws, 30)
    assert invoke("review", "next", "-w", ws, input="a").exit_code != 0  # no --reviewer
    invoke("review", "sample", "-q", "-w", ws)
    order = [row["record_id"] for row in sampled(ws)]
    # accept 1, skip 2, accept 3, back to 3 and reject it (unsafe), then quit
    r = invoke("review", "next", "--reviewer", "bob", "-w", ws, input="a s a b ru q")
    assert r.exit_code == 0 and "2 verdicts this session" not in r.output
    rows = {row["record_id"]: row for row in sampled(ws)}
    assert rows[order[0]]["verdict"] == "accept" and rows[order[1]]["verdict"] is None
    assert rows[order[2]]["verdict"] == "reject" and rows[order[2]]["reason"] == "unsafe"
    # a new session starts at the first item bob has not decided: the skipped one
    r = invoke("review", "next", "--reviewer", "bob", "-w", ws, input="a q")
    assert "[2/30]" in r.output.split("\n")[0]
    assert {row["record_id"]: row for row in sampled(ws)}[order[1]]["verdict"] == "accept"
    # Esc cancels a reject; an unknown key is a hint, not a verdict
    r = invoke("review", "next", "--reviewer", "bob", "-w", ws, input="r\x1b x q")
    assert "reject cancelled" in r.output and "unknown key 'x'" in r.output
    s = Store(ws)
    assert [v["via"] for v in s.review_log()] == ["terminal"] * 4
    s.close()


def test_double_review_and_kappa(tmp_path):
    ws = str(tmp_path / "ws")
    workspace.make(ws, 40)
    cfg = config(tmp_path, "review: {fraction: 1.0, overlap: 0.5}\n")
    invoke("review", "sample", "-q", "-w", ws, "-c", cfg)
    rows = sampled(ws)
    doubles = [r["record_id"] for r in rows if r["copies"] == 2]
    assert len(doubles) == 20
    assert "kappa once both verdicts are in" in invoke("review", "status", "-w", ws, "-c", cfg).output
    # alice accepts everything; bob rejects the first 6 of the doubles
    invoke("review", "next", "--reviewer", "alice", "-w", ws, "-c", cfg, input="a" * 40)
    assert sum(r["verdict"] is None for r in sampled(ws)) == 20  # doubles wait for a second reviewer
    keys = "".join("rc" if i < 6 else "a" for i in range(20))
    r = invoke("review", "next", "--reviewer", "bob", "-w", ws, "-c", cfg, input=keys)
    assert "20 verdicts this session" in r.output  # bob sees only the doubles
    st = invoke("review", "status", "-w", ws, "-c", cfg).output
    # alice never rejected, so agreement is what chance gives: kappa 0
    assert "double review: 20 of 20 records have both verdicts; Cohen's kappa 0.00 (70% agreement)" in st
    # now one disagreement the other way: kappa is defined
    invoke("review", "verdict", doubles[10], "reject", "--reason", "trivial", "--reviewer", "alice",
           "-w", ws, "-c", cfg)
    st = invoke("review", "status", "-w", ws, "-c", cfg).output
    assert re.search(r"Cohen's kappa -?0\.\d\d \(65% agreement\)", st), st
    rej = {r["record_id"]: r for r in sampled(ws)}
    assert rej[doubles[0]]["verdict"] == "reject" and rej[doubles[0]]["reviewer"] == "alice,bob"


def test_verdicts_survive_a_new_sample_after_dedupe_changes(tmp_path):
    """Issue 13: dedupe rerun under another config, then `review sample`, must not drop verdicts."""
    ws = str(tmp_path / "ws")
    recs = workspace.make(ws, 120)
    invoke("review", "sample", "-q", "-w", ws)
    first = sampled(ws)
    invoke("review", "next", "--reviewer", "r", "-w", ws, input="a" * len(first))
    # dedupe under another config drops a third of the records, half of them sampled ones
    dropped = {row["record_id"] for row in first[::4]} | {r.id for r in recs[::5]}
    s = Store(ws)
    workspace.dedupe(s, [r for r in recs if r.id not in dropped], "c2")
    s.close()
    r = invoke("review", "sample", "-q", "-w", ws)
    assert r.exit_code == 0
    retired = len({row["record_id"] for row in first} & dropped)
    assert f"{retired} verdicts are on records this sample no longer holds" in r.output
    second = {row["record_id"]: row for row in sampled(ws)}
    for row in first:
        if row["record_id"] in second:
            assert second[row["record_id"]]["verdict"] == "accept"  # still sampled: kept
    s = Store(ws)
    old = {row["record_id"]: row for row in s.review_rows(retired=True)}
    assert len(old) == retired and all(row["verdict"] == "accept" for row in old.values())
    assert len(s.review_log()) == len(first)  # the log lost nothing
    s.close()
    assert invoke("review", "list", "--retired", "-w", ws).output.count("accept") == retired
    # dedupe back to the first config: the retired records return to the sample with their verdicts
    s = Store(ws)
    workspace.dedupe(s, recs, "c")
    s.close()
    invoke("review", "sample", "-q", "-w", ws)
    assert {row["record_id"]: row["verdict"] for row in sampled(ws)} == {row["record_id"]: "accept" for row in first}


def test_program_records_show_their_reference_program_and_list_says_where(tmp_path):
    ws = str(tmp_path / "ws")
    recs = workspace.make(ws, 6)
    s = Store(ws)
    program = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.abs()\n"
    s.put_binding(recs[0].id, Binding.from_dict({"kind": "kernelbench", "reference": program}, how="exact"))
    # describe and validate ran under this binding (results are keyed on it)
    s.put_results([(recs[0].id, "describe", "c", "ok", None, {"instructions": {"en:detailed": "Write ModelNew."}}),
                   (recs[0].id, "validate", "c", "ok", None, workspace.payload(recs[0], gpu=True))])
    s.close()
    invoke("review", "sample", "-q", "-w", ws)
    out = invoke("review", "show", recs[0].id[:12], "-w", ws).output
    assert "cuda kernelbench record checked against its reference program" in out.splitlines()[0]
    assert "--- reference program (kernelbench) ---\n" + program.rstrip() in out
    listing = invoke("review", "list", "-w", ws).output
    assert listing.count(" gpu ") == 3 and listing.count(" interpreter ") == 3


def test_verdicts_from_before_the_log_are_kept(tmp_path):
    """A workspace whose verdicts were written straight into the reviews table keeps them."""
    ws = str(tmp_path / "ws")
    workspace.make(ws, 10)
    invoke("review", "sample", "-q", "-w", ws)
    rid = sampled(ws)[0]["record_id"]
    s = Store(ws)
    with s.tx():
        s.db.execute("UPDATE reviews SET verdict='accept', reviewer='old' WHERE record_id=?", (rid,))
    s.close()
    invoke("review", "sample", "-q", "-w", ws)
    row = {r["record_id"]: r for r in sampled(ws)}[rid]
    assert row["verdict"] == "accept" and row["reviewer"] == "old"
    r = invoke("review", "next", "--reviewer", "new", "-w", ws, input="q")
    assert "[2/10]" in r.output  # the legacy verdict counts as decided


def test_review_settings_are_range_checked(tmp_path):
    ws = str(tmp_path / "ws")
    for text, msg in (("review: {defect_rate: 1}", "review.defect_rate: must be < 1"),
                      ("review: {confidence: 0}", "review.confidence: must be > 0"),
                      ("review: {overlap: 1.5}", "review.overlap: must be <= 1")):
        r = invoke("review", "status", "-w", ws, "-c", config(tmp_path, text + "\n"))
        assert r.exit_code != 0 and msg in r.output and "Traceback" not in r.output
    r = invoke("review", "status", "-w", ws)
    assert r.exit_code != 0 and "there is no sftbuild workspace" in r.output
    Store(ws).close()
    r = invoke("review", "status", "-w", ws)
    assert r.exit_code != 0 and "no review sample yet" in r.output


def test_file_reference_records_show_their_cpu_function(tmp_path):
    ws = str(tmp_path / "ws")
    recs = workspace.make(ws, 6)
    cpu = "void scale_cpu(float* out, const float* inp, int n) { for (int i = 0; i < n; i++) out[i] = 2 * inp[i]; }"
    s = Store(ws)
    s.put_binding(recs[0].id, Binding.from_dict(
        {"kind": "program", "program": "scale.cu:scale_cpu", "harness": "file_reference",
         "harness_args": {"ref": {"cpu": "scale_cpu", "launcher": "scale1", "cpu_code": cpu}}}, how="file_reference"))
    s.close()
    out = invoke("review", "show", recs[0].id[:12], "-w", ws).output
    assert "--- CPU reference scale_cpu in scale.cu:scale_cpu, called through the launcher scale1 ---\n" + cpu in out


def test_review_reads_the_op_cards_and_starts_without_torch(tmp_path, monkeypatch):
    """The op facts review shows (family, tolerance, reference source) come from the op cards that an
    earlier process wrote (here, this one): `review sample` and `review show` then never import torch."""
    import subprocess
    import sys

    from sftbuild.ops import cards

    ws = str(tmp_path / "ws")
    cuda = workspace.make(ws, 4)[0]
    monkeypatch.setenv("SFTBUILD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cards, "_KNOWN", {})  # so that this process writes the cards to that cache
    assert cards.cards([*workspace.OPS, "no_such_op"])["no_such_op"] is None
    code = ("import sys\nfrom sftbuild.cli import main\n"
            f"main(['review', 'sample', '-q', '-w', {ws!r}], standalone_mode=False)\n"
            f"main(['review', 'show', {cuda.id[:12]!r}, '-w', {ws!r}], standalone_mode=False)\n"
            "print('torch loaded:', 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    for want in ("--- op relu (torch reference) ---", "reference = torch.relu", "float32: rtol 0.0001",
                 "torch loaded: False"):
        assert want in out.stdout, want
