"""Bad input, case by case: each is refused with one sentence that names the problem and a non-zero
exit, never a traceback, and none is silently accepted.

Classes: config values (ranges, finiteness, enums, archs, GPU ids, plug-in selections), config files,
command-line options, workspaces (missing, a file, unwritable, read-only, corrupt), export folders,
and sources (corrupt, truncated, traversal, bomb and link archives, missing paths, unknown names).
Every case runs the real command line in this process; one runs it as a subprocess.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from sftbuild.cli import main
from sftbuild.store import Store
from tests.conftest import HAS_GPU

DATA = Path(__file__).parents[1] / "data" / "harvest"
GOOD_CU = DATA / "cuda_tree" / "kernels.cu"
ROOT = os.geteuid() == 0
LIGHT = "executor: {cpu_workers: 1, gpus: none}\n"  # no process pool for the few good files

# (case id, config YAML, words the sentence must hold)
CONFIG_CASES = [
    ("languages_klingon", "describe: {languages: [klingon]}", ["describe.languages", "klingon", "en, zh"]),
    ("languages_empty", "describe: {languages: []}", ["describe.languages", "at least one"]),
    ("levels_unknown", "describe: {levels: [epic]}", ["describe.levels", "epic"]),
    ("cpu_workers_negative", "executor: {cpu_workers: -4}", ["executor.cpu_workers", "-4", ">= 0"]),
    ("executor_unknown", "executor: {kind: spark}", ["executor.kind", "spark", "local, ray"]),
    ("gpus_words", "executor: {gpus: abc}", ["executor.gpus", "abc", "comma-separated"]),
    ("gpus_repeated", "executor: {gpus: '0,0'}", ["executor.gpus", "0,0"]),
    ("gpus_negative", "executor: {gpus: '-1'}", ["executor.gpus", "-1"]),
    ("gpus_nonexistent", "executor: {gpus: '97,98'}", ["executor.gpus", "97", "does not exist"]),
    ("bands_zero", "dedupe: {bands: 0}", ["dedupe.bands", ">= 1", "0"]),
    ("rows_zero", "dedupe: {rows: 0}", ["dedupe.rows", ">= 1", "0"]),
    ("bands_times_rows", "dedupe: {bands: 64, rows: 8}", ["dedupe.bands * dedupe.rows", "num_perm", "64 * 8 = 512 > 256"]),
    ("num_perm_zero", "dedupe: {num_perm: 0}", ["dedupe.num_perm", ">= 1"]),
    ("threshold_above_one", "dedupe: {threshold: 1.5}", ["dedupe.threshold", "<= 1", "1.5"]),
    ("scheme_unknown", "dedupe: {scheme: md5}", ["dedupe.scheme", "md5", "oph"]),
    ("compile_timeout_nan", "validate: {compile_timeout: .nan}", ["validate.compile_timeout", "finite", "nan"]),
    ("compile_timeout_negative", "validate: {compile_timeout: -1}", ["validate.compile_timeout", "> 0", "-1"]),
    ("compile_timeout_inf", "validate: {compile_timeout: .inf}", ["validate.compile_timeout", "finite", "inf"]),
    ("compile_timeout_zero", "validate: {compile_timeout: 0}", ["validate.compile_timeout", "> 0"]),
    ("sample_timeout_negative", "validate: {sample_timeout: -5}", ["validate.sample_timeout", "> 0"]),
    ("memcheck_timeout_nan", "validate: {memcheck_timeout: .nan}", ["validate.memcheck_timeout", "finite"]),
    ("arch_banana", "validate: {arch: banana}", ["validate.arch", "banana", "sm_90"]),
    ("arch_one_digit", "validate: {arch: sm_9}", ["validate.arch", "sm_9"]),
    ("arch_empty", "validate: {arch: ''}", ["validate.arch", "sm_90"]),
    ("memcheck_unknown", "validate: {memcheck: sometimes}", ["validate.memcheck", "sometimes", "sample"]),
    ("memcheck_fraction_two", "validate: {memcheck_fraction: 2}", ["validate.memcheck_fraction", "<= 1"]),
    ("max_slowdown_nan", "validate: {max_slowdown: .nan}", ["validate.max_slowdown", "finite"]),
    ("max_slowdown_zero", "validate: {max_slowdown: 0}", ["validate.max_slowdown", "> 0"]),
    ("shapes_zero", "validate: {shapes: 0}", ["validate.shapes", ">= 1"]),
    ("reject_rate_seven", "review: {max_reject_rate: 7}", ["review.max_reject_rate", "<= 1", "7"]),
    ("review_fraction_zero", "review: {fraction: 0}", ["review.fraction", "> 0"]),
    ("confidence_one", "review: {confidence: 1}", ["review.confidence", "< 1"]),
    ("defect_rate_negative", "review: {defect_rate: -0.1}", ["review.defect_rate", "> 0"]),
    ("probe_timeout_nan", "bind: {probe_timeout: .nan}", ["bind.probe_timeout", "finite"]),
    ("probe_workers_negative", "bind: {probe_workers_per_gpu: -1}", ["bind.probe_workers_per_gpu", ">= 0"]),
    ("min_kernel_lines_negative", "harvest: {min_kernel_lines: -1}", ["harvest.min_kernel_lines", ">= 0"]),
    ("interpreter_only_unknown", "export: {interpreter_only: maybe}", ["export.interpreter_only", "maybe"]),
    ("export_format_unknown", "export: {formats: [nope]}", ["export.formats", "nope", "sft_messages"]),
    ("filter_unknown", "dedupe: {filters: {nope: {}}}", ["dedupe.filters.nope", "unknown filter"]),
    ("filter_param_negative", "dedupe: {filters: {too_simple: {min_tokens: -5}}}",
     ["dedupe.filters.too_simple.min_tokens", ">= 0", "-5"]),
    ("file_filter_param_negative", "harvest: {file_filters: {oversize: {max_bytes: -1}}}",
     ["harvest.file_filters.oversize.max_bytes", "-1"]),
    ("static_check_unknown", "validate: {static_checks: {x: false}}", ["validate.static_checks.x", "unknown"]),
    ("binder_unknown", "bind: {binders: {nope: true}}", ["bind.binders.nope", "unknown binder"]),
    ("unknown_key", "validate: {nope: 1}", ["validate.nope", "unknown key"]),
    ("wrong_type", "validate: {compile_timeout: soon}", ["validate.compile_timeout", "a number", "soon"]),
    ("bool_as_string", "validate: {timing: 'yes'}", ["validate.timing", "true or false"]),
    ("float_as_int", "review: {seed: 1.5}", ["review.seed", "an integer", "1.5"]),
    ("section_not_mapping", "validate: [1]", ["validate", "a mapping"]),
    ("file_not_mapping", "[1, 2]", ["config", "a mapping"]),
    ("invalid_yaml", "validate: [unclosed", ["not valid YAML"]),
    ("sources_not_list", "harvest: {sources: torch-aten}", ["harvest.sources", "a list"]),
    ("section_twice", "executor: {gpus: none}\nvalidate: {timing: false}\nexecutor: {cpu_workers: 1}",
     ["'executor'", "twice", "lines 1 and 3"]),
    ("key_twice_in_a_section", "validate: {timing: false, timing: true}", ["'timing'", "twice", "line 1"]),
    ("source_empty", "harvest: {sources: ['']}", ["harvest.sources", "non-empty", "''"]),
    ("registry_blank", "harvest: {registries: ['  ']}", ["harvest.registries", "non-empty"]),
]


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> str:
    """An existing, empty workspace: config errors must come out before any command uses it."""
    path = tmp_path_factory.mktemp("bad") / "ws"
    Store(path).close()
    return str(path)


def _invoke(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_refused(result, words):
    """rc != 0, no traceback, and the error is one sentence holding `words`."""
    out = result.output
    assert result.exit_code != 0, f"silently accepted: {out!r}"
    assert isinstance(result.exception, SystemExit), f"escaped as {result.exception!r}"
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, out
    for w in words:
        assert w in errors[0], f"{w!r} not in {errors[0]!r}"


@pytest.mark.parametrize("text, words", [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_a_bad_config_value_is_one_sentence(tmp_path, ws, text, words):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text + "\n")
    assert_refused(_invoke(["status", "-w", ws, "-c", cfg]), words)


@pytest.mark.nvcc
def test_an_arch_nvcc_does_not_know_is_refused(tmp_path, ws):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("validate: {arch: sm_999}\n")
    assert_refused(_invoke(["status", "-w", ws, "-c", cfg]), ["validate.arch", "sm_999", "this nvcc knows"])


def test_archs_nvcc_knows_are_accepted(tmp_path, ws):
    for arch in ("sm_80", "sm_90a", "compute_90"):
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"validate: {{arch: {arch}}}\n")
        r = _invoke(["status", "-w", ws, "-c", cfg])
        assert r.exit_code == 0, r.output


@pytest.mark.gpu
def test_gpu_ids_this_machine_has_are_accepted(tmp_path, ws):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("executor: {gpus: '0'}\n")
    r = _invoke(["status", "-w", ws, "-c", cfg])
    assert r.exit_code == 0, r.output


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU 0")
def test_a_gpu_id_on_a_machine_without_gpus(tmp_path, ws):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("executor: {gpus: '0'}\n")
    assert_refused(_invoke(["status", "-w", ws, "-c", cfg]), ["executor.gpus", "GPU 0 does not exist", "none"])


@pytest.mark.parametrize("args, words", [
    (["validate", "--max-slowdown", "nan"], ["--max-slowdown", "validate.max_slowdown", "finite"]),
    (["validate", "--max-slowdown", "-1"], ["--max-slowdown", "validate.max_slowdown", "> 0"]),
    (["validate", "--memcheck", "sometimes"], ["--memcheck", "sometimes"]),
    (["review", "serve", "--port", "70000"], ["--port", "70000"]),
    (["review", "verdict", "abc", "maybe", "--reviewer", "r"], ["maybe"]),
    (["bindings", "--how", "guessed"], ["--how", "guessed"]),
    (["status", "-c", "/nonexistent/sftbuild.yaml"], ["/nonexistent/sftbuild.yaml", "does not exist"]),
], ids=["max_slowdown_nan", "max_slowdown_negative", "memcheck_choice", "port_range", "verdict_choice",
        "how_unknown", "config_missing"])
def test_a_bad_option_is_one_sentence(ws, args, words):
    assert_refused(_invoke([*args, "-w", ws]), words)


def test_review_without_a_command_draws_no_sample():
    assert_refused(_invoke(["review"]), ["`sftbuild review` needs a command", "sample", "status", "draws the sample"])


# ---- workspaces ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["status"], ["describe"], ["validate"], ["review", "status"], ["export"],
                                     ["bindings"], ["review", "list"], ["dedupe"], ["bind"]])
def test_a_mistyped_workspace_is_an_error_not_an_empty_one(tmp_path, command):
    missing = tmp_path / "no-such-ws"
    assert_refused(_invoke([*command, "-w", missing]), ["no sftbuild workspace", str(missing)])
    assert not missing.exists()


def test_workspace_under_a_file(tmp_path):
    parent = tmp_path / "afile"
    parent.write_text("x")
    assert_refused(_invoke(["harvest", "-q", "-w", parent / "ws", GOOD_CU.parent]),
                   ["cannot create the workspace", "ws"])


def test_workspace_that_is_a_file(tmp_path):
    f = tmp_path / "ws"
    f.write_text("x")
    assert_refused(_invoke(["harvest", "-q", "-w", f, GOOD_CU.parent]), ["ws", "is a file"])


def test_workspace_with_a_corrupt_store(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "sftbuild.db").write_bytes(b"not sqlite at all" * 100)
    assert_refused(_invoke(["status", "-w", ws]), ["sftbuild.db", "not a usable sftbuild workspace"])


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs /sys")
def test_workspace_where_nothing_can_be_created(tmp_path):
    # /sys refuses new folders even to root, unlike a chmod
    assert_refused(_invoke(["harvest", "-q", "-w", "/sys/sftbuild-ws", GOOD_CU.parent]),
                   ["cannot create the workspace", "/sys/sftbuild-ws"])


@pytest.mark.skipif(ROOT, reason="root writes through file modes")
def test_workspace_under_an_unwritable_parent(tmp_path):
    parent = tmp_path / "locked"
    parent.mkdir(mode=0o500)
    try:
        assert_refused(_invoke(["harvest", "-q", "-w", parent / "ws", GOOD_CU.parent]),
                       ["cannot create the workspace", "ws"])
    finally:
        parent.chmod(0o700)


@pytest.mark.skipif(ROOT, reason="root writes through file modes")
def test_read_only_workspace(tmp_path):
    ws = tmp_path / "ws"
    Store(ws).close()
    for p in ws.iterdir():
        p.chmod(0o400)
    ws.chmod(0o500)
    try:
        assert _invoke(["status", "-w", ws]).exit_code == 0
        assert_refused(_invoke(["describe", "-w", ws]), ["not writable", str(ws), "status"])
    finally:
        ws.chmod(0o700)


def _in_mount_namespace(script: str, timeout=120) -> subprocess.CompletedProcess:
    """`script` (sh) in a private mount namespace, as root there; skips where none can be had."""
    pre = ["unshare", "--mount"] if ROOT else ["unshare", "--user", "--map-root-user", "--mount"]
    probe = subprocess.run([*pre, "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode()[:200]}")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    return subprocess.run([*pre, "sh", "-c", script], capture_output=True, text=True, env=env, timeout=timeout)


def _harvested(ws: Path) -> None:
    assert _invoke(["harvest", "-q", "-w", ws, "-c", _light(ws.parent), GOOD_CU.parent]).exit_code == 0


def test_a_read_only_workspace_is_inspected_and_only_writes_are_refused(tmp_path):
    """A read-only mount: root cannot write there either. Reading commands work; a stage says why not."""
    ws = tmp_path / "ws"
    _harvested(ws)
    before = (ws / "sftbuild.db").read_bytes()
    cli = f"{sys.executable} -m sftbuild.cli"
    reads = ["status", "bindings", "review status", "review list", "review show zz"]
    script = (f"mount --bind {ws} {ws} && mount -o remount,bind,ro {ws} || exit 99\n"
              + "".join(f"echo '== {c}'; {cli} {c} -w {ws}; echo rc=$?\n" for c in [*reads, "describe"]))
    out = _in_mount_namespace(script)
    if out.returncode == 99:
        pytest.skip("no read-only bind mount here")
    said = dict(part.split("\n", 1) for part in out.stdout.split("== ")[1:])
    err = out.stderr
    assert "Traceback" not in out.stdout + err, err
    assert said["status"].startswith("records: 6") and said["status"].endswith("rc=0\n"), said
    assert said["bindings"] == "no binding: none stored yet; `sftbuild bind` binds what harvest did not\nrc=0\n"
    assert "no review sample yet" in said["review list"] and said["review list"].endswith("rc=0\n"), said
    assert all(said[c].endswith("rc=1\n") for c in ("review status", "review show zz", "describe")), said
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    assert errors == ["Error: no review sample yet: run `sftbuild review sample` first",
                      "Error: no record matches 'zz'",
                      f"Error: the workspace {ws} is not writable: this command records its run there "
                      "(status, bindings and review status, list and show only read it)"], err
    assert (ws / "sftbuild.db").read_bytes() == before


def test_a_full_disk_is_one_sentence_and_the_harvest_resumes(tmp_path):
    """A real full disk: a tmpfs holds the new store, then a file fills it to 64 KB of the end."""
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    kept = tmp_path / "kept"
    cli = f"{sys.executable} -m sftbuild.cli harvest -q -w {tiny / 'ws'} -c {_light(tmp_path)} {GOOD_CU.parent}"
    out = _in_mount_namespace(
        f"mount -t tmpfs -o size=1m tmpfs {tiny} || exit 99\n"
        f"{sys.executable} -c 'from sftbuild.store import Store; Store(\"{tiny / 'ws'}\").close()' || exit 98\n"
        f"head -c $(( $(df --output=avail -B1 {tiny} | tail -1) - 65536 )) /dev/zero > {tiny / 'filler'}\n"
        f"{cli}; rc=$?; cp -a {tiny / 'ws'} {kept}; exit $rc")
    if out.returncode == 99:
        pytest.skip("no tmpfs mount here")
    assert out.returncode == 1 and "Traceback" not in out.stdout + out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        f"Error: the disk holding the workspace {tiny / 'ws'} is full: what was done so far is kept; free some "
        f"space and run the command again to resume")
    store = Store(kept)
    try:
        assert store.db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert [m["finished"] for m in store.manifests()] in ([], [None])  # nothing claims to have finished
    finally:
        store.close()
    r = _invoke(["harvest", "-q", "-w", kept, "-c", _light(tmp_path), GOOD_CU.parent])
    assert r.exit_code == 0 and "harvest: dropped:trivial=1, ok=5" in r.output, r.output
    store = Store(kept)
    try:
        assert store.count_records() == 6 and store.manifests()[-1]["finished"]
        assert all(m["finished"] or m["stats"]["interrupted"] for m in store.manifests())
    finally:
        store.close()


def test_a_store_that_fills_mid_stage_marks_its_run_interrupted(tmp_path, monkeypatch):
    """SQLite's own limit on the store's size fails as a full disk does, at the stage's first write."""
    ws = tmp_path / "ws"
    Store(ws).close()
    opened = Store.__init__

    def capped(self, *a, **k):
        opened(self, *a, **k)
        self.db.execute(f"PRAGMA max_page_count={self.db.execute('PRAGMA page_count').fetchone()[0]}")
    monkeypatch.setattr(Store, "__init__", capped)
    r = _invoke(["harvest", "-q", "-w", ws, "-c", _light(tmp_path), GOOD_CU.parent])
    assert_refused(r, ["the disk holding the workspace", "is full", "run the command again"])
    monkeypatch.undo()
    store = Store(ws)
    try:
        (m,) = store.manifests()
        assert m["finished"] is None and "full" in m["stats"]["interrupted"]
        assert store.db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        store.close()


