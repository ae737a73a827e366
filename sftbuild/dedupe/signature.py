"""Vectorised MinHash signatures for a chunk of documents at a time.

Per chunk, numpy does the work on the concatenated token hashes of all its
documents instead of looping per shingle and per permutation:

1. every distinct token is hashed once (blake2b, 64 bits; cached), its lowest
   bit marking the code's own identifiers for the abstract view;
2. n-gram shingles are combined from token hashes with a polynomial hash and
   avalanched (fmix64); the low 32 bits are the shingle's fingerprint;
3. one sort of (document, fingerprint) gives each document's shingle *set*
   (kept for exact Jaccard verification) and, in the same pass, its
   signature:
   - "oph": one-permutation hashing: the fingerprint's top bits pick one of
     ``num_perm`` bins, the smallest fingerprint per bin is the bin's value,
     and empty bins are filled by optimal densification (each empty bin
     probes a fixed pseudo-random sequence of bins until it hits a non-empty
     one and copies it). Each bin then collides with probability equal to the
     Jaccard similarity, as a full MinHash does, at O(shingles) cost instead of
     O(shingles x permutations).
   - "affine32": datasketch 2.0's scheme applied to the same fingerprints, so
     ``datasketch.MinHash(num_perm, seed, hashfunc=int, scheme="affine32")``
     gives bit-identical hash values.

Fingerprints are 32-bit, so "exact" Jaccard is exact up to fingerprint
collisions (about 1e-5 of a shingle per document pair of 500 shingles).
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools

import numpy as np

from sftbuild.dedupe.normalize import is_kept_word, tokens
from sftbuild.dedupe.params import Params

U64 = np.uint64
_MUL = U64(0x9E3779B97F4A7C15)  # odd golden-ratio constant for the polynomial n-gram hash
_FMIX_M1 = U64(0xFF51AFD7ED558CCD)
_FMIX_M2 = U64(0xC4CEB9FE1A85EC53)
_LOW32 = U64(0xFFFFFFFF)
_VOCAB_LIMIT = 1_000_000  # the token-hash cache is cleared past this size to bound memory


def h64(text: str) -> int:
    """A stable 64-bit hash of a string (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little")


def fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser: a bijection that avalanches every input bit."""
    h = h ^ (h >> U64(33))
    h = h * _FMIX_M1
    h = h ^ (h >> U64(33))
    h = h * _FMIX_M2
    return h ^ (h >> U64(33))


def fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser, as datasketch applies it before its affine permutations."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


class _Vocab(dict):
    """token -> 64-bit hash; bit 0 is 1 for identifiers the abstract view renames."""

    def __missing__(self, tok: str) -> int:
        h = (h64(tok) & ~1) | (0 if is_kept_word(tok) else 1)
        self[tok] = h
        return h


_vocab = _Vocab()
_placeholders = np.zeros(0, dtype=U64)


def token_hash(tok: str) -> int:
    """The hash a token contributes to shingles (the identifier bit cleared)."""
    return _vocab[tok] & ~1


def _placeholder_hashes(n: int) -> np.ndarray:
    """Hashes of the placeholders ``$0 .. $n-1``, the same as hashing those tokens."""
    global _placeholders
    if len(_placeholders) < n:
        size = max(n, 2 * len(_placeholders), 256)
        _placeholders = np.array([h64(f"${k}") & ~1 for k in range(size)], dtype=U64)
    return _placeholders[:n]


@dataclasses.dataclass
class SigBlock:
    """Signatures and shingle sets of consecutive documents."""

    sig: np.ndarray  # (n, num_perm) uint32
    values: np.ndarray  # sorted unique fingerprints of all documents, concatenated (uint32)
    offsets: np.ndarray  # (n + 1,) int64: document i's set is values[offsets[i]:offsets[i+1]]

    def set(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i]:self.offsets[i + 1]]

    def __len__(self) -> int:
        return len(self.sig)

    def take(self, idx: np.ndarray) -> "SigBlock":
        idx = np.asarray(idx, np.int64)
        lo, hi = self.offsets[idx], self.offsets[idx + 1]
        lens = hi - lo
        offsets = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        gather = np.repeat(lo - offsets[:-1], lens) + np.arange(offsets[-1])
        return SigBlock(self.sig[idx], self.values[gather], offsets)


@dataclasses.dataclass
class Signatures:
    """Everything near-dedup needs about a list of documents, in their order."""

    n_tokens: np.ndarray  # (n,) int64
    exact: np.ndarray  # (n, 2) uint64: a 128-bit key of the normalised token sequence
    plain: SigBlock
    abstract: SigBlock

    def __len__(self) -> int:
        return len(self.n_tokens)

    def take(self, idx) -> "Signatures":
        """The signatures of the documents at `idx`, in that order."""
        idx = np.asarray(idx, np.int64)
        return Signatures(self.n_tokens[idx], self.exact[idx], self.plain.take(idx), self.abstract.take(idx))


def compute(texts: list[str], languages: list[str], params: Params,
            toks: list[list[str]] | None = None) -> Signatures:
    """Signatures of a list of documents (one chunk; callers split larger lists).

    `toks` are the documents' normalised tokens when the caller has them already.
    """
    if toks is None:
        toks = [tokens(t, lang) for t, lang in zip(texts, languages)]
    lens = np.fromiter(map(len, toks), dtype=np.int64, count=len(toks))
    total = int(lens.sum())
    if len(_vocab) > _VOCAB_LIMIT:
        _vocab.clear()
    flagged = np.fromiter(map(_vocab.__getitem__, itertools.chain.from_iterable(toks)), dtype=U64, count=total)
    del toks
    starts = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=starts[1:])
    doc_of = np.repeat(np.arange(len(lens)), lens)
    plain = flagged & ~U64(1)
    abstract = _abstract(flagged, plain, starts, doc_of)
    lang_keys = np.array([h64(lang) for lang in languages], dtype=U64)
    return Signatures(lens, _exact_keys(plain, starts, doc_of, lang_keys),
                      _block(plain, starts, lens, params), _block(abstract, starts, lens, params))


def _abstract(flagged: np.ndarray, plain: np.ndarray, starts: np.ndarray, doc_of: np.ndarray) -> np.ndarray:
    """Identifiers -> placeholder hashes numbered by first appearance within their document."""
    ident = (flagged & U64(1)).astype(bool)
    # a word right after "." is a member or API name (tl.load, threadIdx.x): kept
    after_dot = np.zeros(len(plain), bool)
    after_dot[1:] = plain[:-1] == token_hash(".")
    after_dot[starts[:-1][starts[:-1] < len(plain)]] = False
    pos = np.flatnonzero(ident & ~after_dot)
    out = plain.copy()
    if not len(pos):
        return out
    d, hv = doc_of[pos], plain[pos]
    order = np.lexsort((pos, hv, d))  # by document, then name, then position
    sd, sh, sp = d[order], hv[order], pos[order]
    new = np.ones(len(order), bool)
    new[1:] = (sd[1:] != sd[:-1]) | (sh[1:] != sh[:-1])
    group = np.cumsum(new) - 1
    first_pos, group_doc = sp[new], sd[new]
    by_first = np.argsort(first_pos, kind="stable")  # positions grow with the document index
    doc_sorted = group_doc[by_first]
    doc_start = np.searchsorted(doc_sorted, doc_sorted, side="left")
    rank = np.empty(len(by_first), np.int64)
    rank[by_first] = np.arange(len(by_first)) - doc_start
    ranks = rank[group]
    out[sp] = _placeholder_hashes(int(ranks.max()) + 1)[ranks]
    return out


def _exact_keys(plain: np.ndarray, starts: np.ndarray, doc_of: np.ndarray, lang_keys: np.ndarray) -> np.ndarray:
    """A 128-bit key of each document's token sequence: position-salted hash sums."""
    n = len(starts) - 1
    keys = np.zeros((n, 2), U64)
    if len(plain):
        position = (np.arange(len(plain)) - starts[doc_of]).astype(U64)
        with np.errstate(over="ignore"):
            for c, salt in enumerate((U64(0x243F6A8885A308D3), U64(0x13198A2E03707344))):
                mixed = fmix64(plain ^ (position * salt + salt))
                nonempty = np.flatnonzero(starts[1:] > starts[:-1])
                keys[nonempty, c] = np.add.reduceat(mixed, starts[:-1][nonempty])
    return fmix64(keys ^ lang_keys[:, None])


def _shingles(th: np.ndarray, starts: np.ndarray, lens: np.ndarray, params: Params):
    """(document index, 64-bit shingle hash) of every n-gram, n chosen per document."""
    docs_out, hashes_out = [], []
    n_of = np.where(lens < params.short_tokens, params.short_ngram, params.ngram)
    for n in sorted(set(n_of.tolist())):
        sel = np.flatnonzero((n_of == n) & (lens >= n))
        if len(sel):
            chosen = np.zeros(len(lens), bool)
            chosen[sel] = True
            sub = th if len(sel) == len(lens) else th[np.repeat(chosen, lens)]
            sub_lens = lens[sel]
            m = len(sub) - n + 1
            h = sub[:m].copy()
            for j in range(1, n):
                h = h * _MUL + sub[j:j + m]
            sub_starts = np.concatenate([[0], np.cumsum(sub_lens)])
            end = np.repeat(sub_starts[1:], sub_lens)[:m]
            ok = np.arange(m) + n <= end
            docs_out.append(np.repeat(sel, sub_lens)[:m][ok])
            hashes_out.append(h[ok])
        # a document shorter than n is one shingle of all its tokens
        for i in np.flatnonzero((n_of == n) & (lens < n) & (lens > 0)):
            h = U64(0)
            for t in th[starts[i]:starts[i + 1]]:
                h = h * _MUL + t
            docs_out.append(np.array([i]))
            hashes_out.append(np.array([h], dtype=U64))
    if not docs_out:
        return np.zeros(0, np.int64), np.zeros(0, U64)
    return np.concatenate(docs_out), np.concatenate(hashes_out)


def _block(th: np.ndarray, starts: np.ndarray, lens: np.ndarray, params: Params) -> SigBlock:
    n_docs, k = len(lens), params.num_perm
    with np.errstate(over="ignore"):
        docs, sh = _shingles(th, starts, lens, params)
        fp = fmix64(sh ^ U64(h64(f"shingle-seed-{params.seed}"))) & _LOW32
    keys = np.sort((docs.astype(U64) << U64(32)) | fp)
    if len(keys):
        keep = np.ones(len(keys), bool)
        keep[1:] = keys[1:] != keys[:-1]
        keys = keys[keep]
    key_doc = (keys >> U64(32)).astype(np.int64)
    values = (keys & _LOW32).astype(np.uint32)
    offsets = np.searchsorted(key_doc, np.arange(n_docs + 1), side="left").astype(np.int64)
    if params.scheme == "affine32":
        sig = _affine32(values, offsets, params)
    else:
        sig = _oph(values, key_doc, n_docs, params)
    return SigBlock(sig, values, offsets)


def _oph(values: np.ndarray, key_doc: np.ndarray, n_docs: int, params: Params) -> np.ndarray:
    k = params.num_perm
    sig = np.full((n_docs, k), 0xFFFFFFFF, np.uint32)
    filled = np.zeros((n_docs, k), bool)
    if len(values):
        bins = ((values.astype(U64) * U64(k)) >> U64(32)).astype(np.int64)
        # values are sorted within a document, so the first of each (document, bin) run is its minimum
        first = np.ones(len(values), bool)
        first[1:] = (key_doc[1:] != key_doc[:-1]) | (bins[1:] != bins[:-1])
        sig[key_doc[first], bins[first]] = values[first]
        filled[key_doc[first], bins[first]] = True
    _densify(sig, filled, params.seed)
    return sig


def _densify(sig: np.ndarray, filled: np.ndarray, seed: int) -> None:
    """Optimal densification: empty bin i copies bin probe(i, t) for the first non-empty probe."""
    k = sig.shape[1]
    has_any = filled.any(axis=1)
    rows, cols = np.nonzero(~filled & has_any[:, None])
    salt = U64(h64(f"densify-seed-{seed}"))
    attempt = 0
    with np.errstate(over="ignore"):
        while len(rows):
            probe = fmix64(cols.astype(U64) * _MUL + U64(attempt) * _FMIX_M1 + salt)
            j = ((probe >> U64(32)) * U64(k) >> U64(32)).astype(np.int64)
            hit = filled[rows, j]
            sig[rows[hit], cols[hit]] = sig[rows[hit], j[hit]]
            rows, cols = rows[~hit], cols[~hit]
            attempt += 1


_perm_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}


