"""How many CUDA records of a source folder each probing binder would probe (a plan), on the CPU: the
records harvest's extraction makes of each file, their launchers (raw, or extension functions taking
tensors, and how many a module exposes), and the plans of host_launcher and extension_function, with
the commonest reasons for no plan.

    python bench/cuda_plans.py SOURCE_DIR
"""
from __future__ import annotations

import collections
import sys
from pathlib import Path

from sftbuild.harvest.cuda_extract import extract_kernels
from sftbuild.ops.binders.extension import ExtensionFunction, takes_tensors
from sftbuild.ops.binders.launched import HostLauncher
from sftbuild.record import Record

SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")


def main(root: str) -> None:
    n, why = collections.Counter(), collections.Counter()
    binders = (HostLauncher(), ExtensionFunction())
    for f in sorted(Path(root).rglob("*")):
        if f.suffix not in SUFFIXES or not f.is_file():
            continue
        seen = set()  # harvest makes one record of kernels whose code is the same (one launcher runs them)
        for k in extract_kernels(f.read_bytes())[0]:
            n["kernels"] += 1
            if k.code in seen:
                continue
            seen.add(k.code)
            entry = {"kernels": [k.name], "params": k.params, "launch_sites": k.launch_sites,
                     "includes": k.includes, "include_sets": [], "template": k.template,
                     **({"launcher": k.launcher} if k.launcher else {})}
            rec = Record(language="cuda", code=k.code, source="bench", entry=entry,
                         provenance={"path": str(f.relative_to(root))})
            n["records"] += 1
            if k.launcher:
                tensors = takes_tensors(k.launcher)
                n["extension functions" if tensors else "raw launchers"] += 1
                n["exposed by a module"] += bool(tensors and k.launcher.get("exposed"))
            for b in binders:
                if b.plan(rec):
                    n[f"{b.name} plans"] += 1
                else:
                    why[f"{b.name}: {b.why_not(rec)[:90]}"] += 1
    print(", ".join(f"{k} {v}" for k, v in n.items()))
    for reason, count in why.most_common(8):
        print(f"  {count:4d}  {reason}")


if __name__ == "__main__":
    main(sys.argv[1])