def test_a_second_run_on_a_busy_workspace_is_refused_with_who_runs(tmp_path):
    ws = tmp_path / "ws"
    _harvested(ws)
    running = Store(ws)
    try:
        running.lock("validate")
        run_id = running.start_run("validate", "h", {}, {})
        for command in (["validate"], ["harvest", GOOD_CU.parent], ["run"], ["review", "sample"], ["export"]):
            r = _invoke([*command, "-q", "-w", ws, "-c", _light(tmp_path)])
            assert_refused(r, ["another sftbuild run is writing to the workspace", f"pid {os.getpid()}",
                               "`sftbuild validate`", "since"])
        r = _invoke(["status", "-w", ws])
        assert r.exit_code == 0 and r.output.startswith(f"running: `sftbuild validate` (pid {os.getpid()}, since ")
        assert "now in validate" in r.output.splitlines()[0]
    finally:
        running.close()  # as a kill would: the lock goes with the process
    r = _invoke(["status", "-w", ws])
    assert r.output.startswith(f"interrupted: validate run {run_id} ")
    r = _invoke(["describe", "-q", "-w", ws, "-c", _light(tmp_path)])  # takes the lock: the dead run is marked
    assert r.exit_code == 0, r.output
    store = Store(ws)
    try:
        assert store.manifests()[run_id - 1]["stats"] == {
            "interrupted": "the run was killed or lost its machine before it finished"}
        assert store.lock_holder() is None
    finally:
        store.close()


