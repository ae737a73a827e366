"""The review sample as a statement with a bound: its size, its strata, and what its verdicts prove.

Size: the larger of `fraction` of the records and the zero-defect acceptance plan
n = ceil(ln(1 - confidence) / ln(1 - defect_rate)) (59 records for 5% at 95%), never more
than there are records. If all n are accepted, a defect rate above `defect_rate` would have
shown a reject with probability at least `confidence`.

Strata: (source, op family, language). A stratum too small to earn one record on its own
(fewer than N/n records) is merged with its neighbours: first across op families, then
across languages, then into one rest stratum. Records are allocated to strata in proportion
to their sizes by largest remainder, and chosen within a stratum by a seeded hash, so the
same records and seed always give the same sample.

After verdicts: the exact one-sided Clopper-Pearson upper bound on the defect rate from k
rejects in m verdicts, and Cohen's kappa between the two reviewers of doubly reviewed records.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from collections import defaultdict
from typing import Iterable

from sftbuild.review_gate import _binom_cdf, upper_bound  # noqa: F401  (the bound is export's too)

REST = "*"


def acceptance_n(defect_rate: float, confidence: float) -> int:
    """Records a zero-defect acceptance plan needs to show defect rate <= p at this confidence."""
    if not (0 < defect_rate < 1 and 0 < confidence < 1):
        raise ValueError("review.defect_rate and review.confidence must lie strictly between 0 and 1")
    return math.ceil(round(math.log(1 - confidence) / math.log(1 - defect_rate), 9))


def sample_size(population: int, fraction: float, defect_rate: float, confidence: float) -> int:
    return min(population, max(math.ceil(round(fraction * population, 9)), acceptance_n(defect_rate, confidence)))


def _rank(seed: int, salt: str, key: str) -> str:
    return hashlib.sha256(f"{seed}:{salt}:{key}".encode()).hexdigest()


def merge_strata(sizes: dict[tuple, int], threshold: float) -> dict[tuple, tuple]:
    """Each stratum's merged key: a group under `threshold` records moves up one level
    (source, family, language) -> (source, *, language) -> (source, *, *) -> (*, *, *)."""
    levels = (lambda k: (k[0], REST, k[2]), lambda k: (k[0], REST, REST), lambda k: (REST, REST, REST))
    assign = {k: k for k in sizes}
    for coarser in levels:
        totals: dict[tuple, int] = defaultdict(int)
        for k, g in assign.items():
            totals[g] += sizes[k]
        for k, g in assign.items():
            if totals[g] < threshold:
                assign[k] = coarser(g)
    return assign


def allocate(sizes: dict[tuple, int], n: int, seed: int) -> dict[tuple, int]:
    """n seats over groups in proportion to their sizes, by largest remainder (ties by seeded hash)."""
    total = sum(sizes.values())
    if not total:
        return {}
    quotas = {g: n * s / total for g, s in sizes.items()}
    seats = {g: math.floor(q) for g, q in quotas.items()}
    left = n - sum(seats.values())
    order = sorted(sizes, key=lambda g: (-(quotas[g] - seats[g]), _rank(seed, "seat", str(g))))
    for g in order[:left]:
        seats[g] += 1
    return seats


@dataclasses.dataclass
class Drawn:
    rows: list[tuple[str, str, int]]  # (record id, stratum, copies)
    population: int
    size: int
    strata: dict[str, int]  # merged stratum -> records sampled from it


def draw(keys: dict[str, tuple], fraction: float, defect_rate: float, confidence: float, seed: int,
         overlap: float = 0.0) -> Drawn:
    """The sample of records `keys` (record id -> (source, family, language))."""
    n = sample_size(len(keys), fraction, defect_rate, confidence)
    sizes: dict[tuple, int] = defaultdict(int)
    for k in keys.values():
        sizes[k] += 1
    merged = merge_strata(dict(sizes), len(keys) / n if n else math.inf)
    groups: dict[tuple, list[str]] = defaultdict(list)
    for rid, k in keys.items():
        groups[merged[k]].append(rid)
    seats = allocate({g: len(ids) for g, ids in groups.items()}, n, seed)
    chosen: list[tuple[str, str]] = []
    for g in sorted(groups):
        ids = sorted(groups[g], key=lambda i: _rank(seed, "pick", i))
        chosen += [(i, "/".join(g)) for i in ids[:seats[g]]]
    doubles = set(sorted((i for i, _ in chosen), key=lambda i: _rank(seed, "overlap", i))
                  [:round(overlap * len(chosen))])
    rows = sorted((i, s, 2 if i in doubles else 1) for i, s in chosen)
    strata: dict[str, int] = defaultdict(int)
    for _, s, _ in rows:
        strata[s] += 1
    return Drawn(rows, len(keys), len(rows), dict(strata))


# ---- what verdicts prove -------------------------------------------------

def statement(size: int, population: int, rejects: int, decided: int, defect_rate: float,
              confidence: float) -> str:
    """One sentence: what the sample proves so far."""
    conf = f"{confidence:.0%}"
    if size == 0:
        return "nothing to review"
    if decided == 0:
        return (f"defect rate <= {defect_rate:.0%} at {conf} confidence, once all {size} sampled records "
                f"are accepted (zero-defect plan, n = {acceptance_n(defect_rate, confidence)})")
    if decided == population:
        return f"defect rate = {rejects / decided:.1%} exactly: every record was reviewed ({rejects} rejected)"
    bound = upper_bound(rejects, decided, confidence)
    tail = "" if decided == size else f"; {size - decided} verdicts still to come"
    return (f"defect rate <= {bound:.2%} at {conf} confidence (Clopper-Pearson, {rejects} rejected of "
            f"{decided} reviewed{tail})")


def cohen_kappa(pairs: Iterable[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters' labels; None when chance agreement is total (one label only)."""
    pairs = list(pairs)
    if not pairs:
        return None
    labels = {x for p in pairs for x in p}
    agree = sum(a == b for a, b in pairs) / len(pairs)
    chance = sum((sum(a == lab for a, _ in pairs) / len(pairs)) * (sum(b == lab for _, b in pairs) / len(pairs))
                 for lab in labels)
    if chance >= 1:
        return None
    return (agree - chance) / (1 - chance)
