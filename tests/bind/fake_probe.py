"""A probing task for the bind tests: `relu` in the code binds, anything else stays unbound.

It runs in the sandbox process the bind stage starts (never in the test's own process), so
it reports what it saw of its environment in the evidence."""
import os


def probe(task: dict) -> dict:
    evidence = {"shapes": [[7], [64], [4097]], "dtypes": ["float32", "float16"], "worst_error": 0.0,
                "interpreter": os.environ.get("TRITON_INTERPRET") == "1", "pid": os.getpid()}
    if "tl.where(x > 0" in task["code"]:
        return {"binding": {"op": "relu", "call": {"entry": task["entry"], "args": ["x"], "output": 0}},
                "evidence": {**evidence, "why": "relu agreed on 3 shapes and 2 dtypes"}}
    return {"unbound": "no candidate agreed on 3 shapes and 2 dtypes",
            "evidence": {**evidence, "worst_error": 1.5, "candidates_rejected": ["relu", "abs"]}}
