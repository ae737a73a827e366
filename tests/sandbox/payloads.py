"""Hostile task functions for the fault-injection suite: each does one thing untrusted code might
try. The sandbox imports them by name (`tests.sandbox.payloads:NAME`); they run only there."""
import ctypes
import os
import pathlib
import socket
import sys
import time


def write_outside(task):
    """Write a file at a path outside the sandbox's scratch folder, with open() and with pathlib."""
    out = {}
    for how, write in (("open", lambda p: open(p, "w").write("pwned")),
                       ("pathlib", lambda p: pathlib.Path(p).write_text("pwned"))):
        try:
            write(task["target"] + "." + how)
            out[how] = "written"
        except OSError as e:
            out[how] = f"refused: {e.strerror}"
    return out


def read_host_file(task):
    try:
        return {"read": pathlib.Path(task["secret"]).read_text()}
    except OSError as e:
        return {"read": None, "why": e.strerror}


def connect(task):
    try:
        socket.create_connection(("127.0.0.1", task["port"]), timeout=2).close()
        return {"connected": True}
    except OSError as e:
        return {"connected": False, "why": str(e)}


def process_flood(task):
    """Start processes until something stops it (capped, so a failed sandbox cannot take the host down)."""
    started = 0
    try:
        for _ in range(task.get("cap", 2000)):
            if os.fork() == 0:
                time.sleep(120)
                os._exit(0)
            started += 1
    except OSError as e:
        time.sleep(120)  # the limit hit: wait for the timeout like a bomb that keeps its children
        return {"started": started, "why": str(e)}
    time.sleep(120)
    return {"started": started}


def environment(task):
    return {"env": dict(os.environ)}


def segfault(task):
    ctypes.string_at(0)


def abort(task):
    os.abort()


def hard_exit(task):
    os._exit(3)


def flood_stdout(task):
    line = "x" * 1023 + "\n"
    for _ in range(task.get("kb", 20000)):
        sys.stdout.write(line)
    sys.stdout.flush()
    return {"done": True}


def import_reference(task):
    """Import a reference file the way the Python runner imports references and candidates."""
    from sftbuild.trial.pyrun import load_module

    import tempfile

    code = pathlib.Path(task["tree"], "reference.py").read_text()
    load_module(code, "reference", tempfile.mkdtemp())
    return {"imported": True}


def compile_like(task):
    """A compiler that starts children and hangs: what a timed-out nvcc leaves behind."""
    from sftbuild.trial import nvcc_parallel

    return nvcc_parallel.run_command(["bash", "-c", f"sleep {task['mark']} & sleep {task['mark']}; wait"],
                                     task["cwd"], 120)


def sleeper(mark):
    """A GPU worker's task that starts a child and hangs."""
    import subprocess

    subprocess.Popen(["sleep", str(mark)])
    time.sleep(120)
    return {"slept": True}


def nested_gpu(x):
    """In a GPU worker: a one-shot sandbox with the GPU (as compute-sanitizer's runs get) launches a kernel."""
    from sftbuild import sandbox

    res = sandbox.run_isolated("tests.tasks:gpu_identity", x, 240, gpu=True)
    return res if isinstance(res, dict) else {"failure": f"{res.kind}: {res.detail}"}


def scratch_files(x):
    """Writes a temporary file where HOME and TMPDIR point, as compute-sanitizer and compilers do."""
    import os
    import tempfile

    with tempfile.NamedTemporaryFile(dir=os.environ["TMPDIR"]) as f:
        f.write(b"x")
    return {"tmpdir": os.environ["TMPDIR"], "home_is_dir": os.path.isdir(os.environ["HOME"])}


def write_in(task):
    """Writes a file in a folder the call made writable, and says what the scratch folder held before."""
    import os

    held = sorted(os.listdir(os.environ["TMPDIR"]))
    pathlib.Path(task["cache_dir"], f"{os.getpid()}.out").write_text("x")
    pathlib.Path(os.environ["TMPDIR"], "left.txt").write_text("x")
    return {"held": held}


def signal_pid(task):
    try:
        os.kill(task["pid"], task["sig"])
        return {"signalled": True}
    except OSError as e:
        return {"signalled": False, "why": e.strerror}


def nested(task):
    """A sandbox started inside a sandboxed process (as a GPU worker starts compute-sanitizer's)."""
    from sftbuild import sandbox

    res = sandbox.run_isolated("tests.sandbox.payloads:scratch_files", None, 60)
    return res if isinstance(res, dict) else {"failure": f"{res.kind}: {res.detail}"}
