"""Exact and near-duplicate clustering, usable without the store.

    from sftbuild.dedupe.near import Doc, find_clusters
    from sftbuild.dedupe.params import Params
    result = find_clusters([Doc(id="a", text=code_a, language="cuda"), ...], Params(), workers=2)
    result.dropped   # {doc id: {"duplicate_of": rep, "similarity": x, "signature": "exact"|"plain"|"abstract"}}

Three kinds of verified pair link two documents:
  exact     the same normalised token sequence;
  plain     an LSH candidate on plain 5-gram MinHash whose exact shingle Jaccard >= threshold;
  abstract  an LSH candidate on identifier-abstracted MinHash, of the same op (or both unbound),
            whose abstract shingle Jaccard >= abstract_threshold.
Clusters are connected components of those links; each keeps its best document
(`rank_key` after validation; `validation_order` before it). Everything is decided in sorted order,
so the same input gives the same clusters whatever the number of workers.
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import functools
import multiprocessing as mp
from collections import defaultdict
from typing import Any, Callable, Iterator

import numpy as np

from sftbuild.dedupe import normalize
from sftbuild.dedupe.params import Params
from sftbuild.dedupe.signature import Signatures, assemble, compute, fmix64

UNKNOWN_LICENSES = frozenset({"", "unknown", "noassertion", "none", "other", "unlicensed", "proprietary"})


@dataclasses.dataclass
class Doc:
    """One document to dedupe: the code plus what ranks it against its duplicates."""

    id: str
    text: str
    language: str = "cuda"
    op: str | None = None  # binding op; abstract links only join documents of the same op
    validated: bool = False
    speedup: float | None = None
    license: str | None = None
    priority: int = 0
    source_kind: str = ""
    reference: str | None = None  # the reference program (KernelBench), for decontamination
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)  # provenance, shown in reports
    how: str | None = None  # how the binding was found (sftbuild.binding.HOWS); None when unbound
    evidence: int = 0  # shapes and dtypes the binding was checked on when it was found
    n_tokens: int = 0  # normalised tokens; find_clusters fills it in from the signatures
    filtered: str | None = None  # before validation: the filter (or `contaminated`) that will drop it

    @functools.cached_property
    def tokens(self) -> list[str]:
        """Normalised tokens, computed once and shared by filters and signatures."""
        return normalize.tokens(self.text, self.language)


def license_known(lic: str | None) -> bool:
    return bool(lic) and lic.strip().lower() not in UNKNOWN_LICENSES


def rank_key(doc: Doc) -> tuple:
    """Smaller is better: validated, faster, clearer licence, higher source priority, then id."""
    speed = doc.speedup if isinstance(doc.speedup, (int, float)) and doc.speedup == doc.speedup else None
    return (not doc.validated, speed is None, -(speed or 0.0), not license_known(doc.license),
            -(doc.priority or 0), doc.id)


# Before validation: the stronger the binding, the likelier its check says something about the code.
HOW_ORDER = ("exact", "declared", "probed", "package_reference", "file_reference", "inferred")


def validation_order(doc: Doc) -> tuple:
    """Smaller is validated first. The rule that picks which member of a cluster of near duplicates
    the GPU checks first: one that dedupe's filters and decontamination will keep; then one already
    validated ok; then bound before unbound; then the
    stronger binding (`HOW_ORDER`: exact, declared, probed, package or file reference, inferred);
    then the richer binding evidence (more shapes and dtypes checked); then the source's priority;
    then a known licence; then the shorter code (fewer normalised tokens); then id."""
    how = HOW_ORDER.index(doc.how) if doc.how in HOW_ORDER else len(HOW_ORDER)
    return (doc.filtered is not None, not doc.validated, doc.how is None, how, -doc.evidence, -(doc.priority or 0),
            not license_known(doc.license), doc.n_tokens, doc.id)


@dataclasses.dataclass
class Clusters:
    """The outcome: clusters of two or more, their representatives, and who points where."""

    clusters: list[list[str]]  # members (representative first, then by id), largest first then by rep id
    representative: dict[str, str]  # member id -> its cluster's representative (members of clusters only)
    dropped: dict[str, dict]  # non-representative id -> {"duplicate_of", "similarity", "signature"[, "via"]}
    pairs: dict[str, int]  # verified links per kind, and candidates examined
    params: dict


# ---- parallel signatures -------------------------------------------------
Mapper = Callable[..., Iterator[tuple[Any, Any]]]


def signature_task(item: tuple) -> Signatures:
    """One chunk: (index, texts, languages, params). Module level, so process pools can pickle it."""
    _, texts, languages, params = item
    return compute(texts, languages, params)


def pool_mapper(workers: int) -> Mapper:
    """A map_cpu-like mapper over a process pool of `workers` (in-process when 1)."""
    def mapper(fn, items, desc=""):
        items = list(items)
        if workers <= 1 or len(items) <= 1:
            for it in items:
                yield it, fn(it)
            return
        # spawn: safe whatever threads the parent runs; start-up is small next to the work
        with cf.ProcessPoolExecutor(min(workers, len(items)), mp_context=mp.get_context("spawn")) as pool:
            futures = {pool.submit(fn, it): it for it in items}
            for fut in cf.as_completed(futures):
                yield futures[fut], fut.result()
    return mapper


def signatures(texts: list[str], languages: list[str], params: Params, workers: int = 1,
               mapper: Mapper | None = None, desc: str = "dedupe signatures") -> Signatures:
    """Signatures of all documents, in order; chunking never depends on the worker count."""
    size = max(1, params.chunk_size)
    items = [(i, texts[lo:lo + size], languages[lo:lo + size], params)
             for i, lo in enumerate(range(0, len(texts), size))]
    parts: dict[int, Signatures] = {}
    for item, res in (mapper or pool_mapper(workers))(signature_task, items, desc=desc):
        if not isinstance(res, Signatures):  # a failed worker: redo the chunk here, raising if it fails again
            res = signature_task(item)
        parts[item[0]] = res
    del items
    ordered = [(parts[i], np.ones(len(parts[i]), bool)) for i in range(len(parts))]
    parts.clear()
    return assemble(ordered, params.num_perm)


# ---- LSH -----------------------------------------------------------------
def band_keys(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) uint64: one hash of each band's `rows` values, as MinHashLSH buckets them."""
    n = len(sig)
    keys = np.zeros((n, bands), np.uint64)
    with np.errstate(over="ignore"):
        for b in range(bands):
            h = np.full(n, np.uint64(b + 1), np.uint64)
            for c in range(b * rows, (b + 1) * rows):
                h = fmix64(h ^ sig[:, c].astype(np.uint64))
            keys[:, b] = h
    return keys


