"""Fault injection on the CPU: hostile code meets the sandbox (sftbuild.sandbox).

Each case is one thing untrusted code might try: escape the sandbox (write outside it, read a host
file, reach the network, flood the process table, read the environment, run a payload hidden in a
decorator, a default argument or a reference file), crash (segfault, abort, os._exit, a stdout
flood) or hang a compile (macro and template-recursion bombs, a compiler whose children outlive
it). Each ends as one verdict with a clear reason; no file appears outside the sandbox; no process
survives. Where this machine lacks an isolation layer (no bubblewrap, no user namespaces) the case
asserts that the sandbox reports the layer unavailable instead.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from sftbuild import sandbox
from sftbuild.sandbox import WorkerFailure

ROOT = Path(__file__).resolve().parents[2]
# SFTBUILD_TEST_ISOLATION=none|unshare|landlock runs the suite as on a machine without bubblewrap
SMALL = sandbox.Policy(isolation=os.environ.get("SFTBUILD_TEST_ISOLATION", "auto"), cpu_seconds=20, memory_gb=4, file_mb=64, processes=256, output_kb=16)


@pytest.fixture(autouse=True)
def small_limits(monkeypatch):
    """Small limits keep every case to seconds; the policy reaches sandboxed processes by the environment."""
    monkeypatch.setenv(sandbox.ENV_KEY, json.dumps(dataclasses.asdict(SMALL)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def run(name: str, task, timeout: float = 60, **kw):
    return sandbox.run_isolated(f"tests.sandbox.payloads:{name}", task, timeout, **kw)


def files_contained() -> bool:
    """True when the filesystem is isolated; else the sandbox must say that it is not."""
    if sandbox.layers()["filesystem"].startswith("read-only view"):
        return True
    said = " ".join(sandbox.unavailable())
    assert "can read and write this user's files" in said, said
    return False


def network_contained() -> bool:
    if sandbox.layers()["network"] == "blocked":
        return True
    said = " ".join(sandbox.unavailable())
    assert "reach the network" in said or "UDP open" in said or sandbox.policy().network, said
    return False


def survivors(mark: str) -> list[int]:
    """Processes whose command line or environment carries `mark`."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if mark.encode() in (d / "cmdline").read_bytes() or mark.encode() in (d / "environ").read_bytes():
                found.append(int(d.name))
        except OSError:
            continue
    return found


def wait_gone(mark: str, seconds: float = 5.0) -> list[int]:
    end = time.monotonic() + seconds
    while survivors(mark) and time.monotonic() < end:
        time.sleep(0.1)
    return survivors(mark)


def unique_seconds() -> str:
    """A sleep duration no other process on the machine uses: the mark of this case's processes."""
    return f"{900 + uuid.uuid4().int % 9000}.{uuid.uuid4().int % 1000:03d}"


# ---- escapes -------------------------------------------------------------------------------------

def test_the_layers_are_detected_once_and_reported(tmp_path):
    lay = sandbox.layers()
    assert lay["isolation"] in ("bwrap", "unshare", "landlock", "none") and lay["env"] == "allowlist"
    if lay["isolation"] != "bwrap":
        assert sandbox.unavailable(), "a missing layer must be said"
    # and it is in every run manifest
    from sftbuild.config import Config
    from sftbuild.context import Context, StageRun
    from sftbuild.executor import LocalExecutor
    from sftbuild.store import Store

    said, cfg = [], Config()
    cfg.sandbox.isolation = SMALL.isolation
    ctx = Context(Store(tmp_path / "ws"), cfg, LocalExecutor(cpu_workers=1, progress=False), echo=said.append)
    with StageRun(ctx, "validate", {}):
        pass
    env = ctx.store.manifests()[-1]["env"]
    env = json.loads(env) if isinstance(env, str) else env
    assert env["sandbox"]["isolation"] == lay["isolation"]


@pytest.mark.parametrize("isolation", ["auto", "unshare", "landlock", "none"])
def test_the_scratch_folder_exists_under_every_isolation(monkeypatch, isolation):
    # compute-sanitizer refuses to start ("Failed to access the temporary directory") without it
    if isolation in ("unshare", "landlock") and sandbox._probe(isolation):
        pytest.skip(sandbox._probe(isolation))
    pol = dataclasses.replace(SMALL, isolation=isolation)
    monkeypatch.setenv(sandbox.ENV_KEY, json.dumps(dataclasses.asdict(pol)))
    res = run("scratch_files", None)
    assert isinstance(res, dict) and res["home_is_dir"], res


def test_a_write_outside_the_scratch_folder_is_refused(tmp_path):
    target = tmp_path / "escape"
    res = run("write_outside", {"target": str(target)})
    assert isinstance(res, dict)
    if files_contained():
        assert not list(tmp_path.glob("escape*")), "a file appeared outside the sandbox"
        assert res["open"].startswith("refused") and res["pathlib"].startswith("refused")


