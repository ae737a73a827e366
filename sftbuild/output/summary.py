"""Facts the dataset card states, computed from the store and the samples at export time.

review(store, confidence)  the review sample, its verdicts and what they prove: the exact
                           one-sided Clopper-Pearson upper bound the review stage states
environments(samples)      where validation ran: GPU models, drivers and tool versions, or the CPU interpreter
coverage(samples)          trials, shapes and dtypes the verdicts rest on
"""
from __future__ import annotations

from collections import Counter

from sftbuild.output.rows import Sample, validation
from sftbuild.review_gate import upper_bound
from sftbuild.store import Store


def review(store: Store, confidence: float = 0.95) -> dict:
    rows = store.review_rows()
    verdicts = Counter(r["verdict"] or "pending" for r in rows)
    n, rejected = len(rows), verdicts.get("reject", 0)
    decided = n - verdicts.get("pending", 0)
    stats = next((m["stats"] for m in reversed(store.manifests()) if m["stage"] == "review" and m["stats"]), {})
    upper = upper_bound(rejected, decided, confidence) if decided else None
    statement = (f"defect rate <= {upper:.1%} at {confidence:.0%} confidence ({rejected} of {decided} reviewed "
                 "records rejected; one-sided Clopper-Pearson)") if decided else "no record has been reviewed"
    return {"sampled": n, "accepted": verdicts.get("accept", 0), "rejected": rejected,
            "pending": verdicts.get("pending", 0), "reviewers": sorted({r["reviewer"] for r in rows if r["reviewer"]}),
            "confidence": confidence, "upper": upper, "statement": statement, "stage": stats or {}}


def environments(samples: list[Sample]) -> list[dict]:
    """Distinct validation environments with the records each covered, most used first."""
    keys = ("where", "gpu", "driver", "cuda", "torch", "triton", "nvcc")
    counts = Counter(tuple(validation(s)[k] for k in keys) for s in samples)
    return [{**dict(zip(keys, k)), "records": n} for k, n in counts.most_common()]


def coverage(samples: list[Sample]) -> dict:
    trials = shapes = 0
    dtypes: Counter = Counter()
    for s in samples:
        v = validation(s)
        trials += v["trials"]
        shapes += v["shapes"]
        dtypes.update(d for d in v["dtypes"].split(",") if d)
    return {"records": len(samples), "trials": trials, "shapes": shapes, "dtypes": dict(sorted(dtypes.items()))}
