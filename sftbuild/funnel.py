"""The funnel as text: counts per stage and drop reason, overall and per source.

Printed by `status` and `run`, and written into the dataset card. `blockers` counts what stops the
records that did not pass, by cause, so a user sees what blocks yield in their own repository.
"""
from __future__ import annotations

import time

from sftbuild.binding import COMPILE_CAUSES


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
    """What stops records, by cause: validate's failed compiles (toolchain, missing_header,
    compile_error), the cause code each unbound record's binders reported (`binding.CAUSES`: their
    probes' builds and imports, no entry point, no op matched, probing that waits for a GPU), and
    every other validate drop under its own reason."""
    out: dict[str, int] = {}
    validate = funnel["stages"].get("validate") or {"dropped": {}}
    for reason, n in validate["dropped"].items():
        if reason == "unbound":
            continue  # counted by the binders' reasons below
        cause = COMPILE_CAUSES.get(reason, reason)
        out[cause] = out.get(cause, 0) + n
    for cause, n in (funnel.get("unbound_causes") or {}).items():  # the codes the binders reported
        cause = cause or "unclassified"  # bound before binders reported causes: rebinding classifies it
        out[cause] = out.get(cause, 0) + n
    return out