def test_a_workspace_lock_that_cannot_be_opened(tmp_path):
    ws = tmp_path / "ws"
    Store(ws).close()
    (ws / "run.lock").mkdir()
    assert_refused(_invoke(["describe", "-q", "-w", ws]), ["the workspace lock", "run.lock", "cannot be opened"])


@pytest.mark.parametrize("prefix", ["%", "_", "%%", "\\", "'"])
def test_a_record_prefix_is_text_not_a_pattern(tmp_path, prefix):
    ws = tmp_path / "ws"
    _harvested(ws)
    assert_refused(_invoke(["review", "show", prefix, "-w", ws]), ["no record matches", repr(prefix)])


def test_export_dir_that_is_a_file(tmp_path, ws):
    out = tmp_path / "out"
    out.write_text("x")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"export: {{out_dir: {out}}}\n")
    assert_refused(_invoke(["export", "-q", "-w", ws, "-c", cfg]), ["export.out_dir", str(out), "is a file"])


def test_export_dir_that_cannot_be_created(tmp_path, ws):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"export: {{out_dir: {blocker / 'sub' / 'out'}}}\n")
    assert_refused(_invoke(["export", "-q", "-w", ws, "-c", cfg]), ["export.out_dir", "cannot create"])


@pytest.mark.parametrize("out", ["/proc/sftbuild-export", "/sys/sftbuild-export", "/proc/self/export"])
def test_export_dir_in_a_kernel_file_system(tmp_path, ws, out):
    if not Path(out).parent.is_dir():
        pytest.skip(f"no {Path(out).parent} here")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"export: {{out_dir: {out}}}\n")
    assert_refused(_invoke(["export", "-q", "-w", ws, "-c", cfg]), ["export.out_dir", out])


