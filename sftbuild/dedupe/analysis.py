"""What both dedupe modes share: records as documents, the configured filters and decontamination,
and the parallel pass that filters, decontaminates and signs documents.

`setup(ctx)` reads the dedupe config once (a bad filter name is a UserError); `analyse(docs, ...)`
returns each document's drop (None, or (reason, payload)), the survivors and their signatures.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterator

import numpy as np

from sftbuild.binding import Binding
from sftbuild.context import Context, UserError
from sftbuild.dedupe import filters as F
from sftbuild.dedupe import fingerprints, normalize
from sftbuild.dedupe.decontam import Decontaminator
from sftbuild.dedupe.near import Doc, pool_mapper
from sftbuild.dedupe.params import Params
from sftbuild.dedupe.signature import Signatures, assemble, compute
from sftbuild.plugins import PluginError
from sftbuild.record import Record

LARGEST = 10  # clusters listed with their members' provenance in the report
CHUNK_BYTES = 4 << 20  # code per analysis task


def to_doc(record: Record, validation: dict | None) -> Doc:
    res = validation or {}
    payload = res.get("payload") or {}
    binding = record.binding
    prov = record.provenance or {}
    speedup = payload.get("speedup")
    evidence = binding.evidence if binding else {}
    return Doc(
        id=record.id, text=record.code, language=record.language,
        op=(binding.op or computation(record, binding)) if binding else None,
        validated=res.get("status") == "ok" and payload.get("validated", True) is not False,
        speedup=float(speedup) if isinstance(speedup, (int, float)) else None,
        license=prov.get("license"), priority=int(prov.get("priority", 0) or 0),
        source_kind=prov.get("source_kind", ""),
        reference=binding.reference if binding and isinstance(binding.reference, str) else None,
        meta={"source": record.source, "name": record.name,
              **{k: prov.get(k) for k in ("source_kind", "url", "path", "lines", "license", "benchmark")
                 if k in prov}},
        how=binding.how if binding else None,
        evidence=sum(len(v) for k in ("shapes", "dtypes") if isinstance(v := evidence.get(k), list)))


def computation(record: Record, binding: Binding) -> str | None:
    """What an op-less binding computes, so that abstract links join only records of one computation:
    an Inductor kernel by the ATen ops it fuses, a program pair by its program. (Inductor's pointwise
    kernels share most of their text: by text alone a roll, a stack and an unpool would be one.)"""
    if binding.kind == "inductor":
        aten = (record.entry or {}).get("aten") or []
        return "inductor:" + "+".join(sorted(aten)) if aten else None
    return f"program:{binding.program}" if binding.program else None


@dataclasses.dataclass
class Setup:
    """What both modes run with: near-dedup parameters, filters, decontamination, and their manifest."""

    params: Params
    filters: list
    decon: Decontaminator | None
    manifest: dict


def setup(ctx: Context) -> Setup:
    cfg = ctx.config.dedupe
    params = Params.from_config(cfg)
    try:
        filters = F.configured(cfg.filters)
    except PluginError as e:
        raise UserError(str(e)) from None
    decon = decontaminator(ctx, cfg)
    # before_validation decides whether dedupe runs before validation, never what it finds
    config = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("filters", "before_validation")}
    manifest = {"params": params.manifest(), "config": config, "normalize": normalize.VERSION,
                # what the selection amounts to: the same filters spelled differently hash the same
                "filters": [[f.name, f.manifest()] for f in filters],
                "benchmarks": decon.manifest() if decon else None}
    return Setup(params, filters, decon, manifest)


BENCHMARK_FILES = (".py", ".cu", ".cuh", ".npz", ".jsonl", ".json", ".parquet", ".csv")


def is_benchmark_name(entry: str) -> bool:
    """A `dedupe.benchmarks` entry that names a benchmark rather than a path to its files."""
    return not Path(entry).exists() and "/" not in entry and "\\" not in entry \
        and not entry.endswith(BENCHMARK_FILES)


def decontaminator(ctx: Context, cfg) -> Decontaminator | None:
    """What `dedupe.benchmarks` names: paths are read as benchmark files; a name drops the records of
    that benchmark (provenance) and, by code match, records whose program is one of its programs
    (the references of the records harvested for it, e.g. `inductor:DIR?benchmark=NAME`)."""
    if not cfg.benchmarks:
        return None
    names = [b for b in cfg.benchmarks if is_benchmark_name(b)]
    paths: list = [b for b in cfg.benchmarks if b not in names]
    for b in paths:
        if not Path(b).exists():
            raise UserError(f"dedupe.benchmarks: {b} does not exist (a benchmark is a folder, file or "
                            f"fingerprint file, or the name of a benchmark whose programs were harvested)")
    if names:
        items: dict[str, list] = {n: [] for n in names}
        seen = set()
        for r in ctx.store.records():
            bench = (r.provenance or {}).get("benchmark")
            ref = r.binding.reference if r.binding else None
            if bench in items and isinstance(ref, str) and (bench, ref) not in seen:
                seen.add((bench, ref))
                items[bench].append(((r.provenance or {}).get("path") or r.name or r.id, ref, "kernelbench"))
        paths += [fingerprints.from_items(v, cfg.contamination_ngram, n) for n, v in items.items() if v]
    try:
        return Decontaminator(paths, threshold=cfg.contamination_threshold, ngram=cfg.contamination_ngram,
                              max_df=cfg.contamination_max_df, named=names)
    except (ValueError, OSError) as e:  # a missing or unreadable benchmark: one sentence, not a traceback
        raise UserError(f"dedupe.benchmarks: {e}") from None


def chunks(docs: list[Doc], size: int, max_bytes: int = CHUNK_BYTES) -> Iterator[list[Doc]]:
    """Consecutive runs of at most `size` documents and about `max_bytes` of code: what one task holds
    (its documents pickled, their tokens) stays small whatever the records' size, and progress moves."""
    out: list[Doc] = []
    held = 0
    for d in docs:
        if out and (len(out) >= max(1, size) or held + len(d.text) > max_bytes):
            yield out
            out, held = [], 0
        out.append(d)
        held += len(d.text)
    if out:
        yield out


