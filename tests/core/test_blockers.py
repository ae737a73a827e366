"""`sftbuild status` counts what stops records, by cause."""
from __future__ import annotations

from sftbuild.funnel import blockers, format_funnel


def test_blockers_count_what_stops_records_by_cause():
    funnel = {"records": 9, "by_source": {}, "stages": {"validate": {"ok": 1, "waiting": {}, "dropped": {
        "closure_error": 2, "missing_header": 1, "compile_error": 1, "unbound": 4, "incorrect": 1}}},
        "bindings": {"bound": {"probed": 2}, "unbound": {"x": 9}},  # stale: validate's own count wins
        "unbound_at_validate": {
            "no binder found a binding: manifest; host_launcher: no host function launches this kernel alone": 2,
            "no binder found a binding: host_launcher: no shortlisted op matched the launcher's outputs": 1,
            "no binder found a binding: host_launcher: probing this kernel needs a GPU": 1,
            "no binder found a binding: probed: incompatible_toolchain: triton.language.math.tanh is missing": 3,
            "no binder found a binding: probed: import failed: ModuleNotFoundError: No module named 'einops'": 1}}
    assert blockers(funnel) == {"toolchain": 5, "missing_header": 1, "compile_error": 1, "incorrect": 1,
                                "no_entry_point": 2, "no_op_matched": 1, "needs_gpu_to_probe": 1, "import_failed": 1}
    assert "blockers: toolchain=5  no_entry_point=2" in format_funnel(funnel)



def test_a_function_taking_tensors_is_an_entry_point_its_probe_decides():
    from sftbuild.funnel import UNBOUND_CAUSES

    def cause(reason):
        return next((c for p, c in UNBOUND_CAUSES if p.search(reason)), "no_op_matched")

    host = "host_launcher: launcher f takes tensors (an extension function): not called as a raw launcher"
    assert cause(f"{host}; extension_function: no shortlisted op matched the extension function's outputs") \
        == "no_op_matched"
    assert cause(f"{host}; extension_function: the extension function's module did not build (compile_error)") \
        == "toolchain"
    assert cause("extension_function: no host function taking tensors launches this kernel alone") == "no_entry_point"
