"""Instructions from the template bank, and the fidelity check that reads their claims back.

Templates: `<lang>_task.j2` states the task by record kind (an op with its shapes, dtypes and
layouts; a program, KernelBench pair or Inductor kernel, with its reference program quoted; an
unbound kernel, whose computation is not stated); `<lang>_brief.j2` is the task, `<lang>_detailed.j2`
adds the hardware and correctness constraints; `program.j2` appends the reference program.

The rendered text names techniques with each describer's `phrase`; `claims` parses a text
back into the facts it asserts (techniques, dtypes, target arch, block size) with patterns
of its own (each describer's `claim`), so a template or phrase that over-claims is caught
rather than trusted.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import jinja2

from sftbuild.describe.describers import DESCRIBERS

TEMPLATES = Path(__file__).with_name("templates")
LEVELS = ("brief", "detailed")

STRATEGY = {  # reduction strategy: (en, zh); each names the technique it relies on
    "warp_shuffle": ("Reduce within each warp using warp shuffles.", "在warp内用warp shuffle指令归约。"),
    "shared_memory_tree": ("Reduce across the block with a tree in shared memory.", "在block内用共享内存做树形归约。"),
    "cub": ("Reduce with CUB block primitives.", "用CUB块级原语归约。"),
    "atomic": ("Combine partial results with atomic operations.", "用原子操作合并部分结果。"),
    "tl_reduce": ("Reduce with Triton's built-in reductions.", "用Triton内置归约。"),
}
FENCED = re.compile(r"```.*?```", re.S)
BUDGET = re.compile(r"(per-block shared-memory budget of|共享内存预算为)\s*\d+")
NOUNS = {  # op family: (en, zh)
    "elementwise": ("elementwise kernel", "逐元素Kernel"), "binary": ("elementwise binary kernel", "逐元素二元Kernel"),
    "broadcast": ("broadcast kernel", "广播Kernel"), "fused": ("fused kernel", "融合Kernel"),
    "reduction": ("reduction kernel", "归约Kernel"), "softmax": ("softmax kernel", "softmax Kernel"),
    "norm": ("normalisation kernel", "归一化Kernel"), "matmul": ("matrix-multiply kernel", "矩阵乘Kernel"),
    "attention": ("attention kernel", "注意力Kernel"), "conv": ("convolution-support kernel", "卷积辅助Kernel"),
    "scan": ("scan kernel", "扫描Kernel"), "sort": ("sorting kernel", "排序Kernel"),
    "layout": ("layout-transform kernel", "布局变换Kernel"), "indexing": ("indexing kernel", "索引Kernel"),
    "loss": ("loss kernel", "损失函数Kernel"), "optimizer": ("optimiser-step kernel", "优化器更新Kernel"),
    "resample": ("resampling kernel", "重采样Kernel"), "quant": ("quantisation kernel", "量化Kernel"),
}
GENERIC_NOUN = ("kernel", "Kernel")
INDUCTOR_KINDS = {  # Inductor's kernel-name prefix triton_<kind>_fused_...: (en, zh)
    "poi": ("pointwise", "逐点"), "red": ("reduction", "归约"), "per": ("persistent-reduction", "持久化归约"),
    "tem": ("template", "模板"),
}


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             trim_blocks=False)
    env.filters["phrase"] = lambda key, lang: DESCRIBERS.get(key).phrase[lang]
    env.filters["wrap"] = lambda text: f"`{text}`"
    env.filters["strategy"] = lambda key, lang: STRATEGY[key][0 if lang == "en" else 1]
    return env


ENV = _env()


def variant(record_id: str, seed: int, count: int = 6) -> int:
    """The phrasing for a record: fixed by the record and the seed, shared by both languages."""
    return int(hashlib.sha256(f"{seed}:{record_id}".encode()).hexdigest(), 16) % count


def render(facts: dict, lang: str, level: str) -> str:
    text = ENV.get_template(f"{lang}_{level}.j2").render(**facts, lang=lang)
    return re.sub(r"[ \t]+\n", "\n", text).strip()


def claims(text: str) -> dict:
    """The facts a rendered instruction asserts, read back from its words."""
    plain = FENCED.sub(" ", text)  # a quoted reference program is not a claim about the kernel
    plain = re.sub(r"`[^`]*`", " ", plain)  # names and signatures in backticks are not claims
    plain = BUDGET.sub(" ", plain)
    techs = {d.name for d in DESCRIBERS if d.claim and re.search(d.claim, plain, re.IGNORECASE)}
    block = re.search(r"(\d+) threads per block|启动(\d+)个线程", plain)
    return {"techniques": sorted(techs),
            "dtypes": sorted(set(re.findall(r"(?<![\w.])(float32|float16|bfloat16)(?![0-9])", _dtype_clause(plain), re.ASCII))),
            "arch": sorted(set(re.findall(r"(?<![A-Za-z0-9_])(sm_\d+a?)(?![0-9])", plain))),
            "block_size": next((int(g) for g in (block.groups() if block else ()) if g), None)}


def _dtype_clause(text: str) -> str:
    m = re.search(r"(dtype: |dtype为)([^.。]*)", text)
    return m.group(2) if m else ""


def check(instructions: dict, features: dict) -> list[str]:
    """Disagreements between the instructions and the features (empty when faithful)."""
    problems = []
    have = set(features.get("techniques", []))
    seen = {}
    for key, text in instructions.items():
        c = claims(text)
        over = set(c["techniques"]) - have
        if over:
            problems.append(f"{key} claims {sorted(over)} the code does not show")
        if features.get("dtypes") and set(c["dtypes"]) - set(features["dtypes"]):
            problems.append(f"{key} claims dtypes {c['dtypes']} beyond {features['dtypes']}")
        if c["block_size"] is not None and c["block_size"] != features.get("block_size"):
            problems.append(f"{key} claims {c['block_size']} threads per block")
        seen.setdefault(key.split(":")[1], {})[key.split(":")[0]] = c
    for level, by_lang in seen.items():
        facts = list(by_lang.values())
        if any(f != facts[0] for f in facts[1:]):
            problems.append(f"{level}: the languages disagree: {by_lang}")
    return problems
