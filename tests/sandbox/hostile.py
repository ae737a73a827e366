"""The hostile fixtures (tests/sandbox/hostile/) through harvest, bind, validate, dedupe, review and
export under one sandbox layer, and what reached the host: the rows of the containment table.

Each fixture tries one thing: write the user's home, the workspace, the system's temporary folder or
the working folder; dump the environment; read a planted secret (a canary in a fake HOME, an
/etc-like shadow file) and raise or print it; connect out; start a process; signal this process.
`prepare(root, port)` writes them with this run's paths filled in; `contain(plan, layer, listener)` runs the stages
on a copy of one harvested workspace and returns what escaped. Run by test_hostile.py and by
hostile_table.py (the table, on any machine).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import threading
import uuid
from pathlib import Path

from sftbuild import sandbox

HERE = Path(__file__).resolve().parent / "hostile"
# each layer `auto` can pick, as the policy and the layers left out that make auto pick it
LAYERS = {"bwrap": ("auto", ""), "unshare+landlock": ("auto", "bwrap"),
          "unshare+mounts": ("auto", "bwrap,landlock"), "landlock": ("auto", "bwrap,mounts,unshare")}
CONTROL = {"none": ("none", "")}  # no isolation: shows what the payloads do where nothing stops them


@dataclasses.dataclass
class Plan:
    root: Path
    mark: str  # in every file name a payload writes outside HOME and the workspace
    canary: str  # the planted secrets' text
    port: int
    sources: list


def prepare(root: Path, port: int) -> Plan:
    mark = f"sftbuild-hostile-{uuid.uuid4().hex[:10]}"
    canary = f"CANARY-{uuid.uuid4().hex}"
    home, etc = root / "home", root / "etc"
    (home / ".ssh").mkdir(parents=True)
    etc.mkdir()
    (home / ".ssh" / "id_rsa").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{canary}-ssh\n")
    (home / ".netrc").write_text(f"machine example.com login me password {canary}-netrc\n")
    (etc / "shadow").write_text(f"root:{canary}-shadow:19000:0:99999:7:::\n")
    fill = {"@HOME@": str(home), "@ETC@": str(etc), "@WS@": str(root / "ws"), "@MARK@": mark,
            "@PORT@": str(port), "@PID@": str(os.getpid())}
    sources = []
    for kind in sorted(p.name for p in HERE.iterdir() if p.is_dir()):
        dst = root / "src" / kind
        dst.mkdir(parents=True)
        for f in sorted((HERE / kind).iterdir()):
            text = f.read_text()
            for k, v in fill.items():
                text = text.replace(k, v)
            (dst / f.name).write_text(text)
        sources.append(str(dst))
    (root / "cwd").mkdir()
    return Plan(root, mark, canary, port, sources)


class Listener:
    """Counts TCP connections to a local port, and SIGUSR1s to this process."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = self.signals = 0
        threading.Thread(target=self._accept, daemon=True).start()
        self._old = signal.signal(signal.SIGUSR1, self._signalled)

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def _signalled(self, *a):
        self.signals += 1

    def close(self):
        signal.signal(signal.SIGUSR1, self._old)
        self.sock.close()


def host_files(plan: Plan) -> set[str]:
    """What a payload could have left on the host: files in the fake HOME, the working folder, the
    workspace's top, and the system's temporary folder under this run's mark."""
    out = {str(p) for p in (plan.root / "home").rglob("*")} | {str(p) for p in (plan.root / "cwd").rglob("*")}
    out |= {str(p) for p in (plan.root / "ws").glob("*pwned*")}
    out |= {f"/tmp/{n}" for n in os.listdir("/tmp") if plan.mark in n}
    return out


def cli(*args: str) -> str:
    """One sftbuild command in this process (torch and the op catalogue load once for every layer)."""
    from click.testing import CliRunner

    from sftbuild.cli import main

    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return res.output


def harvest(plan: Plan) -> str:
    """The workspace every layer starts from (harvest runs none of the records' code)."""
    (plan.root / "sftbuild.yaml").write_text("export:\n  interpreter_only: split\nreview:\n  fraction: 1.0\n")
    return cli("harvest", "-q", "-w", str(plan.root / "base"), "-c", str(plan.root / "sftbuild.yaml"), *plan.sources)


def contain(plan: Plan, layer: str, listener: Listener) -> dict:
    """One row of the table: bind, validate, dedupe, review (all accepted) and export under `layer`,
    on a copy of the harvested workspace, from the fixtures' working folder."""
    isolation, without = {**LAYERS, **CONTROL}[layer]
    os.environ[sandbox.WITHOUT_ENV] = without
    sandbox._probe.cache_clear()
    ws, conf = plan.root / "ws", str(plan.root / f"{layer}.yaml")
    Path(conf).write_text((plan.root / "sftbuild.yaml").read_text() + f"sandbox:\n  isolation: {isolation}\n")
    shutil.rmtree(ws, ignore_errors=True)
    shutil.copytree(plan.root / "base", ws)
    before, conns, sigs = host_files(plan), listener.connections, listener.signals
    row = {"layer": layer, "filesystem": sandbox.layers(sandbox.Policy(isolation=isolation))["filesystem"]}
    here = os.getcwd()
    os.chdir(plan.root / "cwd")
    try:
        w = ("-q", "-w", str(ws), "-c", conf)
        log = cli("validate", *w) + cli("dedupe", *w) + cli("review", "sample", *w)
        from sftbuild.store import Store

        store = Store(ws)
        ids = [r["record_id"] for r in store.review_rows() if r["verdict"] is None]
        store.close()
        for rid in ids:
            cli("review", "verdict", rid, "accept", "--reviewer", "hostile", *w)
        log += cli("export", *w)
        status = cli("status", "--dropped", "validate", *w)
    finally:
        os.chdir(here)
        os.environ.pop(sandbox.WITHOUT_ENV, None)
        sandbox._probe.cache_clear()
    exported = [p.read_bytes() for p in (ws / "export").rglob("*") if p.is_file()] if (ws / "export").is_dir() else []
    rows = [ln for p in (ws / "export").rglob("*.jsonl") for ln in p.read_bytes().splitlines()] \
        if (ws / "export").is_dir() else []
    store_bytes = b"".join(p.read_bytes() for p in ws.iterdir() if p.is_file() and p.name.startswith("sftbuild.db"))
    canary, marks = plan.canary.encode(), _payload_marks(plan)
    row.update(host_files_written=sorted(host_files(plan) - before), connections=listener.connections - conns,
               signals=listener.signals - sigs, secret_in_store=store_bytes.count(canary),
               secret_in_status=status.count(plan.canary), secret_in_export=sum(d.count(canary) for d in exported),
               records_exported=len({json.loads(ln).get("id") or json.loads(ln).get("extra_info", {}).get("id")
                                     for ln in rows if ln.strip()}),
               payload_rows_exported=sum(1 for ln in rows if any(m in ln for m in marks)),
               status=status, log=log)
    return row


def _payload_marks(plan: Plan) -> list[bytes]:
    """Text only a payload holds: the planted paths, this run's mark, the listener, what payloads name
    their files (the exported rows hold the fixtures' own file names and folders, which are no payload)."""
    return [str(plan.root / "home").encode(), str(plan.root / "etc").encode(), plan.mark.encode(),
            b"-pwned", b"-spawned", b"-copied", b"127.0.0.1", b"os.kill("]
