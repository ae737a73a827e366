"""The parameters of near-duplicate detection, and what goes into the run manifest.

`Params` is the library-facing copy of the near-dedup fields of `DedupeConfig`;
its defaults are read from there, so each default is written once.
"""
from __future__ import annotations

import dataclasses

from sftbuild.config import DedupeConfig

_DEFAULT = DedupeConfig()
SCHEMES = next(f.metadata["choices"] for f in dataclasses.fields(DedupeConfig) if f.name == "scheme")
# Bumped whenever tokenisation, abstraction or hashing changes, so old fingerprints are refused.
HASH_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Params:
    """Every knob of the near-dedup; defaults follow The Stack / StarCoder practice.

    scheme: "oph"      one-permutation hashing with optimal densification (fast, default);
            "affine32" datasketch 2.0's own permutation scheme, bit-identical to
                       ``datasketch.MinHash(scheme="affine32")`` fed the same shingle hashes.
    """

    ngram: int = _DEFAULT.ngram
    short_ngram: int = _DEFAULT.short_ngram
    short_tokens: int = _DEFAULT.short_tokens  # kernels with fewer tokens are shingled with short_ngram
    num_perm: int = _DEFAULT.num_perm
    bands: int = _DEFAULT.bands
    rows: int = _DEFAULT.rows
    threshold: float = _DEFAULT.threshold  # exact Jaccard a plain candidate pair must reach
    abstract_threshold: float = _DEFAULT.abstract_threshold  # the same for identifier-abstracted tokens
    seed: int = _DEFAULT.seed
    scheme: str = _DEFAULT.scheme
    chunk_size: int = _DEFAULT.chunk_size  # documents per signature task

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise ValueError(f"dedupe scheme must be one of {SCHEMES}, got {self.scheme!r}")
        if self.bands * self.rows > self.num_perm:
            raise ValueError("dedupe bands * rows must not exceed num_perm")
        if self.bands < 1 or self.rows < 1 or self.ngram < 1 or self.short_ngram < 1:
            raise ValueError("dedupe bands, rows and n-gram sizes must be positive")
        if not 0 < self.num_perm <= 1 << 16:
            raise ValueError("dedupe num_perm must be in [1, 65536]")

    @classmethod
    def from_config(cls, cfg: DedupeConfig) -> "Params":
        """The near-dedup fields of a DedupeConfig."""
        return cls(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls)})

    def ngram_for(self, n_tokens: int) -> int:
        return self.short_ngram if n_tokens < self.short_tokens else self.ngram

    def manifest(self) -> dict:
        """The parameters plus the library versions and permutation scheme that shape the result."""
        d = dataclasses.asdict(self)
        d.pop("chunk_size")  # changes the work split, never the result
        d["datasketch"] = _version("datasketch")
        d["numpy"] = _version("numpy")
        d["hash_version"] = HASH_VERSION
        d["permutation_scheme"] = {
            "oph": "one-permutation hashing over 32-bit shingle fingerprints, optimal densification",
            "affine32": "datasketch affine32: fmix32 then a*h+b mod 2^32, a odd, from MinHash(seed)",
        }[self.scheme]
        d["token_hash"] = "blake2b-64 per token; polynomial n-gram combine; fmix64"
        d["lsh"] = "own banding with datasketch MinHashLSH params (bands, rows)"
        return d


def _version(dist: str) -> str | None:
    """An installed package's version, without importing it (datasketch would pull in scipy)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None
