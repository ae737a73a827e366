"""Module-level task functions for executor tests (workers import them by name)."""
import os
import time


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
    return {"pid": os.getpid(), "x": x}


def gpu_identity(x):
    """Which GPU a worker sees, after a real kernel launch on it."""
    import torch

    t = torch.full((1 << 20,), float(x), device="cuda")
    time.sleep(0.5)
    return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "sum": float(t.sum()),
            "name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count()}
