"""What the review sample says about export, read by the review stage and by export alike.

Invariants:
  * `gate(ctx)` is why export must wait (no sample, verdicts pending, too many rejected), or None.
  * `upper_bound(rejects, decided, confidence)` is the exact one-sided Clopper-Pearson bound on the
    defect rate that the dataset card states; no scipy.
  * It reads the store and the config only: no stage imports another through it.
"""
from __future__ import annotations

import math


def gate(ctx) -> str | None:
    """Why export must wait, or None when the review sample passed."""
    if ctx.store.stage_config("review") is None:
        return "the review stage has not run (sftbuild review sample)"
    rows = ctx.store.review_rows()
    pending = [r for r in rows if r["verdict"] is None]
    if pending:
        return (f"{len(pending)} of {len(rows)} sampled records have no verdict "
                f"(see `sftbuild review list --pending`)")
    rejected = [r for r in rows if r["verdict"] == "reject"]
    if rows and len(rejected) / len(rows) > ctx.config.review.max_reject_rate:
        return (f"the review sample failed: {len(rejected)} of {len(rows)} rejected, over the allowed "
                f"{ctx.config.review.max_reject_rate:.0%}; fix the cause and rerun the stages")
    return None


def upper_bound(rejects: int, decided: int, confidence: float) -> float:
    """Exact one-sided Clopper-Pearson upper bound on the defect rate: scipy's beta.ppf(confidence,
    rejects + 1, decided - rejects) to 1e-11 (relative), without importing scipy (seconds a start)."""
    if decided == 0 or rejects >= decided:
        return 1.0
    lo, hi = rejects / decided, 1.0  # binomial cdf(k; m, p) falls in p: bisect cdf = 1 - confidence
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _binom_cdf(rejects, decided, mid) > 1 - confidence else (lo, mid)
    return hi


def _binom_cdf(k: int, n: int, p: float) -> float:
    if p <= 0:
        return 1.0
    if p >= 1:
        return 0.0 if k < n else 1.0
    return sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                        + i * math.log(p) + (n - i) * math.log1p(-p)) for i in range(k + 1))
