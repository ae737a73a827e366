"""Pairwise precision and recall of near-dedup on hand-written kernels and their variants.

Each base kernel in tests/data/dedupe/kernels (named ``<op>__<variant>``) gets
true near-duplicates: identifiers renamed, reformatted, comments changed, a line
added, and combinations. Distinct kernels of the same op (tree vs shuffle vs
atomic reductions, naive vs tiled matmul and transpose, ...) must stay apart.
"""
from __future__ import annotations

import itertools
import re
from pathlib import Path

from sftbuild.dedupe.near import Doc, find_clusters
from sftbuild.dedupe.normalize import is_kept_word, tokens
from sftbuild.dedupe.params import Params

KERNELS = Path(__file__).parents[1] / "data" / "dedupe" / "kernels"


def _language(path: Path) -> str:
    return "cuda" if path.suffix == ".cu" else "triton"


def identifiers(code: str, language: str) -> list[str]:
    seen: dict[str, None] = {}
    prev = ""
    for t in tokens(code, language):
        if prev != "." and not is_kept_word(t):
            seen.setdefault(t)
        prev = t
    return list(seen)


def rename(code: str, language: str) -> str:
    names = identifiers(code, language)
    table = {name: f"{'qwxz'[i % 4]}{i}{name[:1].upper()}" for i, name in enumerate(names)}
    if not table:
        return code
    pattern = re.compile(r"(?<![.\w])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")
    return pattern.sub(lambda m: table[m.group(1)], code)


def reformat(code: str, language: str) -> str:
    code = code.replace(", ", ",").replace("\n\n\n", "\n\n")
    lines = []
    for line in code.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if language == "cuda":
            body = re.sub(r"\s*([=<>+*-]=?)\s*", r" \1 ", body) if "#" not in body else body
            if body.endswith(") {"):
                lines.append(" " * (indent // 2) + body[:-2])
                body = "{"
        lines.append(" " * (indent // 2) + body)
    return "\n".join(lines) + "\n"


def recomment(code: str, language: str) -> str:
    out = []
    if language == "cuda":
        out.append("/*\n * Copyright (c) 2023 Example Corp.\n * Licensed under the Apache License, Version 2.0\n */")
        for line in code.splitlines():
            if line.strip().startswith("//"):
                continue
            line = re.sub(r"\s*//.*$", "", line)
            if line.strip().startswith("for"):
                out.append(" " * (len(line) - len(line.lstrip())) + "// main loop")
            out.append(line)
    else:
        out.append("# SPDX-License-Identifier: MIT\n# Copyright 2022 Example Corp.")
        text = re.sub(r'"""[\s\S]*?"""', '"""Kernel body; see the launcher below for the grid."""', code)
        for line in text.splitlines():
            if line.strip().startswith("#"):
                continue
            if line.strip().startswith("for"):
                line += "  # tile loop"
            out.append(line)
    return "\n".join(out) + "\n"


def add_line(code: str, language: str) -> str:
    lines = code.splitlines()
    if language == "cuda":
        at = next(i for i, l in enumerate(lines) if "__global__" in l)
        at = next(i for i in range(at, len(lines)) if lines[i].rstrip().endswith("{"))
        lines.insert(at + 1, "    if (blockDim.x == 0) return;")
    else:
        at = next(i for i, l in enumerate(lines) if l.startswith("def ") and "@triton" in lines[i - 1]
                  or (l.startswith("def ") and any("@triton.jit" in p for p in lines[max(0, i - 2):i])))
        at = next(i for i in range(at, len(lines)) if lines[i].rstrip().endswith(":"))
        lines.insert(at + 1, "    tl.debug_barrier()")
    return "\n".join(lines) + "\n"


VARIANTS = {
    "renamed": rename,
    "reformatted": reformat,
    "recommented": recomment,
    "line_added": add_line,
    "renamed_reformatted_recommented": lambda c, l: rename(recomment(reformat(c, l), l), l),
    "renamed_line_added": lambda c, l: rename(add_line(c, l), l),
}


def build_set() -> tuple[list[Doc], dict[str, str]]:
    docs, truth = [], {}
    for path in sorted(KERNELS.iterdir()):
        lang = _language(path)
        op = path.stem.split("__")[0]
        base = path.read_text()
        for name, fn in [("base", lambda c, l: c), *VARIANTS.items()]:
            doc = Doc(id=f"{path.stem}:{name}", text=fn(base, lang), language=lang, op=op)
            docs.append(doc)
            truth[doc.id] = path.stem
    return docs, truth


def pairwise(docs: list[Doc], truth: dict[str, str], representative: dict[str, str]):
    pred = {d.id: representative.get(d.id, d.id) for d in docs}
    tp = fp = fn = 0
    errors = []
    for a, b in itertools.combinations([d.id for d in docs], 2):
        same_true, same_pred = truth[a] == truth[b], pred[a] == pred[b]
        tp += same_true and same_pred
        fp += same_pred and not same_true
        fn += same_true and not same_pred
        if same_true != same_pred:
            errors.append((a, b, "fp" if same_pred else "fn"))
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    return precision, recall, errors


def test_quality_precision_recall():
    docs, truth = build_set()
    assert len({truth[d.id] for d in docs}) >= 15
    result = find_clusters(docs, Params())
    precision, recall, errors = pairwise(docs, truth, result.representative)
    print(f"\ndedupe quality: {len(docs)} docs, {len(set(truth.values()))} base kernels, "
          f"pairwise precision {precision:.3f}, recall {recall:.3f}, links {result.pairs}")
    for e in errors[:20]:
        print("  ", e)
    assert precision >= 0.95
    assert recall >= 0.9


def test_quality_plain_signature_alone_misses_renamed_copies():
    """Why the abstract signature exists: without it, renamed copies are not found."""
    docs, truth = build_set()
    plain_only = find_clusters(docs, Params(abstract_threshold=1.01))
    both = find_clusters(docs, Params())
    renamed = [d.id for d in docs if d.id.endswith(":renamed")]

    def missed(result):
        rep = result.representative
        return sum(1 for r in renamed if rep.get(r, r) != rep.get(r.replace(":renamed", ":base"), "-"))

    missed_plain, missed_both = missed(plain_only), missed(both)
    print(f"\nrenamed copies missed: plain only {missed_plain}/{len(renamed)}, with abstract {missed_both}")
    assert missed_plain > missed_both
