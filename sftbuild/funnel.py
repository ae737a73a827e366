"""The funnel as text: records per stage, status and drop reason, overall and per source."""
from __future__ import annotations


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