def analyse_task(item: tuple) -> tuple[list, Signatures]:
    """One chunk of documents: filter and decontamination verdicts, and signatures of all of them."""
    _, docs, params, filters, decon = item
    drops = []
    for d in docs:
        drop = F.apply(filters, d)
        if drop is None and decon is not None:
            m = decon.match(d)
            if m is not None:
                drop = ("contaminated", dataclasses.asdict(m))
        drops.append(drop)
    sigs = compute([d.text for d in docs], [d.language for d in docs], params, [d.tokens for d in docs])
    for d in docs:
        d.__dict__.pop("tokens", None)  # token lists are large; run in-process they would all stay alive
    return drops, sigs


def analyse(docs: list[Doc], params: Params, filters: list[F.Filter], decon: Decontaminator | None = None,
            workers: int = 1, mapper=None, every: bool = False) -> tuple[list, list[Doc], Signatures]:
    """Each document's drop (None, or (reason, payload)), the survivors, and the survivors' signatures
    (with `every`: all documents and their signatures, dropped or not).

    Filters, decontamination and signatures run per chunk in parallel (`mapper`, e.g. an
    executor's map_cpu, or a pool of `workers`).
    """
    items = [(i, chunk, params, filters, decon) for i, chunk in enumerate(chunks(docs, params.chunk_size))]
    parts: dict[int, tuple] = {}
    desc = f"dedupe: filter and hash {len(docs)} records, in parts"
    for item, res in (mapper or pool_mapper(workers))(analyse_task, items, desc=desc):
        parts[item[0]] = res if isinstance(res, tuple) else analyse_task(item)  # redo a failed chunk here
    for item in items:  # a chunk the mapper never answered for: here too
        if item[0] not in parts:
            parts[item[0]] = analyse_task(item)
    del items
    drops = [d for i in range(len(parts)) for d in parts[i][0]]
    ordered = [(parts[i][1], np.array([every or d is None for d in parts[i][0]], bool)) for i in range(len(parts))]
    parts.clear()
    sigs = assemble(ordered, params.num_perm)  # the survivors' signatures only, unless every
    return drops, [d for d, drop in zip(docs, drops) if every or drop is None], sigs
