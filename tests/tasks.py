"""Module-level task functions for executor tests (workers import them by name)."""
import os
import time
import uuid

# which worker process answered: pids repeat across workers in their own pid namespaces (the sandbox)
WORKER = uuid.uuid4().hex


def square(x):
    return x * x


def misbehave(x):
    if x == "hang":
        time.sleep(3600)
    if x == "crash":
        os._exit(3)
    if x == "raise":
        raise ValueError("bad input")
    if x == "fault":
        return {"status": "dropped", "recycle": True}
    return {"pid": WORKER, "x": x}


MISBEHAVE = ["a", "a2", "hang", "b", "crash", "c", "fault", "d", "raise", "e"]


def check_misbehave(out: dict) -> None:
    """What an executor must make of MISBEHAVE: one verdict per bad item, and a fresh worker after
    each failure, while the good items all come back."""
    assert out["hang"].kind == "timeout"
    assert out["crash"].kind == "crash"
    assert out["raise"].kind == "error"
    assert out["fault"]["recycle"] is True
    for x in "abcde":
        assert out[x]["x"] == x
    assert out["a2"]["pid"] == out["a"]["pid"]  # one long-lived worker ...
    assert len({out[x]["pid"] for x in "abcd"}) == 4  # ... replaced after each failure


def gpu_identity(x):
    """Which GPU a worker sees, after a real kernel launch on it."""
    import torch

    t = torch.full((1 << 20,), float(x), device="cuda")
    time.sleep(0.5)
    return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "sum": float(t.sum()),
            "name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count()}