# ---- sources -------------------------------------------------------------------------------------------
def _corrupt_zip(d: Path) -> Path:
    p = d / "corrupt.zip"
    p.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 2)
    return p


def _truncated_tgz(d: Path) -> Path:
    full = d / "full.tar.gz"
    with tarfile.open(full, "w:gz") as t:
        t.add(GOOD_CU, arcname="pkg/kernels.cu")
        t.add(Path(__file__), arcname="pkg/test.py")
    p = d / "truncated.tar.gz"
    data = full.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    full.unlink()
    return p


def _traversal_tar(d: Path) -> Path:
    p = d / "traversal.tar.gz"
    with tarfile.open(p, "w:gz") as t:
        t.add(GOOD_CU, arcname="../../escaped.cu")
    return p


def _traversal_zip(d: Path) -> Path:
    p = d / "traversal.zip"
    with zipfile.ZipFile(p, "w") as z:
        z.write(GOOD_CU, "pkg/../../escaped.cu")
    return p


def _absolute_zip(d: Path) -> Path:
    p = d / "absolute.zip"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr(zipfile.ZipInfo("/tmp/sftbuild-escaped.cu"), GOOD_CU.read_bytes())
    return p


def _size_bomb(d: Path) -> Path:
    """A zip whose one member claims to unpack to ~4 GB."""
    p = d / "bomb.zip"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("big.cu", b"\0" * 1000)
    b = bytearray(p.read_bytes())
    for sig, off in ((b"PK\x01\x02", 24), (b"PK\x03\x04", 22)):
        i = b.find(sig)
        b[i + off:i + off + 4] = struct.pack("<I", 0xFFFFFFF0)
    p.write_bytes(bytes(b))
    return p


