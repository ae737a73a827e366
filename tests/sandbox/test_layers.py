"""Each filesystem layer sftbuild.sandbox falls back to without bubblewrap (unshare's mount view,
Landlock), the refusal where none works, the static and audit checks of Python candidates, and the
scrub of secret content. Layers this machine lacks are skipped with the reason."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

import pytest

from sftbuild import sandbox
from sftbuild.validate import static

ROOT = Path(__file__).resolve().parents[2]
SMALL = sandbox.Policy(cpu_seconds=20, memory_gb=4, file_mb=64, processes=256, output_kb=16)
# (policy isolation, layers left out): each fallback auto can pick
FALLBACKS = {"mounts+landlock": ("unshare", ""), "mounts": ("unshare", "landlock"), "landlock": ("landlock", "")}


@pytest.fixture(params=sorted(FALLBACKS))
def layer(request, monkeypatch):
    iso, without = FALLBACKS[request.param]
    monkeypatch.setenv(sandbox.WITHOUT_ENV, without)
    sandbox._probe.cache_clear()
    if sandbox._probe(iso) or any(sandbox._probe(k) for k in request.param.split("+")):
        pytest.skip(sandbox._probe(iso) or "; ".join(filter(None, map(sandbox._probe, request.param.split("+")))))
    monkeypatch.setenv(sandbox.ENV_KEY, json.dumps(dataclasses.asdict(dataclasses.replace(SMALL, isolation=iso))))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    yield request.param
    sandbox._probe.cache_clear()


def run(name, task, **kw):
    return sandbox.run_isolated(f"tests.sandbox.payloads:{name}", task, 60, **kw)


def test_each_fallback_hides_host_files_and_refuses_writes_outside(layer, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    assert sandbox.layers()["filesystem"].startswith("read-only view")
    read = run("read_host_file", {"secret": str(secret)})
    assert read["read"] is None, read
    wrote = run("write_outside", {"target": str(tmp_path / "escape")})
    assert not list(tmp_path.glob("escape*")), wrote


def test_a_kept_worker_and_its_forks_keep_their_writable_folders(layer, tmp_path):
    """Landlock is inherited by each fork of a renewing worker: the call's cache stays writable, and
    the scratch folder is emptied between forks."""
    cache = tmp_path / "cache"
    cache.mkdir()
    held = [sandbox.run_forked("tests.sandbox.payloads:write_in", {"cache_dir": str(cache)}, 60) for _ in range(2)]
    assert all(isinstance(h, dict) for h in held), held
    assert len(list(cache.glob("*.out"))) == 2 and held[1]["held"] == [], held


def test_a_sandbox_nests_inside_each_fallback(layer):
    res = run("nested", None)
    assert isinstance(res, dict) and res.get("home_is_dir"), res


def test_a_sandboxed_process_cannot_signal_the_run(layer):
    got = []
    old = signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
    try:
        res = run("signal_pid", {"pid": os.getpid(), "sig": int(signal.SIGUSR1)})
    finally:
        signal.signal(signal.SIGUSR1, old)
    if layer == "landlock" and sandbox.confine.landlock_abi() < 6:
        pytest.skip("Landlock before ABI 6 does not scope signals")
    assert not got, res


def test_untrusted_code_does_not_run_where_nothing_confines_its_files(monkeypatch, ctx):
    from sftbuild.context import StageRun, UserError

    monkeypatch.setenv(sandbox.WITHOUT_ENV, "bwrap,landlock,mounts")
    monkeypatch.setenv(sandbox.ENV_KEY, json.dumps(dataclasses.asdict(SMALL)))
    sandbox._probe.cache_clear()
    try:
        why = sandbox.refusal()
        assert why and "sandbox.allow_unconfined" in why and "\n" not in why
        with pytest.raises(UserError, match="allow_unconfined"):
            with StageRun(ctx, "validate", {}):
                pass
        assert ctx.store.manifests() == [], "nothing is recorded before the refusal"
        assert isinstance(run("scratch_files", None), sandbox.WorkerFailure)
        with StageRun(ctx, "dedupe", {}):  # runs no harvested code
            pass
        monkeypatch.setenv(sandbox.ENV_KEY, json.dumps(dataclasses.asdict(
            dataclasses.replace(SMALL, allow_unconfined=True))))
        assert sandbox.refusal() is None
        assert any("allow_unconfined" in line for line in sandbox.unavailable())
    finally:
        sandbox._probe.cache_clear()


SPELLINGS = {
    "open_write": "open('/home/u/x', 'w').write('a')",
    "open_mode_kw": "f = open(p, mode='a+')",
    "pathlib": "from pathlib import Path as P\nP.home().joinpath('x').write_text('a')",
    "path_open": "import pathlib\npathlib.Path('/x').open('wb')",
    "os_open": "import os\nos.open('/x', os.O_WRONLY | os.O_CREAT)",
    "shutil": "import shutil as s\ns.copy('/etc/passwd', '/tmp/x')",
    "os_replace": "from os import replace\nreplace('a', 'b')",
    "socket": "import socket as q\nq.create_connection(('10.0.0.1', 80))",
    "urllib": "from urllib.request import urlopen\nurlopen('http://x')",
    "requests": "import requests\nrequests.get('http://x')",
    "http_client": "import http.client",
    "subprocess": "from subprocess import run as r\nr(['ls'])",
    "os_exec": "import os\nos.execv('/bin/sh', ['sh'])",
    "posix_spawn": "import os\nos.posix_spawn('/bin/sh', ['sh'], {})",
    "fork": "import os as o\no.fork()",
    "multiprocessing": "import multiprocessing.pool",
    "pty": "import pty\npty.spawn('sh')",
    "getattr_computed": "import os\ngetattr(os, 'sys' + 'tem')('ls')",
    "getattr_literal": "import os\ngetattr(os, 'popen')('ls')",
    "dunder_import": "__import__('os').system('ls')",
    "importlib": "import importlib\nimportlib.import_module('subprocess')",
    "eval": "eval(\"__import__('os')\")",
    "open_as_value": "w = open\nw('/x', 'w')",
    "builtins": "import builtins\nbuiltins.open('/x', 'w')",
}
CLEAN = """import os
import torch
import triton
import triton.language as tl

