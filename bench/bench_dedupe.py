"""Speed and memory benchmark of the dedupe stage (not a test).

    /work/venv/bin/python bench/bench_dedupe.py [--n 100000] [--workers 2] [--scheme oph]

Generates N synthetic kernels of about 2 KB (CUDA and Triton, deterministic,
with planted near-duplicates: renamed, reformatted, re-commented, a line added),
then times the whole dedupe on them: quality filters, both signatures (plain and
identifier-abstracted), LSH, exact-Jaccard verification and clustering. Peak
memory is this process's peak RSS plus the largest child's (getrusage), an upper
bound. The baseline is plain per-document ``datasketch.MinHash.update`` over the
same shingles, measured on a subset and extrapolated to N documents and both
signatures.
"""
from __future__ import annotations

import argparse
import random
import resource
import sys
import time

from sftbuild.dedupe import filters as F
from sftbuild.dedupe.near import Doc
from sftbuild.dedupe.normalize import abstract_tokens, is_kept_word, tokens
from sftbuild.dedupe.params import Params
from sftbuild.dedupe.stage import dedupe_docs

OPS = ["add", "mul", "relu", "gelu", "silu", "softmax", "layer_norm", "rms_norm", "sum", "mean", "max",
       "matmul", "bmm", "conv2d", "transpose", "cumsum", "argmax", "dropout", "embedding", "cross_entropy"]
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "xi", "ze", "pa", "sho", "qua", "bri", "dan", "el",
             "fu", "gor", "hin", "ix", "jet"]
TYPES = ["float", "double", "half", "int", "float4", "half2"]


