"""One row of the yield table for a workspace: kernels harvested, bound, reaching a GPU verdict,
validated ok, and the share dropped by a static cheat rule (not a test).

    python bench/yield_row.py WORKSPACE NAME
"""
from __future__ import annotations

import collections
import sys

from sftbuild.store import Store

NO_VERDICT = ("unbound", "compile_error", "compile_timeout", "unsafe_include", "compiled_out", "harness_error",
              "resources")


def main(ws: str, name: str) -> None:
    s = Store(ws)
    recs = list(s.records())
    res = s.results_for("validate")
    kernels = lambda rs: sum(len(r.entry.get("kernels") or [r.name]) for r in rs)  # noqa: E731
    bound = [r for r in recs if r.binding]
    static = [r for r in recs if "static" in (res.get(r.id, {}).get("payload") or {})]
    # a GPU verdict: ok, or dropped by what a run on the GPU found (not before it: static, compile, unbound)
    verdict = [r for r in recs if res.get(r.id, {}).get("status") == "ok" or (
        res.get(r.id, {}).get("status") == "dropped" and res[r.id].get("reason") not in NO_VERDICT
        and r not in static)]
    ok = [r for r in recs if res.get(r.id, {}).get("status") == "ok"]
    how = collections.Counter(r.binding.how for r in bound)
    n = kernels(recs) or 1
    print(f"| {name} | {kernels(recs)} kernels ({len(recs)} records) | {kernels(bound)} bound "
          f"({', '.join(f'{h} {c}' for h, c in how.most_common())}) | {kernels(verdict)} reach a GPU verdict "
          f"({100 * kernels(verdict) / n:.0f}%) | {kernels(ok)} ok ({100 * kernels(ok) / n:.0f}%) | "
          f"{len(static)} static-cheat drops ({100 * len(static) / max(1, len(recs)):.1f}%) |")
    s.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
