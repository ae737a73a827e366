"""One row of the CUDA yield table for a workspace: records, compiled, bound, validated ok, and what
stops the rest (`status`'s blockers: each validate drop reason, and each unbound record's cause code).

    python bench/cuda_yield_row.py WORKSPACE NAME [COMPILE_REPORT]

The compile column counts the records whose validate verdict is past the compile gate; given
bench/cuda_compile.py's report (every record through the gate, bound or not), it reads that instead,
since validate compiles bound records only.
"""
from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

from sftbuild.funnel import blockers
from sftbuild.store import Store

# validate's reasons for a record that did not compile (the kernel's fault or the toolchain's)
NOT_COMPILED = ("compile_error", "compile_timeout", "unsafe_include", "compiled_out", "missing_header", "toolchain",
                "closure_error")


def main(ws: str, name: str, report: str = "") -> None:
    s = Store(ws)
    recs = list(s.records())
    res = s.results_for("validate")
    gate = re.search(r"records (\d+), compile (\d+)", Path(report).read_text()) if report and Path(report).exists() else None
    compiled = int(gate.group(2)) if gate else \
        sum(r.id in res and res[r.id].get("reason") not in NOT_COMPILED + ("unbound",) for r in recs)
    bound = [r for r in recs if r.binding]
    ok = [r for r in recs if res.get(r.id, {}).get("status") == "ok"]
    how = collections.Counter(r.binding.by for r in bound)
    stops = collections.Counter(blockers(s.funnel()))  # by cause: compile failures, and unbound records by code
    n = max(1, len(recs))
    print(f"| {name} | {len(recs)} | {compiled} ({100 * compiled / n:.0f}%) | {len(bound)} "
          f"({100 * len(bound) / n:.0f}%; {', '.join(f'{h} {c}' for h, c in how.most_common())}) | {len(ok)} "
          f"({100 * len(ok) / n:.0f}%) | {', '.join(f'{k} {c}' for k, c in stops.most_common())} |")
    s.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
