"""The warm reward: one executor per process across calls, and a local service trainer ranks share."""
import importlib
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

R = importlib.import_module("sftbuild.validate.reward")  # the package exports the function `reward` too
S = importlib.import_module("sftbuild.validate.reward_service")


GATE = threading.Event()  # the first batch waits here while the test sends more requests


@pytest.fixture
def service():
    calls = []
    GATE.set()

    def score(tasks, codes):
        GATE.wait(10)
        calls.append(len(codes))
        return [R.Reward(float(len(c)), None, "ok", detail={"task": t["task_id"]}) for t, c in zip(tasks, codes)]

    server = S.make_server(0, score)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", calls
    server.shutdown()
    server.server_close()


def test_remote_scores_come_back_in_order_as_rewards(service):
    url, _ = service
    out = [R.Reward(**r) for r in S.remote_batch(url, [{"task_id": i} for i in range(5)], ["a" * i for i in range(5)])]
    assert [r.score for r in out] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [r.detail["task"] for r in out] == list(range(5))
    with urllib.request.urlopen(url + "/health") as resp:
        assert json.loads(resp.read()) == {"ok": True, "served": 5}


def test_concurrent_trainer_ranks_are_merged_into_batches(service):
    url, calls = service
    results = {}

    def rank(i):
        results[i] = [r["score"] for r in S.remote_batch(url, [{"task_id": i}] * 8, ["x" * i] * 8)]

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(8)]
    GATE.clear()  # the first request's batch waits until every rank has sent its request
    for t in threads:
        t.start()
    time.sleep(0.5)
    GATE.set()
    for t in threads:
        t.join()
    assert results == {i: [float(i)] * 8 for i in range(8)}  # each rank gets its own scores back
    assert sum(calls) == 64 and len(calls) < 8  # some requests shared a batch


def test_bad_requests_get_a_sentence_not_a_crash(service):
    url, _ = service
    for body in (b"not json", json.dumps({"tasks": [1]}).encode(), json.dumps({"tasks": [1], "codes": []}).encode()):
        req = urllib.request.Request(url + "/score", data=body)
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req)
        assert e.value.code == 400 and "bad request" in json.loads(e.value.read())["error"]
    assert S.remote_batch(url, [{"task_id": 1}], ["ok"])[0]["score"] == 2.0  # still serving


def test_reward_calls_go_to_the_service_when_one_is_named(service, monkeypatch):
    url, _ = service
    monkeypatch.setenv("SFTBUILD_REWARD_URL", url)
    task = json.dumps({"task_id": 7, "language": "triton"})
    assert R.trl_reward(prompts=["p"], completions=["```python\nabc\n```"], task=[task]) == [4.0]  # "abc\n"
    assert R.compute_score_batch(["s"], ["```python\nab\n```"], [task]) == [3.0]


def test_the_process_keeps_one_warm_executor(monkeypatch):
    monkeypatch.delenv("SFTBUILD_REWARD_URL", raising=False)
    try:
        R.reward_batch([{"task_id": 1, "language": "triton"}], [""])
        first = R.warm_executor()
        assert R.reward_batch([{"task_id": 1, "language": "triton"}], [""])[0].reason == "no_code"
        assert R.warm_executor() is first
    finally:
        R.close_warm()