def test_a_host_file_cannot_be_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-" + uuid.uuid4().hex)
    res = run("read_host_file", {"secret": str(secret)})
    if files_contained():
        assert res["read"] is None and "TOPSECRET" not in json.dumps(res)


def test_the_network_is_unreachable():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    res = run("connect", {"port": server.getsockname()[1]})
    # the sandbox has ended: a connection it made waits in the backlog, so one look finds it (waiting
    # out a timeout for one that cannot come cost seconds)
    server.settimeout(0.2)
    accepted = [_accept(server)]
    server.close()
    if network_contained():
        assert res["connected"] is False and accepted == [None]


def _accept(server):
    try:
        return server.accept()[1]
    except OSError:
        return None


def test_a_process_flood_ends_at_the_timeout_and_leaves_no_process():
    mark = "SFTBUILD_FLOOD_" + uuid.uuid4().hex
    res = run("process_flood", {"cap": 400}, timeout=3, env={"SFTBUILD_TEST_MARK": mark})
    assert isinstance(res, WorkerFailure) and res.kind in ("timeout", "crash"), res
    assert wait_gone(mark) == []


def test_the_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-" + uuid.uuid4().hex)
    monkeypatch.setenv("HF_TOKEN", "hf_" + uuid.uuid4().hex)
    env = run("environment", {})["env"]
    assert "AWS_SECRET_ACCESS_KEY" not in env and "HF_TOKEN" not in env
    assert "s3cr3t" not in json.dumps(env) and env["HOME"] != os.environ.get("HOME")


TRITON_PAYLOAD = '''import triton
import triton.language as tl


@triton.jit(do_not_specialize=[open({deco!r}, "w").write("pwned")])
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr = __import__("pathlib").Path({default!r}).write_text("x") * 0 + 128):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def double(x, scale=open({wrapper!r}, "w")):
    out = x.clone()
    double_kernel[(1,)](x, out, x.numel())
    return out
'''


def test_payloads_in_decorators_and_defaults_never_run_in_this_process(tmp_path):
    """Harvest reads them from the AST; the Triton compile gate runs the kernel's definition without its
    decorators, in the sandbox."""
    pytest.importorskip("triton")
    from sftbuild import parsing
    from sftbuild.harvest import triton_extract
    from sftbuild.validate import pipeline

    paths = {k: str(tmp_path / k) for k in ("deco", "default", "wrapper")}
    code = TRITON_PAYLOAD.format(**paths)
    import ast

    triton_extract.entry_points(code)
    parsing.default_hints(ast.parse(code))
    assert not any(os.path.exists(p) for p in paths.values()), "harvest evaluated a payload"
    res = pipeline.triton_gate({"code": code, "cache_dir": str(tmp_path / "cache"), "arch": "sm_90", "nvcc": "",
                                "timeout": 30})
    assert "ok" in res and (res["ok"] or res["reason"] in ("compile_error", "compile_timeout")), res
    assert not os.path.exists(paths["deco"]) and not os.path.exists(paths["wrapper"])  # never executed at all
    if files_contained():
        assert not os.path.exists(paths["default"])


