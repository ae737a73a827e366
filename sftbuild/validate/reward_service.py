"""A local reward service: one warm validator shared by every trainer process on a node.

    sftbuild reward serve --port 8777          # once per node (GPU workers stay warm)
    SFTBUILD_REWARD_URL=http://127.0.0.1:8777  # in each trainer process's environment

With the variable set, `trl_reward`, `compute_score` and `compute_score_batch` send
their candidates here instead of starting workers of their own. Requests that arrive
while a batch runs are merged into the next batch, so several trainer ranks keep the
GPUs busy together. It listens on the loopback interface only: candidates are code.

Protocol: POST /score with {"tasks": [...], "codes": [...]} returns {"rewards": [...]},
each a `Reward` as a dict; GET /health returns {"ok": true, "served": N}.
"""
from __future__ import annotations

import dataclasses
import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 64 << 20  # bytes in one request


class Batcher:
    """Merges concurrent requests: one thread scores whatever is pending, as one batch."""

    def __init__(self, score):
        self.score = score  # (tasks, codes) -> list[Reward]
        self.cv = threading.Condition()
        self.pending: list[dict] = []
        self.served = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def submit(self, tasks, codes) -> list:
        job = {"tasks": tasks, "codes": codes, "done": threading.Event(), "out": None}
        with self.cv:
            self.pending.append(job)
            self.cv.notify()
        job["done"].wait()
        if isinstance(job["out"], Exception):
            raise job["out"]
        return job["out"]

    def _loop(self):
        while True:
            with self.cv:
                while not self.pending:
                    self.cv.wait()
                jobs, self.pending = self.pending, []
            tasks = [t for j in jobs for t in j["tasks"]]
            codes = [c for j in jobs for c in j["codes"]]
            try:
                out = self.score(tasks, codes)
            except Exception as e:  # every waiting request hears of it; the service goes on
                out = e
            i = 0
            for j in jobs:
                n = len(j["tasks"])
                j["out"] = out if isinstance(out, Exception) else out[i:i + n]
                i += n
                self.served += n
                j["done"].set()


def make_server(port: int, score) -> ThreadingHTTPServer:
    """The service on 127.0.0.1:port (0 picks a free port); `score(tasks, codes)` returns dataclasses."""
    batcher = Batcher(score)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet: a trainer calls this every step
            pass

        def _send(self, code: int, body: dict):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                return self._send(200, {"ok": True, "served": batcher.served})
            self._send(404, {"error": "GET /health or POST /score"})

        def do_POST(self):
            if self.path != "/score":
                return self._send(404, {"error": "POST /score"})
            n = int(self.headers.get("Content-Length") or 0)
            if n <= 0 or n > MAX_BODY:
                return self._send(413, {"error": f"a request body of 1 to {MAX_BODY} bytes is needed"})
            try:
                req = json.loads(self.rfile.read(n))
                tasks, codes = req["tasks"], req["codes"]
                if not isinstance(tasks, list) or not isinstance(codes, list) or len(tasks) != len(codes):
                    raise ValueError("tasks and codes must be lists of the same length")
            except (ValueError, KeyError, TypeError) as e:
                return self._send(400, {"error": f"bad request: {e}"})
            try:
                rewards = batcher.submit(tasks, codes)
            except Exception as e:
                return self._send(500, {"error": f"{type(e).__name__}: {e}"[:2000]})
            self._send(200, {"rewards": [dataclasses.asdict(r) for r in rewards]})

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def remote_batch(url: str, tasks, codes, timeout: float = 3600) -> list[dict]:
    """Score through a running service: each reward as a dict of `Reward`'s fields."""
    body = json.dumps({"tasks": [json.loads(t) if isinstance(t, str) else t for t in tasks],
                       "codes": list(codes)}).encode()
    req = urllib.request.Request(url.rstrip("/") + "/score", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())["rewards"]