def candidate_pairs(sig: np.ndarray, params: Params, active: np.ndarray | None = None) -> np.ndarray:
    """Sorted unique (i, j), i < j, of documents sharing at least one LSH band."""
    idx = np.arange(len(sig)) if active is None else np.asarray(active)
    if len(idx) < 2:
        return np.zeros((0, 2), np.int64)
    keys = band_keys(sig[idx], params.bands, params.rows)
    found = []
    for b in range(params.bands):
        k = keys[:, b]
        order = np.argsort(k, kind="stable")
        ks = k[order]
        cut = np.flatnonzero(ks[1:] != ks[:-1]) + 1
        starts = np.concatenate([[0], cut])
        ends = np.concatenate([cut, [len(ks)]])
        size = ends - starts
        for m in np.unique(size[size > 1]).tolist():  # all buckets of one size at once
            members = order[starts[size == m][:, None] + np.arange(m)]
            i, j = np.triu_indices(m, 1)
            found.append(np.stack([members[:, i].ravel(), members[:, j].ravel()], axis=1))
    if not found:
        return np.zeros((0, 2), np.int64)
    pairs = idx[np.concatenate(found)]
    pairs.sort(axis=1)
    return np.unique(pairs, axis=0)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard of two sorted unique fingerprint sets."""
    if not len(a) or not len(b):
        return 0.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


class UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if rb < ra:
            ra, rb = rb, ra
        self.parent[rb] = ra
        return True


# ---- clustering ------------------------------------------------------------
def find_clusters(docs: list[Doc], params: Params | None = None, workers: int = 1,
                  mapper: Mapper | None = None, sigs: Signatures | None = None,
                  rank: Callable[[Doc], tuple] = rank_key, same_op: tuple[str, ...] = ("abstract",)) -> Clusters:
    """Cluster exact and near duplicates; pick one representative per cluster.

    `mapper` (e.g. an executor's ``map_cpu``) replaces the built-in process pool;
    `sigs` skips signature computation when the caller has them already; `rank` orders a
    cluster's members (its smallest is the representative); links of the kinds in `same_op`
    ("plain", "abstract") join only documents of the same op, or two unbound ones.
    """
    params = params or Params()
    n = len(docs)
    if len({d.id for d in docs}) != n:
        raise ValueError("document ids must be unique")
    if sigs is None:
        sigs = signatures([d.text for d in docs], [d.language for d in docs], params, workers, mapper)
    for d, k in zip(docs, sigs.n_tokens.tolist()):
        d.n_tokens = int(k)
    uf = UnionFind(n)
    edges: dict[int, list[tuple[int, float, str]]] = defaultdict(list)
    counts = {"exact": 0, "plain": 0, "abstract": 0, "plain_candidates": 0, "abstract_candidates": 0}

    def link(i: int, j: int, sim: float, kind: str) -> None:
        uf.union(i, j)
        edges[i].append((j, sim, kind))
        edges[j].append((i, sim, kind))
        counts[kind] += 1

    # exact: group by the 128-bit key of the normalised token sequence; link to the first
    by_key: dict[bytes, int] = {}
    for i in range(n):
        if sigs.n_tokens[i] == 0:
            continue  # nothing to compare; filters drop such documents first
        first = by_key.setdefault(sigs.exact[i].tobytes(), i)
        if first != i:
            link(first, i, 1.0, "exact")
    unique = np.array(sorted(by_key.values()), dtype=np.int64)

    for kind, block, thr in (("plain", sigs.plain, params.threshold),
                             ("abstract", sigs.abstract, params.abstract_threshold)):
        pairs = candidate_pairs(block.sig, params, unique)
        if kind in same_op and len(pairs):
            ops = _op_codes(docs)
            pairs = pairs[ops[pairs[:, 0]] == ops[pairs[:, 1]]]
        counts[f"{kind}_candidates"] += len(pairs)
        for i, j in pairs.tolist():
            if uf.find(i) == uf.find(j):
                continue  # already joined: the components would not change
            sim = jaccard(block.set(i), block.set(j))
            if sim >= thr:
                link(i, j, sim, kind)
    return _collect(docs, uf, edges, counts, params, rank)


def _op_codes(docs: list[Doc]) -> np.ndarray:
    """An integer per op; unbound documents share one code so they match each other."""
    table: dict[Any, int] = {}
    return np.array([table.setdefault(d.op, len(table)) for d in docs], dtype=np.int64)


def _collect(docs: list[Doc], uf: UnionFind, edges: dict, counts: dict, params: Params,
             rank: Callable[[Doc], tuple] = rank_key) -> Clusters:
    groups: dict[int, list[int]] = defaultdict(list)
    for i in sorted(edges):
        groups[uf.find(i)].append(i)
    clusters, representative, dropped = [], {}, {}
    for members in groups.values():
        rep = min(members, key=lambda i: rank(docs[i]))
        # walk the verified links out from the representative: each member records the link it came by
        seen = {rep}
        frontier = [rep]
        while frontier:
            nxt = []
            for u in frontier:
                for v, sim, kind in sorted(edges[u], key=lambda e: docs[e[0]].id):
                    if v in seen:
                        continue
                    seen.add(v)
                    nxt.append(v)
                    payload = {"duplicate_of": docs[rep].id, "similarity": round(float(sim), 4),
                               "signature": kind}
                    if u != rep:
                        payload["via"] = docs[u].id
                    dropped[docs[v].id] = payload
            frontier = sorted(nxt, key=lambda i: docs[i].id)
        ids = [docs[rep].id] + sorted(docs[i].id for i in members if i != rep)
        clusters.append(ids)
        for i in ids:
            representative[i] = ids[0]
    clusters.sort(key=lambda c: (-len(c), c[0]))
    return Clusters(clusters, representative, dropped, counts, params.manifest())

