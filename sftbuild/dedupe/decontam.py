"""Decontamination: drop records that contain a benchmark item.

A record is contaminated by item B when the share of B's distinctive n-grams
found in the record's kernel code, or in its reference program
(``binding.reference``, KernelBench records), reaches the threshold.
"Distinctive" leaves out n-grams shared by many benchmark items (the
``get_inputs``/``batch_size`` boilerplate every KernelBench problem has), so a
record is not matched to an item for boilerplate alone.

A benchmark is a path (a KernelBench-format folder or file, a dataset file or a
fingerprint file), fingerprints built in memory, or a benchmark *name* in `named`:
a record whose provenance says it belongs to that benchmark (``provenance["benchmark"]``,
e.g. harvested with ``inductor:DIR?benchmark=KernelBench``) is contaminated outright,
whatever its code.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from sftbuild.dedupe.fingerprints import DEFAULT_NGRAM, Fingerprints, load
from sftbuild.dedupe.near import Doc
from sftbuild.dedupe.signature import shingle_set


@dataclasses.dataclass
class Match:
    item: str
    benchmark: str
    score: float  # share of the item's distinctive n-grams found
    field: str  # "code" or "reference"


class Decontaminator:
    def __init__(self, benchmarks: list[str | os.PathLike | Fingerprints], threshold: float = 0.5,
                 ngram: int = DEFAULT_NGRAM, max_df: float = 0.05, min_ngrams: int = 10,
                 named: list[str] | None = None):
        self.threshold, self.ngram = threshold, ngram
        self.named = sorted(set(named or []))
        sets: list[Fingerprints] = [b if isinstance(b, Fingerprints) else load(b, ngram) for b in benchmarks]
        self.digests = [fp.digest() for fp in sets]
        self.names, self.benchmark, keys, owners = [], [], [], []
        for fp in sets:
            for i, name in enumerate(fp.names):
                vals = fp.item(i)
                keys.append(vals)
                owners.append(np.full(len(vals), len(self.names), np.int64))
                self.names.append(name)
                self.benchmark.append(fp.source)
        keys_all = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
        owner_all = np.concatenate(owners) if owners else np.zeros(0, np.int64)
        # boilerplate: n-grams present in more than max_df of the items (and in more than two)
        uniq, inverse, df = np.unique(keys_all, return_inverse=True, return_counts=True)
        limit = max(2, int(max_df * len(self.names)))
        keep = df[inverse] <= limit
        order = np.argsort(keys_all[keep], kind="stable")
        self.keys, self.owner = keys_all[keep][order], owner_all[keep][order]
        self.size = np.bincount(self.owner, minlength=len(self.names))
        self.min_ngrams = min_ngrams

    def manifest(self) -> dict:
        return {"items": len(self.names), "digests": self.digests, "ngram": self.ngram,
                "threshold": self.threshold, **({"named": self.named} if self.named else {})}

    def match(self, doc: Doc) -> Match | None:
        """The record's own benchmark when it is a named one; else the best-matching benchmark item
        at or above the threshold, if any."""
        own = doc.meta.get("benchmark")
        if own and own in self.named:
            return Match(str(doc.meta.get("path") or doc.meta.get("name") or doc.id), own, 1.0, "provenance")
        if not len(self.keys):
            return None
        best = None
        fields = [("code", doc.text, doc.language)]
        if isinstance(doc.reference, str) and doc.reference.strip():
            fields.append(("reference", doc.reference, "kernelbench"))
        for field, text, language in fields:
            q = shingle_set(text, language, self.ngram)
            lo = np.searchsorted(self.keys, q, side="left")
            hi = np.searchsorted(self.keys, q, side="right")
            hit = hi > lo
            if not hit.any():
                continue
            lo, hi = lo[hit], hi[hit]
            idx = np.repeat(lo, hi - lo) + (np.arange((hi - lo).sum()) - np.repeat(np.cumsum(hi - lo) - (hi - lo), hi - lo))
            counts = np.bincount(self.owner[idx], minlength=len(self.names))
            score = np.where(self.size >= self.min_ngrams, counts / np.maximum(self.size, 1), 0.0)
            j = int(np.argmax(score))  # ties go to the first item, deterministically
            if score[j] >= self.threshold and (best is None or score[j] > best.score):
                best = Match(self.names[j], self.benchmark[j], round(float(score[j]), 4), field)
        return best

