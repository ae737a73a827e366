"""The trials a candidate ran, and its worst errors: the trial loop's record (sftbuild.trial.loop).

Each trial adds a row (what was tried, whether it passed, its errors); the first failed
trial decides the verdict, and the payload carries every row tried up to it.
"""
from __future__ import annotations

import dataclasses

ERRORS = ("max_abs", "max_rel", "norm_rel")


def fold_worst(worst: dict, stats: dict) -> None:
    """Raise each error in `worst` to the one `stats` reports, where it reports one."""
    for k in ERRORS:
        if stats.get(k) is not None:
            worst[k] = max(worst.get(k, 0.0), stats[k])


@dataclasses.dataclass
class Tally:
    tried: list[dict] = dataclasses.field(default_factory=list)
    worst: dict = dataclasses.field(default_factory=dict)

    def add(self, row: dict, ok: bool, stats: dict) -> dict | None:
        """Record one trial; a failed one returns the dropped payload, a passed one None."""
        self.tried.append({**row, "ok": ok, **{k: stats.get(k) for k in ERRORS}})
        fold_worst(self.worst, stats)
        if ok:
            return None
        return {"status": "dropped", "reason": stats.get("reason", "incorrect"),
                "detail": stats.get("why", ""), "trials": self.tried, "errors": self.worst}