code = 3
def compile(x): return x
def kernel(x):
    with open(os.path.join(os.path.dirname(__file__), 'table.txt')) as f:
        f.read()
    y = torch.compile(x) if code else x.replace(1, 2)
    return os.environ.get('X'), y
"""


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_python_effects_finds_writes_network_and_processes_however_spelt(name):
    found = [f for f in static.scan(SPELLINGS[name], "triton") if f.check in ("python_effects", "python_forbidden")]
    assert found and found[0].reason == "forbidden_call", name


def test_python_effects_passes_plain_kernel_code():
    from sftbuild.validate.static.python_effects import PythonEffects

    assert list(PythonEffects().check(static.Source(CLEAN, "triton"))) == []


def test_stored_text_loses_lines_that_hold_a_host_secret(tmp_path, monkeypatch):
    from sftbuild.validate import pipeline

    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("AAAAC3NzaC1lZDI1NTE5-canary-key\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SOME_TOKEN", "tok-canary-0123456789")
    sandbox._secret_pattern.cache_clear()
    payload = {"detail": "candidate raised ValueError: AAAAC3NzaC1lZDI1NTE5-canary-key", "other": {
        "note": "ok line\nleak tok-canary-0123456789"}, "list": ["x AAAAC3NzaC1lZDI1NTE5-canary-key"]}
    text = json.dumps(pipeline.scrub_payload(payload, []))
    assert "canary" not in text and "ok line" in text
    assert "canary" not in json.dumps(sandbox.without_secrets(payload))  # what bind stores from a probe
    sandbox._secret_pattern.cache_clear()