class Gen:
    """Deterministic kernel text generator; every document depends only on (seed, index)."""

    def __init__(self, seed: int = 0):
        rng = random.Random(seed)
        self.words = sorted({"".join(rng.choices(SYLLABLES, k=rng.randint(2, 3))) for _ in range(4000)})
        self.word_set = set(self.words)

    def name(self, r: random.Random) -> str:
        return "_".join(r.choices(self.words, k=r.randint(1, 2)))

    def cuda(self, r) -> str:
        params = [self.name(r) for _ in range(r.randint(3, 5))]
        locs = [self.name(r) for _ in range(r.randint(4, 8))]
        ty = r.choice(TYPES)
        out = [f"// {self.name(r)} kernel for {r.choice(OPS)}; tuned for sm_{r.choice([70, 80, 90])}",
               "#include <cuda_runtime.h>", ""]
        out.append(f"__device__ __forceinline__ {ty} {self.name(r)}({ty} a, {ty} b) {{ return a "
                   f"{r.choice(['+', '*', '-'])} b; }}")
        sig = ", ".join(f"const {ty}* __restrict__ {p}" for p in params[:-1])
        out.append(f"__global__ void {self.name(r)}_kernel({sig}, {ty}* {params[-1]}, int n) {{")
        out.append(f"    int {locs[0]} = blockIdx.x * blockDim.x + threadIdx.x;")
        if r.random() < 0.5:
            out.append(f"    __shared__ {ty} {locs[1]}[{r.choice([128, 256, 512])}];")
        while sum(map(len, out)) < 1900:
            a, b, c = r.choices(locs, k=3)
            p, q = r.choices(params, k=2)
            k = r.randrange(8)
            out.append("    " + [
                f"{ty} {a} = {p}[{locs[0]} + {r.randint(1, 63)}] {r.choice(['+', '*', '-'])} {q}[{locs[0]}];",
                f"if ({locs[0]} < n) {{ {params[-1]}[{locs[0]}] = {b} * {c}; }}",
                f"for (int s = blockDim.x / 2; s > 0; s >>= 1) {{ if (threadIdx.x < s) {b} += {c}; __syncthreads(); }}",
                f"{a} = __shfl_xor_sync(0xffffffff, {a}, {r.choice([1, 2, 4, 8, 16])});",
                f"atomicAdd(&{params[-1]}[{r.randrange(32)}], {a});",
                f"{a} = fmaxf({b}, {c}) * {r.random():.4f}f; // {self.name(r)}",
                f"#pragma unroll\n    for (int {b}_i = 0; {b}_i < {r.randint(2, 15)}; ++{b}_i) {a} += {p}[{b}_i];",
                f"__syncthreads();",
            ][k])
        out.append("}")
        return "\n".join(out) + "\n"

    def triton(self, r) -> str:
        params = [self.name(r) + "_ptr" for _ in range(r.randint(2, 4))]
        locs = [self.name(r) for _ in range(r.randint(4, 8))]
        out = ["import triton", "import triton.language as tl", "", "", "@triton.jit",
               f"def {self.name(r)}_kernel({', '.join(params)}, n_elements, BLOCK: tl.constexpr):",
               f'    """{self.name(r)} for {r.choice(OPS)}."""',
               f"    {locs[0]} = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
               f"    mask = {locs[0]} < n_elements"]
        while sum(map(len, out)) < 1900:
            a, b, c = r.choices(locs, k=3)
            p = r.choice(params)
            k = r.randrange(7)
            out.append("    " + [
                f"{a} = tl.load({p} + {locs[0]}, mask=mask, other={r.randrange(4)}.0)",
                f"{a} = tl.where({b} > 0, {b}, {c} * {r.random():.3f})",
                f"{a} = tl.sum({b}, axis=0) + tl.max({c}, axis=0)",
                f"tl.store({p} + {locs[0]}, {a} {r.choice(['+', '*', '-'])} {b}, mask=mask)",
                f"{a} = tl.exp({b} - {c})  # {self.name(r)}",
                f"{a} = tl.dot({b}, {c}, allow_tf32={r.choice(['True', 'False'])})",
                f"{a} = {b}.to(tl.float32) * {r.randint(1, 99)}",
            ][k])
        return "\n".join(out) + "\n"

    def variant(self, text: str, language: str, r) -> str:
        """A planted near-duplicate: one or two of rename, reformat, re-comment, add a line."""
        lines = text.splitlines()
        for edit in r.sample(range(4), r.randint(1, 2)):
            if edit == 0:  # rename a few identifiers
                names = sorted({t for t in tokens(text, language)
                                if t.split("_")[0] in self.word_set and not is_kept_word(t)})
                for old in r.sample(names, min(len(names), 3)):
                    lines = [l.replace(old, old + "_v2") for l in lines]
            elif edit == 1:  # reformat
                lines = [l.replace(", ", ",").replace(" = ", "=") for l in lines]
            elif edit == 2:  # comments
                mark = "//" if language == "cuda" else "#"
                lines.insert(0, f"{mark} Copyright 2024 {self.name(r)} authors")
            else:  # add a line
                at = r.randrange(len(lines) // 2, len(lines))
                lines.insert(at, "    __syncthreads();" if language == "cuda" else "    tl.debug_barrier()")
        return "\n".join(lines) + "\n"


def make_docs(n: int, dup_rate: float = 0.15, seed: int = 0) -> tuple[list[Doc], int]:
    gen = Gen(seed)
    docs, planted = [], 0
    for i in range(n):
        r = random.Random(seed * 1_000_003 + i)
        if i > 10 and r.random() < dup_rate:
            src = docs[r.randrange(i)]
            text = gen.variant(src.text, src.language, r)
            lang, op = src.language, src.op
            planted += 1
        else:
            lang = "cuda" if r.random() < 0.6 else "triton"
            text = gen.cuda(r) if lang == "cuda" else gen.triton(r)
            op = r.choice(OPS)
        docs.append(Doc(id=f"doc{i:07d}", text=text, language=lang, op=op, validated=bool(r.random() < 0.8),
                        speedup=r.lognormvariate(0, 0.5), license="MIT", priority=r.randrange(3)))
    return docs, planted


def baseline_per_doc(docs: list[Doc], params: Params) -> float:
    """Seconds per document for plain datasketch MinHash.update, plain and abstract shingles."""
    from datasketch import MinHash

    t = time.perf_counter()
    for d in docs:
        toks = tokens(d.text, d.language)
        for seq in (toks, abstract_tokens(toks)):
            n = params.ngram_for(len(seq))
            m = MinHash(num_perm=params.num_perm, seed=params.seed)
            for s in {" ".join(seq[i:i + n]) for i in range(max(1, len(seq) - n + 1))}:
                m.update(s.encode())
    return (time.perf_counter() - t) / len(docs)


def peak_rss_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + kids) / 1024  # kilobytes on Linux


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scheme", default="oph", choices=["oph", "affine32"])
    ap.add_argument("--baseline-docs", type=int, default=200)
    args = ap.parse_args(argv)

    t = time.perf_counter()
    docs, planted = make_docs(args.n)
    mean_kb = sum(len(d.text) for d in docs) / len(docs) / 1024
    print(f"generated {len(docs)} docs (mean {mean_kb:.2f} KB, {planted} planted near-duplicates) "
          f"in {time.perf_counter() - t:.1f} s (not timed)", flush=True)
    params = Params(scheme=args.scheme)
    filters = F.configured()

    t0 = time.perf_counter()
    report = dedupe_docs(docs, params, filters, workers=args.workers)
    wall = time.perf_counter() - t0
    rss = peak_rss_mb()

    c = report["counts"]
    print(f"dedupe: {len(docs)} docs in {wall:.2f} s wall on {args.workers} workers -> {len(docs) / wall:,.0f} docs/s")
    print(f"  kept {c['ok']}, dropped {c['by_reason']}, clusters {report['clusters']['count']}, "
          f"links {report['links']}")
    print(f"  peak RSS (self + largest child) {rss:,.0f} MB")
    if args.baseline_docs <= 0:
        print("baseline: skipped (--baseline-docs 0)")
    else:
        per_doc = baseline_per_doc(docs[:args.baseline_docs], params)
        baseline = per_doc * len(docs) / args.workers
        print(f"baseline: datasketch MinHash.update per document, plain + abstract signatures: "
              f"{per_doc * 1e3:.2f} ms/doc measured on {args.baseline_docs} docs, extrapolated to "
              f"{len(docs)} docs on {args.workers} workers = {baseline:.0f} s (signatures only)")
        print(f"  speed-up over baseline: {baseline / wall:.0f}x")
    ok = wall <= 30 and rss <= 2048
    print("within budget (<= 30 s, <= 2 GB)" if ok else "OVER BUDGET (30 s, 2 GB)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