def affine32_permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's own (a, b) for scheme affine32, so the two agree bit for bit."""
    key = (num_perm, seed)
    if key not in _perm_cache:
        from datasketch import MinHash

        a, b = MinHash(num_perm=num_perm, seed=seed, scheme="affine32").permutations
        _perm_cache[key] = (np.asarray(a, np.uint32), np.asarray(b, np.uint32))
    return _perm_cache[key]


def _affine32(values: np.ndarray, offsets: np.ndarray, params: Params) -> np.ndarray:
    a, b = affine32_permutations(params.num_perm, params.seed)
    n_docs = len(offsets) - 1
    sig = np.full((n_docs, params.num_perm), 0xFFFFFFFF, np.uint32)
    mixed = fmix32(values)
    step = 64  # documents per block keeps the (shingles x permutations) matrix in cache
    for lo in range(0, n_docs, step):
        hi = min(lo + step, n_docs)
        a0, a1 = offsets[lo], offsets[hi]
        if a1 == a0:
            continue
        perm = mixed[a0:a1, None] * a + b
        nonempty = np.flatnonzero(offsets[lo + 1:hi + 1] > offsets[lo:hi]) + lo
        sig[nonempty] = np.minimum.reduceat(perm, offsets[nonempty] - a0, axis=0)
    return sig


