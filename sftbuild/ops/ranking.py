"""Rank op names for a kernel or entry point by its name and parameters (for binders that probe).

Names are tokenised (snake and camel case, leading underscores dropped), compounds are split
(`rmsnorm` -> rms norm), abbreviations expanded (`ce` -> cross entropy, `attn` -> attention) and
words that say nothing about the computation dropped (`kernel`, `fwd`, `forward`, `triton`,
`fused`, ...). An op scores by the token overlap of the names, whole-name agreement, how close
the parameter count is to the op's tensor count and how many parameter names match its I/O and
parameter names. Ties break by name, so the order is deterministic. The ranking only orders
candidates: probing decides.
"""
from __future__ import annotations

import re

from sftbuild.ops import Op, all_ops

NOISE = {"kernel", "kernels", "fwd", "forward", "triton", "cuda", "impl", "fn", "func", "function", "op", "ops",
         "launch", "launcher", "naive", "ref", "reference", "torch", "fused", "opdb", "nn", "functional", "aten",
         "default", "special", "compute", "run", "apply", "wrapper", "tl", "jit", "and", "v1", "v2", "v3", "the", "pkg"}
COMPOUNDS = {"rmsnorm": "rms norm", "layernorm": "layer norm", "groupnorm": "group norm", "batchnorm": "batch norm",
             "logsoftmax": "log softmax", "crossentropy": "cross entropy", "kldiv": "kl div", "logsumexp": "logsumexp",
             "silumul": "silu mul", "geglu": "geglu gelu glu mul", "swiglu": "swiglu silu glu mul", "addrmsnorm": "add rms norm",
             "flashattn": "attention", "flashattention": "attention", "selfattention": "attention",
             "matmul": "matmul", "rotaryemb": "rope"}
SYNONYMS = {"ce": "cross entropy", "xent": "cross entropy", "ln": "layer norm", "attn": "attention",
            "sdpa": "attention", "rotary": "rope", "mm": "matmul", "gemm": "matmul", "lse": "logsumexp",
            "bwd": "backward", "grad": "backward", "kl": "kl", "kld": "kl div", "rmsnorm": "rms norm",
            "lin": "linear", "mul": "mul", "swish": "silu", "embedding": "embedding", "emb": "embedding", "varlen": "varlen", "temp": "temperature", "temperature": "temperature",
            "tvd": "tv distance", "mrope": "mrope rope"}
ACRONYMS = re.compile(r"MoE")  # camel-case acronyms kept whole: LigerFusedMoEFunction -> moe, not "mo e"
NOT_TENSORS = re.compile(r"^(eps|epsilon|dim|axis|n|m|k|stride\w*|\w*_stride\w*|\w*stride|block\w*|num_\w+|n_\w+|"
                         r"\w+_size|size|\w+_dim|scale|beta|alpha|temperature|ignore_index|label_smoothing|"
                         r"reduction|causal|offset|seed|[A-Z]+(_\w+)?)$")


def tokens(name: str) -> list[str]:
    """The meaningful lowercase words of a kernel, function or op name."""
    name = ACRONYMS.sub(lambda m: m[0].capitalize(), name.lstrip("_"))
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name))  # MHCPre: mhc pre
    out: list[str] = []
    for word in re.split(r"[^A-Za-z0-9]+", name.lower()):
        if not word or word.isdigit() or word in NOISE:
            continue
        word = COMPOUNDS.get(word) or SYNONYMS.get(word) or word
        out += [w for w in word.split() if w not in NOISE]
    return out


def _io_names(op: Op) -> set[str]:
    names = {s.split(":")[0].strip().lower() for s in op.io.get("inputs", []) + op.io.get("outputs", [])}
    return {re.sub(r"\[.*", "", n) for n in names} | {k.lower() for k in op.params}


def name_score(name: str, other: str) -> float:
    """How well two names agree: token overlap, plus whole-name and containment agreement."""
    q, o = set(tokens(name)), set(tokens(other))
    if not q or not (q & o):
        return 0.0
    return len(q & o) / len(q | o) + (0.5 if q == o else 0.0) + (0.2 if o <= q else 0.0)


def _tensor_params(params: list[str]) -> list[str]:
    return [p for p in params if not NOT_TENSORS.match(p.strip().lstrip("*"))]


def score(name: str, params: list[str], op: Op) -> float:
    s = name_score(name, op.name)
    if not s:
        return 0.0
    if params:
        tensors = _tensor_params(params)
        ni, no = len(op.io.get("inputs", [])), len(op.io.get("outputs", []))
        s += 0.3 / (1 + min(abs(len(tensors) - ni), abs(len(tensors) - ni - no)))
        names = {p.strip().lstrip("*").lower().removesuffix("_ptr") for p in params}
        s += 0.1 * len(names & _io_names(op))
    if not op.name.startswith(("opdb.", "pkg.")):
        s += 0.05  # hand-written ops win over op_db ones that compute the same
    return s


def shortlist(name: str, params: list[str] | None = None, k: int = 8, opdb: bool | None = None,
              extra: dict[str, list[str]] | None = None) -> list[str]:
    """The k op names that best fit a kernel or entry named `name` with parameter names `params`.
    op_db ops are ranked too when `opdb` is true, or when it is None and they are already loaded.
    `extra` adds candidates that are not ops yet, {name: parameter names} (package references found
    by `find_package_references`, say), ranked by name and tensor-parameter count."""
    from sftbuild.ops import opdb as db

    params = list(params or [])
    pool = all_ops(opdb=db._loaded if opdb is None else opdb)
    scored = [(score(name, params, op), n) for n, op in pool.items()]
    for n, ps in (extra or {}).items():
        s = name_score(name, n.rsplit(".", 1)[-1])  # the function's own name, not its module path
        if s and params:
            s += 0.3 / (1 + abs(len(_tensor_params(params)) - len(_tensor_params(list(ps)))))
        scored.append((s, n))
    return [n for s, n in sorted((x for x in scored if x[0] > 0), key=lambda x: (-x[0], x[1]))[:k]]