def _member_bomb(d: Path) -> Path:
    from sftbuild.harvest.sources import MAX_ARCHIVE_MEMBERS

    p = d / "members.zip"
    with zipfile.ZipFile(p, "w") as z:
        for i in range(MAX_ARCHIVE_MEMBERS + 1):
            z.writestr(f"f{i}", b"")
    return p


def _link_tar(d: Path) -> Path:
    p = d / "link.tar"
    with tarfile.open(p, "w") as t:
        ti = tarfile.TarInfo("pkg/passwd.cu")
        ti.type, ti.linkname = tarfile.SYMTYPE, "/etc/passwd"
        t.addfile(ti)
    return p


def _link_zip(d: Path) -> Path:
    p = d / "link.zip"
    with zipfile.ZipFile(p, "w") as z:
        info = zipfile.ZipInfo("pkg/passwd.cu")
        info.external_attr = (0o120777 << 16)
        z.writestr(info, "/etc/passwd")
    return p


def _missing(d: Path) -> Path:
    return d / "nowhere" / "src"


def _bad_registry(d: Path) -> Path:
    p = d / "reg.yaml"
    p.write_text("sources: [unclosed\n")
    return p


SOURCES = [
    (_corrupt_zip, ["corrupt.zip", "cannot unpack"]),
    (_truncated_tgz, ["truncated.tar.gz", "cannot unpack"]),
    (_traversal_tar, ["traversal.tar.gz", "path-traversal", "../../escaped.cu"]),
    (_traversal_zip, ["traversal.zip", "path-traversal"]),
    (_absolute_zip, ["absolute.zip", "path-traversal"]),
    (_size_bomb, ["bomb.zip", "unpacks to more than"]),
    (_member_bomb, ["members.zip", "too many"]),
    (_link_tar, ["link.tar", "link"]),
    (_link_zip, ["link.zip", "symlink"]),
    (_missing, ["nowhere", "does not exist"]),
    (_bad_registry, ["reg.yaml", "not valid YAML"]),
]


