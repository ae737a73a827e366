"""Parsers the stages share, built once per process.

`cuda_parser()` is the tree-sitter CUDA parser: harvest extracts kernels with it and
describe reads features from its trees. `cuda_language()` is its grammar, for queries.
"""
from __future__ import annotations

import functools

import tree_sitter as ts
import tree_sitter_cuda


@functools.lru_cache(maxsize=1)
def cuda_language() -> ts.Language:
    return ts.Language(tree_sitter_cuda.language())


@functools.lru_cache(maxsize=1)
def cuda_parser() -> ts.Parser:
    return ts.Parser(cuda_language())
