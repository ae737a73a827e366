"""The describe stage: read static features, render instructions, check them.

Per record: features come from the parse tree through the configured describers; the
instruction text comes from the seeded template bank in both languages and both detail
levels, naming the op of the record's binding (set by harvest or the bind stage); a record
whose text claims what its features do not show is dropped as `description_mismatch`.
Results are keyed on the binding: a record whose binding changes is described again.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import yaml

from sftbuild import ops
from sftbuild.binding import Binding, key_of
from sftbuild.ops import fits
from sftbuild.ops import launch as ops_launch
from sftbuild.context import Context, StageRun
from sftbuild.describe import features as F
from sftbuild.describe import text as T
from sftbuild.describe import writes as W
from sftbuild.describe.describers import DESCRIBERS
from sftbuild.ops.programs import declared_dtypes


def run(ctx: Context) -> dict:
    cfg = ctx.config.describe
    vcfg = ctx.config.validate
    describers = DESCRIBERS.configured(cfg.describers, "describe.describers")
    conf = {"seed": cfg.seed, "languages": list(cfg.languages), "levels": list(cfg.levels), "arch": vcfg.arch,
            "smem_budget": vcfg.shared_memory_budget}
    if cfg.describers:  # only a non-default selection enters the key
        conf.update(describers=cfg.describers)
    # its templates key it too (sftbuild.stages: `reads`); binding changes redo it through the binding key
    with StageRun(ctx, "describe", conf) as run:
        done = run.done()
        for rec in ctx.store.alive("describe"):
            if rec.id in done:
                continue
            status, reason, payload = describe(rec, conf, describers)
            run.put(rec.id, status, reason, payload, binding_key=key_of(rec.binding))
    return run.stats


def describe(rec, conf: dict, describers=None) -> tuple[str, str | None, dict]:
    """(status, drop reason, payload) for one record; `describers` default to every registered one."""
    feats = F.extract(rec, describers)
    facts = _facts(rec, feats, conf)
    instructions = {f"{lang}:{level}": T.render(facts, lang, level)
                    for lang in conf["languages"] for level in conf["levels"]}
    problems = T.check(instructions, feats)
    payload = {"features": feats, "instructions": instructions}
    if problems:
        return "dropped", "description_mismatch", {**payload, "problems": problems}
    return "ok", None, payload


def _facts(rec, feats: dict, conf: dict) -> dict:
    """What the templates state: the task by kind (op, program or unbound), the kernel's
    parameters with the ones it writes (from the code), and the static features."""
    binding = rec.binding
    op = _op(binding.op if binding else None)
    backend = rec.entry.get("backend") if rec.language == "kernelbench" else rec.language
    params = rec.entry.get("params") or (W.function_params(rec.code, rec.name) or [] if rec.language == "triton" else [])
    reads, writes = W.roles(rec.language, rec.code, rec.name, params)
    facts = {
        "variant": T.variant(rec.id, conf["seed"]),
        "lang_name": {"triton": "Triton", "cuda": "CUDA"}.get(backend, "GPU"),
        "noun": {"en": T.GENERIC_NOUN[0], "zh": T.GENERIC_NOUN[1]},
        "reads": [f"`{n}`" for n in reads], "writes": [f"`{n}`" for n in writes],
        "dtypes": feats["dtypes"],
        "techniques": feats["techniques"],
        "reduction": feats["reduction"],
        "accumulate": feats["accumulate_type"],
        "templated": feats["templated"],
        "block_size": feats["block_size"],
        "arch": conf["arch"], "smem_budget": conf["smem_budget"],
        "signature": f"{rec.name}({', '.join(_param_name(p) for p in params)})",
    }
    if binding and binding.kind in ("kernelbench", "inductor") and binding.reference:
        # Inductor names a kernel after its kind and the ops it fuses: triton_poi_fused_add_relu_0
        fused = re.match(r"triton_(poi|red|per|tem)_fused_(.+?)(?:_\d+)?$", rec.name)
        kind_words = T.INDUCTOR_KINDS[fused.group(1)] if fused else ("Triton", "")
        facts.update(kind="program", flavor=binding.kind, reference=binding.reference.strip(),
                     dtypes=list(binding.dtypes) or declared_dtypes(binding.reference),
                     layouts=binding.layouts or ["contiguous", "transposed", "sliced"],
                     fused=fused.group(2) if fused else "", fused_kind=kind_words[0], fused_kind_zh=kind_words[1])
        if binding.kind == "kernelbench":
            facts["signature"] = "ModelNew"
            if "sizes" in binding.launch:  # generated pairs: only the sizes the solution takes as arguments vary
                facts["sizes"] = [f"`{n}`" for n in binding.sizes or []]
        else:  # an Inductor kernel: the ATen ops it fuses and how its program's host code launches it
            facts["aten"] = [f"`{a}`" for a in rec.entry.get("aten") or []]
            site = next(iter(rec.entry.get("launch_sites") or []), {}).get("text", "")
            facts["launch"] = re.sub(r",\s*stream=\w+\)$", ")", site)
    elif binding and binding.how == "file_reference":
        ref = (binding.harness_args or {}).get("ref") or {}
        facts.update(kind="program", flavor="cpu_reference", reference=(ref.get("cpu_code") or "").strip(),
                     fence="cpp", cpu=ref.get("cpu", ""), launcher=ref.get("launcher", ""),
                     same_args=all("cpu" in m for m in ref.get("launcher_map") or []) and
                     len(ref.get("launcher_map") or ref.get("cpu_params") or []) >= len(ref.get("cpu_params") or []),
                     dtypes=list(binding.dtypes) or ["float32"], layouts=["contiguous"],
                     compared=_compared(ref),
                     others=[f"`{k}`" for k in rec.entry.get("kernels") or [] if k != rec.name])
    elif op:
        noun = T.NOUNS.get(op.family, T.GENERIC_NOUN)
        allowed = binding.dtypes or op.dtypes
        dtypes = [d for d in op.dtypes if d in allowed and (not feats["dtypes"] or d in feats["dtypes"])]
        # CUDA harnesses launch on contiguous tensors; Triton wrappers get the op's layouts
        layouts = list(op.layouts) if rec.language == "triton" else ["contiguous"]
        semantics, outputs = op.semantics, [f"`{s}`" for s in op.io["outputs"]]
        contract = (binding.call or {}).get("contract")
        outputs, outputs_zh = _with_contract(outputs, contract), _with_contract(outputs, contract, "zh")
        if (binding.call or {}).get("grad"):  # a backward kernel, checked through its Function's gradients
            semantics = {"en": "the backward pass (a torch.autograd.Function's forward and backward, returning "
                               "the outputs and the gradient of each floating-point input) of " + op.semantics["en"],
                         "zh": "反向传播（torch.autograd.Function的前向与反向，返回输出及每个浮点输入的梯度）："
                               + op.semantics["zh"]}
        facts.update(kind="op", op=op.name, semantics=semantics, noun={"en": noun[0], "zh": noun[1]},
                     inputs=[f"`{s}`" for s in op.io["inputs"]], outputs=outputs, outputs_zh=outputs_zh,
                     shapes=_shapes(op.shape_pool, {**_harness_limits(binding.harness), **binding.constraints}),
                     dtypes=dtypes or feats["dtypes"], layouts=layouts, roles=_roles(op, params, binding),
                     launcher=_launcher(rec, binding) if rec.language == "triton" else "")
    else:
        facts.update(kind="unbound")
    return facts


def _compared(ref: dict) -> list[str]:
    """The arrays a CPU-reference task compares, by the names the CPU function shown in the task gives
    its parameters (llm.c's `losses`), not by the names of main()'s variables passed to it (`out`)."""
    params = [p.get("name") if isinstance(p, dict) else p for p in ref.get("cpu_params") or []]
    args = ref.get("call_args") or []
    names = [params[i] if i < len(params) and params[i] else (args[i] if i < len(args) else None)
             for i in ref.get("compare") or []]
    return [f"`{n}`" for n in names if n]


def _with_contract(outputs: list, contract: list | None, lang: str = "en") -> list:
    """The outputs as the op states them, each followed by the probed entry's own dtype or memory
    layout where its binding records one (sftbuild.bind.probe.output_contract): validation holds a
    solution to that, so the task says it, in `lang` ("en" or "zh")."""
    out = list(outputs)
    for j, rule in enumerate(contract or []):
        if not rule or j >= len(out):
            continue
        said = []
        if rule.get("dtype"):
            said.append(({"en": "in the inputs' dtype", "zh": "dtype与输入相同"} if rule["dtype"] == "input" else
                         {"en": f"as {rule['dtype']}", "zh": f"dtype为{rule['dtype']}"})[lang])
        if rule.get("order"):
            order = tuple(rule["order"])
            said.append({"en": f"laid out in memory in dimension order {order} (outermost first), "
                               "a permuted view of a dense buffer",
                         "zh": f"内存中按维度顺序{order}排列（最外层在前），即稠密缓冲区的置换视图"}[lang])
        out[j] = (f"{out[j]} (returned {', '.join(said)})" if lang == "en" else f"{out[j]}（返回时{'，'.join(said)}）")
    return out


def _launcher(rec, binding: Binding | None = None) -> str:
    """`name(args)` of the Python function in the record that launches its kernel (what validation
    calls with the op's inputs), or "" when the record holds none. A probed binding names the entry
    point the probe confirmed (`call.entry`), which comes first."""
    call = (binding.call if binding else None) or {}
    if call.get("entry"):
        entry = next((e for e in rec.entry.get("entry_points") or [] if e["qualname"] == call["entry"]), None)
        if entry is not None:
            args = [p["name"] for p in entry["params"] if p["kind"] in ("pos", "kwonly")]
            return f"{call['entry']}({', '.join(args)})"
    names = [rec.entry.get("wrapper")] + [site.get("function") for site in rec.entry.get("launch_sites") or []] \
        + [W.launcher(rec.code)]
    for name in filter(None, names):
        args = W.function_params(rec.code, name)
        if args is not None:
            return f"{name}({', '.join(args)})"
    return ""


def _roles(op, params: list[str], binding: Binding) -> list[tuple[str, str]]:
    """(kernel parameter, op role) pairs where the binding maps parameters onto the op's launch
    contract (`generic_launch`: "ptr:i" is the i-th of outputs then inputs, "int:i" the contract's
    i-th size, named in its docstring as `ints = [...]`)."""
    args = (binding.harness_args or {}).get("args") or []
    if binding.harness != "generic_launch" or len(args) != len(params):
        return []
    tensors = [t.split(":")[0].strip() for t in op.io["outputs"] + op.io["inputs"]]
    m = re.search(r"ints = \[([^\]]*)\]", ops_launch.CONTRACTS[op.launch].__doc__ or "")
    sizes = [x.strip() for x in m.group(1).split(",")] if m else []
    out = []
    for param, arg in zip(params, args):
        kind, _, i = arg.partition(":")
        names = tensors if kind == "ptr" else sizes
        if i.isdigit() and int(i) < len(names):
            out.append((W.param_name(param), names[int(i)]))
    return out


def _harness_limits(name: str | None) -> dict:
    """The `limits:` a CUDA harness template declares in its header (shapes its launch logic cannot
    serve), read as text: describe runs before validate and does not import it."""
    path = Path(__file__).parents[1] / "validate" / "templates" / f"{name}.cu.j2"
    if not name or not path.is_file():
        return {}
    m = re.search(r"^limits:([^#\n]*)", path.read_text(encoding="utf-8")[:2000], re.M)
    return (yaml.safe_load(m.group(1)) or {}) if m else {}


def _shapes(pool, cons: dict, most: int = 6) -> list[str]:
    """Up to `most` shapes of the pool that the size limits allow, small to large."""
    ok = sorted((s for s in pool if fits(s, cons)), key=math.prod)
    if len(ok) > most:
        step = (len(ok) - 1) / (most - 1)
        ok = [ok[round(i * step)] for i in range(most)]
    return ["(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")" for s in ok]


def _op(name):
    if not name:
        return None
    try:
        return ops.get(name)
    except KeyError:
        return None


_param_name = W.param_name