def _light(tmp_path: Path) -> Path:
    cfg = tmp_path / "light.yaml"
    cfg.write_text(LIGHT)
    return cfg


def test_a_cache_dir_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(LIGHT + f"harvest: {{cache_dir: {blocker / 'cache'}}}\n")
    tgz = tmp_path / "pkg.tar.gz"
    with tarfile.open(tgz, "w:gz") as t:
        t.add(GOOD_CU, arcname="pkg/kernels.cu")
    r = _invoke(["harvest", "-q", "-w", tmp_path / "ws", "-c", cfg, tgz])
    assert_refused(r, ["no source could be harvested"])
    assert f"harvest: source {tgz}: harvest.cache_dir {blocker / 'cache'} cannot be created" in r.output


@pytest.mark.parametrize("make, words", SOURCES, ids=[m.__name__.strip("_") for m, _ in SOURCES])
def test_a_bad_source_alone_is_a_sentence_and_a_failed_harvest(tmp_path, make, words):
    spec = make(tmp_path)
    r = _invoke(["harvest", "-q", "-w", tmp_path / "ws", "-c", _light(tmp_path), spec])
    assert_refused(r, ["no source could be harvested"])
    said = [line for line in r.output.splitlines() if line.startswith(f"harvest: source {spec}:")]
    assert len(said) == 1 and all(w in said[0] for w in words), r.output
    assert not (tmp_path.parent / "escaped.cu").exists() and not Path("/tmp/sftbuild-escaped.cu").exists()


