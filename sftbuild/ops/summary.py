"""What the op library holds, as text lines for `sftbuild ops`: counts per family, the op_db
ops registered and skipped (by reason, or each with `skipped`), or one op in full."""
from __future__ import annotations

from collections import Counter


def report(name: str | None = None, opdb: bool = False, skipped: bool = False) -> list[str]:
    from sftbuild import ops

    if name:
        op = ops.get(name)
        return [f"{op.name}  ({op.family}, launch: {op.launch})", f"  en: {op.semantics['en']}",
                f"  zh: {op.semantics['zh']}", f"  inputs: {'; '.join(op.io['inputs'])}",
                f"  outputs: {'; '.join(op.io['outputs'])}", f"  dtypes: {', '.join(op.dtypes)}",
                f"  layouts: {', '.join(op.layouts)}", f"  shapes: {len(op.shape_pool)} in the pool, e.g. "
                f"{list(op.shape_pool[0]) if op.shape_pool else []}", f"  params: {op.params or '{}'}"]
    hand = {n: op for n, op in ops.all_ops().items()}
    fams = Counter(op.family for op in hand.values())
    lines = [f"hand-written ops: {len(hand)}"] + [f"  {fam:<12} {n}" for fam, n in sorted(fams.items())]
    if not (opdb or skipped):
        return lines + ["op_db ops (opdb.*): not loaded (add --opdb to load and count them)"]
    from sftbuild.ops import opdb as db

    c = db.counts()
    if db.UNAVAILABLE:
        return lines + [f"op_db ops (opdb.*): none, {db.UNAVAILABLE[0]}"]
    lines += [f"op_db ops (opdb.*): {c['registered']} registered, {c['skipped']} entries skipped"]
    lines += [f"  {fam:<12} {n}" for fam, n in sorted(Counter(op.family for op in db.OPS.values()).items())]
    lines += ["skipped, by reason:"] + [f"  {n:>4}  {why}" for why, n in c["skipped_by_reason"].items()]
    if skipped:
        lines += ["skipped entries:"] + [f"  {n}: {why}" for n, why in sorted(db.SKIPPED.items())]
    return lines
