"""Print the instructions of random described records, spread over record kinds, for a hand check.

    python bench/instructions_sample.py sftbuild-work 20 [SEED]

Kinds: op-bound CUDA, op-bound Triton, KernelBench pairs, Inductor kernels, unbound. Each record
prints its en:detailed and zh:brief text and the head of its code; judge whether the text states
the task the code does.
"""
from __future__ import annotations

import random
import sys
from collections import defaultdict

from sftbuild.store import Store


def kind(rec) -> str:
    b = rec.binding
    if b and b.kind in ("kernelbench", "inductor"):
        return b.kind
    return f"{rec.language}/op" if b and b.op else f"{rec.language}/unbound"


def main(ws: str, n: int, seed: int) -> None:
    store = Store(ws)
    described = store.results_for("describe")
    groups = defaultdict(list)
    for rec in store.records():
        if (described.get(rec.id) or {}).get("status") == "ok":
            groups[kind(rec)].append(rec)
    rng = random.Random(seed)
    for recs in groups.values():
        rng.shuffle(recs)
    picked = []
    while len(picked) < n and any(groups.values()):  # round robin over kinds
        for k in sorted(groups):
            if groups[k] and len(picked) < n:
                picked.append(groups[k].pop())
    for i, rec in enumerate(picked, 1):
        instr = described[rec.id]["payload"]["instructions"]
        print(f"===== {i}. {kind(rec)} {rec.name} [{rec.source}:{rec.provenance.get('path')}]")
        print(instr.get("en:detailed", ""), "\n---", instr.get("zh:brief", ""), "\n--- code")
        print("\n".join(rec.code.splitlines()[:30]), "\n")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20, int(sys.argv[3]) if len(sys.argv) > 3 else 0)