def test_a_payload_in_a_reference_file_stays_in_the_sandbox(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    target = tmp_path / "ref_escape"
    (tree / "reference.py").write_text(
        "import os, pathlib\n"
        f"pathlib.Path({str(target) + '.pathlib'!r}).write_text('x')\n"
        f"open({str(target) + '.open'!r}, 'w').write('x')\n"
        f"os.system('touch {target}.shell')\n")
    res = run("import_reference", {"tree": str(tree)}, timeout=120)
    assert isinstance(res, (dict, WorkerFailure))
    if files_contained():
        # the writes landed in the sandbox's private /tmp, or were refused: nothing outside it
        assert not list(tmp_path.glob("ref_escape*")), "a file appeared outside the sandbox"


def test_a_package_build_backend_runs_in_the_sandbox(tmp_path, monkeypatch):
    """`pip download` of an sdist runs the package's build backend to read its metadata: the harvest's
    pip kind runs pip in the sandbox (network allowed, nothing else)."""
    import tarfile

    from sftbuild.harvest.kinds import pip

    pkg = tmp_path / "evilpkg-1.0"
    pkg.mkdir()
    target = tmp_path / "pwned_by_backend"
    (pkg / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                        'backend-path = ["."]\n')
    (pkg / "backend.py").write_text(
        f"import os\nopen({str(target)!r}, 'w').write('x')\n"
        "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
        "def prepare_metadata_for_build_wheel(d, config_settings=None):\n"
        "    md = os.path.join(d, 'evilpkg-1.0.dist-info'); os.makedirs(md)\n"
        "    open(os.path.join(md, 'METADATA'), 'w').write('Metadata-Version: 2.1\\nName: evilpkg\\nVersion: 1.0\\n')\n"
        "    return 'evilpkg-1.0.dist-info'\n")
    sdist = tmp_path / "evilpkg-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(pkg, arcname=pkg.name)
    # the archive is readable in the sandbox, as a package on an index would be reachable
    monkeypatch.setenv(sandbox.ENV_KEY, json.dumps(dataclasses.asdict(
        dataclasses.replace(SMALL, read_only=[str(sdist)]))))
    try:
        pip._download(str(sdist), tmp_path / "dest")
        assert [p.name for p in (tmp_path / "dest").iterdir()] == [sdist.name]
    except pip.SourceError as e:  # Landlock refused the backend's write, and the backend failed
        assert "landlock" in sandbox.filesystem(), e
    if files_contained():
        assert not target.exists(), "the build backend wrote outside the sandbox"


# ---- process faults ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, says", [("segfault", "SIGSEGV"), ("abort", "SIGABRT"), ("hard_exit", "exit code 3")])
def test_a_crash_is_one_failure_that_names_it(name, says, tmp_path):
    res = run(name, {})
    assert isinstance(res, WorkerFailure) and res.kind == "crash" and says in res.detail, res
    assert not list(Path.cwd().glob("core*")) and not list(tmp_path.glob("*"))


def test_a_stdout_flood_is_capped():
    res = run("flood_stdout", {"kb": 20000})
    assert res["done"] is True
    assert len(res["_log"]) <= (SMALL.output_kb << 10) + 200 and "output dropped" in res["_log"]


# ---- compile faults ------------------------------------------------------------------------------

def test_a_compile_timeout_kills_the_compilers_children(tmp_path):
    from sftbuild.trial import nvcc_parallel

    mark = unique_seconds()
    code, log = nvcc_parallel.run_command(["bash", "-c", f"(sleep {mark} & sleep {mark}; wait) & sleep {mark}"],
                                          str(tmp_path), 1.5)
    assert code == -9 and "exceeded" in log
    assert wait_gone(f"sleep\0{mark}") == []


@pytest.mark.nvcc
@pytest.mark.parametrize("bomb, reasons", [
    ("macro", ("compile_timeout", "compile_error")),
    ("template", ("compile_error", "compile_timeout")),
])
def test_compile_bombs_end_as_one_verdict_and_leave_no_process(bomb, reasons, tmp_path):
    from sftbuild.trial import compile as C

    if bomb == "macro":
        code = "#define L0 x x x x\n" + "".join(f"#define L{i} L{i - 1} L{i - 1} L{i - 1} L{i - 1}\n"
                                                  for i in range(1, 40)) + "__global__ void k() { L39 }\n"
    else:
        code = ("template <int N> struct R { static const int v = R<N + 1>::v + 1; };\n"
                "__global__ void k(int *o) { *o = R<0>::v; }\n")
    res = C.compile_task({"id": "x", "code": code, "harness": None, "include_sets": [], "arch": "sm_90",
                          "timeout": 2, "nvcc": "", "cache_dir": str(tmp_path)})  # a bomb outlasts any bound
    assert not res["ok"] and res["reason"] in reasons, res
    assert wait_gone(str(tmp_path)) == [], "a compiler process outlived its compile"


@pytest.mark.nvcc
def test_an_include_of_a_host_file_names_the_path_not_its_contents(tmp_path):
    from sftbuild.trial import compile as C

    host = Path("/etc/hostname")
    code = '#include "../../../../etc/hostname"\n__global__ void k() {}\n'
    res = C.compile_task({"id": "x", "code": code, "harness": None, "include_sets": [], "arch": "sm_90",
                          "timeout": 30, "nvcc": "", "cache_dir": str(tmp_path)})
    assert not res["ok"] and "etc/hostname" in res["log"]
    if host.exists() and host.read_text().strip():
        assert host.read_text().strip() not in res["log"]


def test_reward_runs_no_payload_in_its_caller(tmp_path, monkeypatch):
    """The issue's case: a payload in a decorator argument and in a default value ran inside the
    caller of reward(). Now one Reward comes back and no file appears."""
    pytest.importorskip("triton")
    from sftbuild.config import ValidateConfig
    R = importlib.import_module("sftbuild.validate.reward")
    from tests.redteam.cases import cases

    case = next(c for c in cases() if c.name == "twin_relu_triton")
    deco, default = tmp_path / "deco", tmp_path / "default"
    write = "pathlib.Path({!r}).write_text(str(os.getpid()))"  # which process ran it
    code = case.record["code"].replace("import torch\n", "import os\nimport pathlib\nimport torch\n", 1).replace(
        "@triton.jit\n", f"@triton.jit(do_not_specialize=[{write.format(str(deco))} and 0])\n"
    ).replace("def relu(x):", f"def relu(x, _={write.format(str(default))}):")
    task = {"task_id": "t", "language": "triton", "binding": case.record["binding"], "entry": case.record["entry"]}
    cfg = ValidateConfig(shapes=1, seeds=1, timing=False, memcheck="off")
    r = R.reward(task, code, config=cfg, cache_dir=str(tmp_path / "cache"))
    assert isinstance(r, R.Reward) and (r.reason or r.status), r
    for f in (deco, default):  # the candidate's module runs in the sandbox, never here
        assert not f.exists() or f.read_text() != str(os.getpid())
        if files_contained():
            assert not f.exists()


@pytest.mark.nvcc
def test_reward_details_carry_no_host_file(tmp_path):
    R = importlib.import_module("sftbuild.validate.reward")

    host = Path("/etc/hostname")
    code = '#include "../../../../etc/hostname"\n__global__ void k(float *x) { x[0] = 1.f; }\n'
    task = {"task_id": "t", "language": "cuda", "binding": {"kind": "op", "op": "relu", "how": "declared"},
            "entry": {"kernels": ["k"]}}  # bound, so the compile gate meets the include
    r = R.reward(task, code, cache_dir=str(tmp_path))
    assert r.score == 0.0 and r.reason == "unsafe_include" and "etc/hostname" in json.dumps(r.detail)
    if host.exists() and host.read_text().strip():
        assert host.read_text().strip() not in json.dumps(r.detail)


def test_logs_withhold_lines_from_files_outside_the_record():
    from sftbuild.trial import logs
    from sftbuild.validate import pipeline

    log = ('/etc/shadow(1): error: expected a declaration\n'
           '  root:$6$secrethash:19000:0:99999:7:::\n'
           '  ^\n'
           'kernel.cu(3): error: identifier "y" is undefined\n'
           '  int x = y;\n')
    out = logs.scrub(log, roots=["/tmp/rec"])
    assert "secrethash" not in out and "/etc/shadow" in out and 'identifier "y"' in out and "int x = y" in out
    payload = pipeline.scrub_payload({"log": log, "compile": {"detail": log}}, ["/tmp/rec"])
    assert "secrethash" not in json.dumps(payload)
    assert len(logs.scrub("x\n" * 100000, cap=1000)) < 1100
    link = "For debugging consider passing CUDA_LAUNCH_BLOCKING=1; see https://docs.nvidia.com/cuda/cuda-runtime-api"
    assert logs.scrub(link) == link


# ---- the main process dies -----------------------------------------------------------------------

KILLED_RUN = '''
import os, sys, threading
from sftbuild.executor import GpuWorker, LocalExecutor
from tests.sandbox import payloads
mark, cwd = sys.argv[1], sys.argv[2]
w = GpuWorker("0")
w.send(payloads.sleeper, mark)
ex = LocalExecutor(cpu_workers=2, gpus="none", progress=False)
print("started", flush=True)
list(ex.map_cpu(payloads.compile_like, [{"mark": mark, "cwd": cwd}, {"mark": mark, "cwd": cwd}]))
'''


def test_after_a_kill_9_of_the_main_process_nothing_of_the_run_survives(tmp_path):
    mark = unique_seconds()
    env = {**os.environ, "SFTBUILD_TEST_MARK": "SFTBUILD_RUN_" + mark}
    p = subprocess.Popen([sys.executable, "-c", KILLED_RUN, mark, str(tmp_path)], env=env, cwd=str(ROOT))
    try:
        end = time.monotonic() + 60
        while len(survivors(f"sleep\0{mark}")) < 5 and time.monotonic() < end:  # 2 per compile, 1 in the worker
            time.sleep(0.2)
        assert len(survivors(f"sleep\0{mark}")) >= 5, "the run did not start its processes"
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    assert wait_gone(f"sleep\0{mark}") == [] and wait_gone("SFTBUILD_RUN_" + mark) == []


def test_a_workers_messages_from_two_threads_arrive_whole():
    import socket
    import threading
    from multiprocessing.connection import Connection

    a, b = socket.socketpair()
    worker = sandbox._LockedConnection(Connection(a.detach()))
    parent = sandbox.PlainConnection(Connection(b.detach()))
    big = "x" * 200_000  # larger than a socket buffer: unlocked, writes of two threads interleave

    def talk(tag):
        for i in range(40):
            worker.send(("deadline", (float(i), f"{tag}{big}")))

    threads = [threading.Thread(target=talk, args=(t,)) for t in "ab"]
    got = []
    reader = threading.Thread(target=lambda: got.extend(parent.recv() for _ in range(80)))
    reader.start()
    for t in threads:
        t.start()
    for t in threads + [reader]:
        t.join(60)
    assert len(got) == 80 and all(m[0] == "deadline" and m[1][1][1:] == big for m in got)
