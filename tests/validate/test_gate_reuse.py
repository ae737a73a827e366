"""The Triton gate's result is reused by content: a module that passed is not compiled again for a copy
that differs only in its comments; a failure, whose log quotes the code, is kept per exact text."""
from sftbuild.trial import compile as C

MODULE = "import triton  # the gate reads this\n\n@triton.jit\ndef k(x):  # a kernel\n    s = '# not a comment'\n"


def test_comments_are_blanked_line_for_line():
    bare = C.uncommented(MODULE)
    assert bare.count("\n") == MODULE.count("\n") and "# not a comment" in bare
    assert "the gate reads" not in bare and "a kernel" not in bare
    assert C.uncommented("def f(:\n  (") == "def f(:\n  ("  # does not tokenize: taken as it is


def test_a_passed_module_is_reused_for_other_comments_and_a_failure_is_not(tmp_path):
    runs = []

    def gate(ok):
        def run(task):
            runs.append(task.code)
            return {"ok": ok, "resources": {"k": {"registers": 8}}, "seconds": 0.1, "keep": True}
        return run

    def task(code):
        return {"code": code, "arch": "sm_90", "cache_dir": str(tmp_path)}

    first = C.cached_gate(task(MODULE), gate(True))
    again = C.cached_gate(task(MODULE + "# completion 2\n"), gate(True))
    assert len(runs) == 1 and again["cached"] and again["resources"] == first["resources"] and again["ok"]
    C.cached_gate(task("bad" + MODULE), gate(False))
    C.cached_gate(task("bad" + MODULE + "# completion 3\n"), gate(False))
    assert len(runs) == 3