def test_bad_sources_are_reported_and_the_good_ones_around_them_are_harvested(tmp_path):
    bad = [make(tmp_path) for make, _ in SOURCES]
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "scale.cu").write_text("__global__ void scale_linked(float* y, const float* x, int n) {\n"
                                      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                      "  if (i < n) y[i] = 3.0f * x[i];\n}\n")
    (linked / "passwd.cu").symlink_to("/etc/passwd")
    specs = [bad[0], DATA / "cuda_tree", *bad[1:6], linked, *bad[6:], DATA / "triton_src"]
    ws = tmp_path / "ws"
    r = _invoke(["harvest", "-q", "-w", ws, "-c", _light(tmp_path), *specs])
    # the good ones are harvested, and the command still fails, saying how many did not and where they are listed
    assert_refused(r, [f"{len(bad)} of {len(specs)} sources could not be harvested", "harvest_errors.json",
                       "the other 3 were harvested"])
    assert set(json.loads((ws / "reports" / "harvest_errors.json").read_text())) == {str(b) for b in bad}
    for spec, (_, words) in zip(bad, SOURCES):
        said = [line for line in r.output.splitlines() if line.startswith(f"harvest: source {spec}:")]
        assert len(said) == 1 and all(w in said[0] for w in words), (spec, r.output)
    assert f"harvest: source {linked}: 1 symlink(s) point outside the source and were not followed" in r.output
    store = Store(ws)
    try:
        by_source = {}
        for rec in store.records():
            by_source[rec.source] = by_source.get(rec.source, 0) + 1
        assert all(by_source.get(str(s)) for s in (DATA / "cuda_tree", DATA / "triton_src", linked)), by_source
        assert all("root:" not in rec.code for rec in store.records())
        (manifest,) = store.manifests()
        assert manifest["finished"] is not None
        assert set(manifest["stats"]["errors"]) == {str(b) for b in bad}
    finally:
        store.close()


