"""The review page in a real headless browser: Debian's chromium driven by Playwright, keyboard only.

Skipped, with the reason, when Playwright or /usr/bin/chromium is missing (CI installs both).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from sftbuild.store import Store
from tests.review import workspace
from tests.review.test_flow import invoke, sampled

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no chromium installed "
                                "(apt-get install -y chromium)")


@pytest.fixture
def server(tmp_path):
    ws = str(tmp_path / "ws")
    workspace.make(ws, 12)
    assert invoke("review", "sample", "-q", "-w", ws).exit_code == 0
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-m", "sftbuild.cli", "review", "serve", "--port", "0",
                             "--reviewer", "carol", "-q", "-w", ws], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line.startswith("review page: http://127.0.0.1:"), line
        yield ws, line.split()[2]
    finally:
        proc.terminate()
        proc.wait(10)


def test_five_reviews_by_keyboard_land_in_the_store(server):
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    ws, url = server
    order = [row["record_id"] for row in sampled(ws)]
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(url)
        page.wait_for_selector("body[data-state=item]")
        assert page.inner_text("#progress") == "0 / 12 reviewed"
        assert page.inner_text("#reftitle").startswith("op ")  # the reference beside the code
        assert "trials: 8/8 passed" in page.inner_text("#evidence")
        assert "Write the CUDA kernel k for" in page.inner_text("#instruction")
        assert page.get_attribute("body", "data-item") == order[0]
        # accept, accept, reject (wrong_description), skip, accept, back, back then reject (other) ... 
        for key, done in (("a", 1), ("a", 2), ("r d", 3), ("s", 3), ("a", 4)):
            for k in key.split():
                page.keyboard.press(k)
            page.wait_for_function(f"document.getElementById('progress').textContent.startsWith('{done} /')")
        page.keyboard.press("b")
        page.wait_for_function(f"document.body.dataset.item === '{order[4]}'")
        page.keyboard.press("b")
        page.wait_for_function(f"document.body.dataset.item === '{order[3]}'")
        assert page.inner_text("#state") == "open"  # the skipped one
        page.keyboard.press("r")
        assert page.is_visible("#reasons")
        page.keyboard.press("o")
        page.wait_for_function("document.getElementById('progress').textContent.startsWith('5 /')")
        browser.close()
    rows = {row["record_id"]: row for row in sampled(ws)}
    got = [(rows[i]["verdict"], rows[i]["reason"], rows[i]["reviewer"]) for i in order[:5]]
    assert got == [("accept", "", "carol"), ("accept", "", "carol"), ("reject", "wrong_description", "carol"),
                   ("reject", "other", "carol"), ("accept", "", "carol")]
    s = Store(ws)
    assert {v["via"] for v in s.review_log()} == {"web"}
    s.close()


def test_writes_need_the_session_token(server):
    ws, url = server
    rid = sampled(ws)[0]["record_id"]
    body = json.dumps({"record_id": rid, "verdict": "accept", "reviewer": "mallory"}).encode()
    for headers in ({"Content-Type": "application/json"},
                    {"Content-Type": "application/json", "X-Review-Token": "guess"},
                    {"Content-Type": "text/plain", "X-Review-Token": "guess"}):
        req = urllib.request.Request(url + "api/verdict", data=body, headers=headers, method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 403
    page = urllib.request.urlopen(url, timeout=10).read().decode()
    token = page.split('name="review-token" content="')[1].split('"')[0]
    req = urllib.request.Request(url + "api/verdict", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "X-Review-Token": token})
    assert json.loads(urllib.request.urlopen(req, timeout=10).read())["ok"] is True
    # a page served under another host name (DNS rebinding) is refused
    req = urllib.request.Request(url, headers={"Host": "evil.example:80"})
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(req, timeout=10)
    assert sampled(ws)[0]["verdict"] == "accept"