def shingle_set(text: str, language: str, n: int) -> np.ndarray:
    """Sorted unique 64-bit hashes of one text's n-gram shingles (for decontamination)."""
    toks = tokens(text, language)
    th = np.fromiter((token_hash(t) for t in toks), dtype=U64, count=len(toks))
    lens = np.array([len(toks)], np.int64)
    starts = np.array([0, len(toks)], np.int64)
    with np.errstate(over="ignore"):
        _, sh = _shingles(th, starts, lens, Params(ngram=n, short_ngram=n, short_tokens=0))
        return np.unique(fmix64(sh))


def assemble(parts: list[tuple[Signatures, np.ndarray]], num_perm: int) -> Signatures:
    """The kept documents (boolean mask per part) of consecutive parts, in order.

    Parts are popped from the list and released once copied, so peak memory is the
    result plus one part rather than twice the result, as with a plain concatenate.
    """
    n = sum(int(m.sum()) for _, m in parts)
    out = Signatures(np.empty(n, np.int64), np.empty((n, 2), U64), *[
        SigBlock(np.empty((n, num_perm), np.uint32),
                 np.empty(sum(int(np.diff(getattr(p, name).offsets)[m].sum()) for p, m in parts), np.uint32),
                 np.zeros(n + 1, np.int64))
        for name in ("plain", "abstract")])
    row, pos = 0, {"plain": 0, "abstract": 0}
    while parts:
        part, mask = parts.pop(0)
        idx = np.flatnonzero(mask)
        k = len(idx)
        out.n_tokens[row:row + k] = part.n_tokens[idx]
        out.exact[row:row + k] = part.exact[idx]
        for name in ("plain", "abstract"):
            src, dst = getattr(part, name).take(idx), getattr(out, name)
            dst.sig[row:row + k] = src.sig
            dst.values[pos[name]:pos[name] + len(src.values)] = src.values
            dst.offsets[row + 1:row + k + 1] = src.offsets[1:] + pos[name]
            pos[name] += len(src.values)
        row += k
        del part, mask
    return out
