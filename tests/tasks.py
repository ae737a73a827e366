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