@pytest.mark.parametrize("command", [["harvest"], ["run"]])
def test_no_source_configured_and_none_named(tmp_path, command):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(LIGHT + "harvest: {sources: []}\n")
    assert_refused(_invoke([*command, "-q", "-w", tmp_path / "ws", "-c", cfg]),
                   ["nothing to harvest", "harvest.sources is empty"])


def test_a_source_named_by_an_empty_string(tmp_path):
    r = _invoke(["harvest", "-q", "-w", tmp_path / "ws", "-c", _light(tmp_path), ""])
    assert_refused(r, ["no source could be harvested"])
    assert "a source named by an empty string is refused" in r.output


def test_a_registry_folder_with_an_empty_location(tmp_path):
    reg = tmp_path / "reg.yaml"
    reg.write_text("sources:\n  - name: mine\n    kind: dir\n    location: ''\n")
    r = _invoke(["harvest", "-q", "-w", tmp_path / "ws", "-c", _light(tmp_path), reg])
    assert_refused(r, ["no source could be harvested"])
    assert "source 'mine': its location is empty" in r.output


def test_a_registry_with_a_key_written_twice(tmp_path):
    reg = tmp_path / "reg.yaml"
    reg.write_text(f"sources:\n  - name: mine\n    kind: dir\n    location: {DATA / 'cuda_tree'}\n"
                   f"    kind: git\n")
    r = _invoke(["harvest", "-q", "-w", tmp_path / "ws", "-c", _light(tmp_path), reg])
    assert_refused(r, ["no source could be harvested"])
    assert "key 'kind' is written twice (lines 3 and 5)" in r.output


def test_a_file_name_that_is_not_utf8_is_a_skip_row(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.cu").write_bytes(GOOD_CU.read_bytes())
    with open(os.path.join(os.fsencode(src), b"bad\xff.cu"), "wb") as f:
        f.write(GOOD_CU.read_bytes())
    ws = tmp_path / "ws"
    r = _invoke(["harvest", "-q", "-w", ws, "-c", _light(tmp_path), src])
    assert r.exit_code == 0 and "Traceback" not in r.output and "not_utf8_name=1" in r.output, r.output


def test_a_bad_input_exits_cleanly_as_a_process(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("executor: {cpu_workers: -4}\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    p = subprocess.run([sys.executable, "-m", "sftbuild.cli", "status", "-w", str(tmp_path / "ws"), "-c", str(cfg)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode != 0 and "Traceback" not in p.stderr + p.stdout
    assert p.stderr.strip().splitlines() == [f"Error: {cfg}: executor.cpu_workers: must be >= 0, got -4"]


def test_init_where_nothing_can_be_written(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    assert_refused(_invoke(["init", blocker / "sftbuild.yaml"]), ["cannot write", "sftbuild.yaml"])
    assert_refused(_invoke(["init", tmp_path / "missing" / "sftbuild.yaml"]), ["cannot write"])
    assert_refused(_invoke(["init", blocker]), ["exists", "--force"])
