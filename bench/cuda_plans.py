"""How many CUDA records of a source folder each probing binder would probe (a plan), on the CPU: the
records harvest's extraction makes of each file (kernels one launcher runs together are one record),
their launchers (raw, or extension functions taking tensors, and how many a module exposes), the
extension functions of other files that call a raw launcher (as harvest attaches them), and the plans
of host_launcher and extension_function, with the commonest reasons for no plan.

    python bench/cuda_plans.py SOURCE_DIR
"""
from __future__ import annotations

import collections
import sys
from pathlib import Path

from sftbuild.harvest.cuda_extract import CALLER_EXT, calls_fit, extract_kernels
from sftbuild.harvest.worker import find_callers
from sftbuild.bind.binders.extension import ExtensionFunction
from sftbuild.trial.launchers import takes_tensors
from sftbuild.bind.binders.launched import HostLauncher
from sftbuild.record import Record

SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")


def main(root: str) -> None:
    n, why = collections.Counter(), collections.Counter()
    binders = (HostLauncher(), ExtensionFunction())
    records, launching, files = [], set(), []
    for f in sorted(Path(root).rglob("*")):
        if f.suffix not in SUFFIXES or not f.is_file():
            continue
        rel = str(f.relative_to(root))
        if rel.endswith(CALLER_EXT):
            files.append((rel, str(f)))
        seen = set()  # harvest makes one record of kernels whose code is the same (one launcher runs them)
        for k in extract_kernels(f.read_bytes())[0]:
            n["kernels"] += 1
            launching |= {s["function"] for s in k.launch_sites} | ({k.launcher["name"]} if k.launcher else set())
            if k.code in seen:
                continue
            seen.add(k.code)
            entry = {"kernels": [k.name], "params": k.params, "launch_sites": k.launch_sites,
                     "includes": k.includes, "include_sets": [], "template": k.template,
                     **({"launcher": k.launcher} if k.launcher else {})}
            records.append(Record(language="cuda", code=k.code, source="bench", entry=entry, provenance={"path": rel}))
    raw = sorted({r.entry["launcher"]["name"] for r in records
                  if r.entry.get("launcher") and not takes_tensors(r.entry["launcher"])})
    callers = find_callers((files, raw, sorted(launching))) if raw else {}
    for rec in records:
        launcher = rec.entry.get("launcher")
        n["records"] += 1
        if launcher:
            tensors = takes_tensors(launcher)
            n["extension functions" if tensors else "raw launchers"] += 1
            n["exposed by a module"] += bool(tensors and launcher.get("exposed"))
            fns = [f for f in callers.get(launcher["name"], ()) if not tensors and f["path"] != rec.provenance["path"]
                   and calls_fit(f["code"], launcher)]
            if fns:
                rec.entry["extensions"] = fns
                n["called by another file's extension function"] += 1
        planned = False
        for b in binders:
            if b.plan(rec):
                n[f"{b.name} plans"] += 1
                planned = True
            else:
                why[f"{b.name}: {b.why_not(rec)[:90]}"] += 1
        n["records with a plan"] += planned
    print(", ".join(f"{k} {v}" for k, v in n.items()))
    for reason, count in why.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 8):
        print(f"  {count:4d}  {reason}")


if __name__ == "__main__":
    main(sys.argv[1])
