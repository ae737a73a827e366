"""Module-level task functions for executor tests (workers import them by name)."""
import os
import time
import uuid

# which worker process answered: pids repeat across workers in their own pid namespaces (the sandbox),
# and a renewing worker's processes are forks of one that imported this module, so its id is read anew
_BOOT = uuid.uuid4().hex


def worker() -> str:
    return f"{_BOOT}:{os.getpid()}"


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
    return {"pid": worker(), "x": x}


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


def pid(x):
    """The worker process that ran this item (misbehaves like `misbehave` on "crash")."""
    if x == "crash":
        os._exit(3)
    return worker()


def pid2(x):
    return worker()


def interpreter_worker(x):
    """The worker that ran this item, and whether Triton's interpreter was switched on in it."""
    return {"pid": worker(), "interpret": os.environ.get("TRITON_INTERPRET")}


def gpu_identity(x):
    """Which GPU a worker sees, after a real kernel launch on it."""
    import torch

    t = torch.full((1 << 20,), float(x), device="cuda")
    time.sleep(0.5)
    return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "sum": float(t.sum()),
            "name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count()}


def bounded_steps(x):
    """Steps bounded from inside the worker (executor.report_deadline): one hangs past its bound, the
    other item's steps each end in time though the item as a whole takes longer than any bound."""
    from sftbuild.executor import report_deadline

    if x == "hang":
        report_deadline(0.5, "a step ran past its bound")
        time.sleep(3600)
    for _ in range(3):
        report_deadline(1.0, "a step ran past its bound")
        time.sleep(0.2)
        report_deadline(None)
    time.sleep(1.5)  # outside any step: only the item's own timeout applies
    return {"x": x, "pid": os.getpid()}


VERDICT: dict = {}  # what trial_verdict answers


def trial_verdict(task):
    """Stands in for a trial runner: the verdict a test set in VERDICT."""
    return dict(VERDICT)


def hold_timing_lock(x):
    """Hold the GPU timing lock for a moment; when it was held."""
    from sftbuild.trial import timing

    with timing.gpu_alone():
        start = time.monotonic()
        time.sleep(0.3)
        return start, time.monotonic()


def say_and_exit(x):
    """Writes a line to stdout; on "exit" also what a check macro prints, then exits with code 1
    (as llm.c's cudaCheck does)."""
    os.write(1, f"{x}: about to run\n".encode())
    if x == "exit":
        os.write(1, b"[CUDA ERROR] at file kernel.cuh:12:\ninvalid argument\n")
        os._exit(1)
    return {"x": x}


TAINT: list = []


def taint(x):
    """Leaves a mark in its process's state; "dirty" asks for a fresh process, as a candidate that
    changed its process makes its result do; "crash" ends its process."""
    if x == "crash":
        os._exit(3)
    TAINT.append(x)
    tmp = os.environ["TMPDIR"]
    found = sorted(os.listdir(tmp))
    open(os.path.join(tmp, f"left-by-{x}"), "w").close()
    return {"pid": worker(), "seen": list(TAINT), "files": found, **({"recycle": True} if x == "dirty" else {})}
