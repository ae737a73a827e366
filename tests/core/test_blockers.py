"""`sftbuild status` counts what stops records, by cause."""
from __future__ import annotations

from sftbuild.funnel import blockers, format_funnel
from sftbuild.bind.binders import CAUSES, furthest


def test_blockers_count_what_stops_records_by_cause():
    funnel = {"records": 9, "by_source": {}, "stages": {"validate": {"ok": 1, "waiting": {}, "dropped": {
        "closure_error": 2, "missing_header": 1, "compile_error": 1, "unbound": 9, "incorrect": 1}}},
        "bindings": {"bound": {"probed": 2}, "unbound": {"x": 9}},
        # the cause codes the binders reported, whatever their sentences say
        "unbound_causes": {"no_entry_point": 2, "no_op_matched": 1, "needs_gpu_to_probe": 1, "toolchain": 3,
                           "import_failed": 1, "": 1}}
    assert blockers(funnel) == {"toolchain": 5, "missing_header": 1, "compile_error": 1, "incorrect": 1,
                                "no_entry_point": 2, "no_op_matched": 1, "needs_gpu_to_probe": 1, "import_failed": 1,
                                "unclassified": 1}
    assert "blockers: toolchain=5  no_entry_point=2" in format_funnel(funnel)


def test_the_binder_that_got_furthest_names_the_cause():
    # a host launcher's probe whose build failed beats an extension function with no entry point
    assert furthest(["no_entry_point", "compile_error", "no_op_matched"]) == "compile_error"
    assert furthest(["no_entry_point", "needs_gpu_to_probe"]) == "needs_gpu_to_probe"
    assert furthest([]) == "no_op_matched" and set(CAUSES) >= {"toolchain", "missing_header", "import_failed"}


def test_running_binders_say_whether_they_had_an_entry_point():
    from sftbuild.bind.binders.extension import ExtensionFunction
    from sftbuild.bind.binders.launched import HostLauncher
    from sftbuild.record import Record

    bare = Record(language="cuda", code="__global__ void k(float* y) {}", source="t",
                  entry={"kernels": ["k"], "params": ["float* y"]})
    assert HostLauncher().cause(bare) == ExtensionFunction().cause(bare) == "no_entry_point"
