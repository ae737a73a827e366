"""The funnel as text: counts per stage and drop reason, overall and per source.

Printed by `status` and `run`, and written into the dataset card. `blockers` counts what stops the
records that did not pass, by cause, so a user sees what blocks yield in their own repository.
"""
from __future__ import annotations

import re
import time

# validate's drop reasons for a compile that failed, by whose failure it was
COMPILE_CAUSES = {"toolchain": "toolchain", "closure_error": "toolchain", "missing_header": "missing_header",
                  "compile_error": "compile_error", "compile_timeout": "compile_error",
                  "unsafe_include": "compile_error"}
# an unbound record's reason (each binder's phrase) -> cause; the first that matches wins
UNBOUND_CAUSES = [
    (re.compile(r"needs a GPU"), "needs_gpu_to_probe"),
    (re.compile(r"did not compile|did not build|did not load|incompatible_toolchain"), "toolchain"),
    (re.compile(r"import failed"), "import_failed"),  # a dependency or the package itself, not the toolchain
    # a function taking tensors is the extension_function binder's entry point: what its probe said decides
    (re.compile(r"no (host )?function (taking tensors |in the record )?launches|no kernel entry|"
                r"takes a parameter with no role|is a template|writes no pointer|returns no tensor|computes with|"
                r"launched from another module"), "no_entry_point"),
]


def format_runs(runs: dict) -> list[str]:
    """A line per stage run that is running now or ended before finishing (Store.runs)."""
    def when(t):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t or 0))

    lines = []
    holder = runs.get("holder")
    if holder:
        stages = ", ".join(r["stage"] for r in runs["running"]) or "starting"
        lines.append(f"running: `sftbuild {holder.get('command', '?')}` (pid {holder.get('pid', '?')}, since "
                     f"{when(holder.get('since'))}), now in {stages}")
    for r in runs["interrupted"]:
        lines.append(f"interrupted: {r['stage']} run {r['run_id']} (pid {r['pid']}, started {when(r['started'])}) "
                     f"did not finish{': ' + r['why'] if r['why'] else ''}; rerunning the stage resumes it")
    return lines


def format_funnel(funnel: dict) -> str:
    lines = [f"records: {funnel['records']}"]
    if funnel.get("harvest_skips"):
        lines.append("  harvest skipped: " + ", ".join(f"{k}={v}" for k, v in sorted(funnel["harvest_skips"].items())))
    for stage, c in funnel["stages"].items():
        parts = [f"ok={c['ok']}"]
        for status in ("waiting", "dropped"):
            for reason, n in sorted(c[status].items()):
                parts.append(f"{status}:{reason}={n}")
        lines.append(f"  {stage:<9} " + "  ".join(parts))
        if stage == "bind" and funnel.get("bindings"):
            lines.append("            " + _bindings(funnel["bindings"]))
    stops = blockers(funnel)
    if stops:
        lines.append("blockers: " + "  ".join(f"{k}={v}" for k, v in sorted(stops.items(), key=lambda kv: -kv[1])))
    if len(funnel["by_source"]) > 0:
        lines.append("by source:")
        for src, s in sorted(funnel["by_source"].items()):
            lines.append(f"  {src}: {s['records']} records")
            for stage, c in s["stages"].items():
                parts = [f"ok={c['ok']}"]
                for status in ("waiting", "dropped"):
                    parts += [f"{status}:{r}={n}" for r, n in sorted(c[status].items())]
                lines.append(f"    {stage:<9} " + "  ".join(parts))
    return "\n".join(lines)


def _bindings(counts: dict) -> str:
    """bound by how, and how many are unbound (their reasons: `sftbuild bindings --how unbound`)."""
    parts = [f"{how}={n}" for how, n in sorted(counts.get("bound", {}).items())]
    unbound = sum(counts.get("unbound", {}).values())
    return "bound: " + (" ".join(parts) or "none") + f"  unbound={unbound}"



def blockers(funnel: dict) -> dict[str, int]:
    """What stops records, by cause: a failed compile or an import the installed Triton or torch cannot
    satisfy (toolchain, missing_header, compile_error), another failed import (import_failed), no
    entry point a binder can call (no_entry_point), a probe that found no op (no_op_matched), probing
    that waits for a GPU, and every other validate drop under its own reason."""
    out: dict[str, int] = {}
    validate = funnel["stages"].get("validate") or {"dropped": {}}
    for reason, n in validate["dropped"].items():
        if reason == "unbound":
            continue  # counted by the binders' reasons below
        cause = COMPILE_CAUSES.get(reason, reason)
        out[cause] = out.get(cause, 0) + n
    unbound = funnel.get("unbound_at_validate")
    if unbound is None:  # validate has not run: every unbound record is stopped there
        unbound = (funnel.get("bindings") or {}).get("unbound", {})
    for reason, n in unbound.items():
        cause = next((c for pattern, c in UNBOUND_CAUSES if pattern.search(reason or "")), "no_op_matched")
        out[cause] = out.get(cause, 0) + n
    return out
