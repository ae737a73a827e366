"""The dedupe stage: quality filters, decontamination, then exact and near dedup.

Order matters: a record dropped by a filter or as contaminated can never be a
cluster's representative. Every alive record gets one result: ok, or dropped
with the name of the first filter that drops it (see `sftbuild list filter`),
contaminated or duplicate. The config hash covers the near-dedup parameters
and every selected filter with its effective parameters, in run order. The
report goes to <workspace>/reports/dedupe.json.
"""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np

from sftbuild.context import Context, StageRun, UserError
from sftbuild.dedupe import filters as F
from sftbuild.dedupe import fingerprints
from sftbuild.dedupe.decontam import Decontaminator
from sftbuild.dedupe.near import Clusters, Doc, pool_mapper, find_clusters
from sftbuild.dedupe.params import Params
from sftbuild.dedupe.signature import Signatures, assemble, compute
from sftbuild.plugins import PluginError
from sftbuild.record import Record

LARGEST = 10  # clusters listed with their members' provenance in the report


def to_doc(record: Record, validation: dict | None) -> Doc:
    res = validation or {}
    payload = res.get("payload") or {}
    binding = record.binding or {}
    prov = record.provenance or {}
    speedup = payload.get("speedup")
    return Doc(
        id=record.id, text=record.code, language=record.language,
        op=binding.get("op"),
        validated=res.get("status") == "ok" and payload.get("validated", True) is not False,
        speedup=float(speedup) if isinstance(speedup, (int, float)) else None,
        license=prov.get("license"), priority=int(prov.get("priority", 0) or 0),
        source_kind=prov.get("source_kind", ""),
        reference=binding.get("reference") if isinstance(binding.get("reference"), str) else None,
        meta={"source": record.source, "name": record.name,
              **{k: prov.get(k) for k in ("source_kind", "url", "path", "lines", "license", "benchmark")
                 if k in prov}})


def run(ctx: Context, **options) -> dict:
    cfg = ctx.config.dedupe
    params = Params.from_config(cfg)
    try:
        filters = F.configured(cfg.filters)
    except PluginError as e:
        raise UserError(str(e)) from None
    records = ctx.store.alive("dedupe")
    ids = sorted(r.id for r in records)
    decon = decontaminator(ctx, cfg)
    config = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "filters"}
    manifest = {"params": params.manifest(), "config": config,
                # what the selection amounts to: the same filters spelled differently hash the same
                "filters": [[f.name, f.manifest()] for f in filters],
                "benchmarks": decon.manifest() if decon else None}
    report_path = ctx.workspace / "reports" / "dedupe.json"
    with StageRun(ctx, "dedupe", manifest, extra_key=ids) as run_:
        previous = json.loads(report_path.read_text()) if report_path.exists() else {}
        if ids and run_.done() >= set(ids) and previous.get("config_hash") == run_.chash:
            ctx.echo("dedupe: nothing changed since the last run")
            return previous
        validation = ctx.store.results_for("validate")
        docs = [to_doc(r, validation.get(r.id)) for r in records]
        docs.sort(key=lambda d: d.id)
        report = dedupe_docs(docs, params, filters, decon, mapper=ctx.executor.map_cpu,
                             put=run_.put)
        report["config_hash"] = run_.chash
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(report, indent=1, sort_keys=True))
        report["report_path"] = str(report_path)
        ctx.echo(f"dedupe: {report['counts']['ok']} kept of {report['counts']['input']}; "
                 f"dropped {report['counts']['dropped']}")
    return report


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
            ref = (r.binding or {}).get("reference")
            if bench in items and isinstance(ref, str) and (bench, ref) not in seen:
                seen.add((bench, ref))
                items[bench].append(((r.provenance or {}).get("path") or r.name or r.id, ref, "kernelbench"))
        paths += [fingerprints.from_items(v, cfg.contamination_ngram, n) for n, v in items.items() if v]
    try:
        return Decontaminator(paths, threshold=cfg.contamination_threshold, ngram=cfg.contamination_ngram,
                              max_df=cfg.contamination_max_df, named=names)
    except (ValueError, OSError) as e:
        raise UserError(f"dedupe.benchmarks: {e}") from None


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


def dedupe_docs(docs: list[Doc], params: Params, filters: list[F.Filter], decon: Decontaminator | None = None,
                workers: int = 1, mapper=None, put=None) -> dict:
    """The whole stage on plain documents; `put(id, status, reason, payload)` receives each verdict.

    Filters, decontamination and signatures run per chunk in parallel (`mapper`, e.g. an
    executor's map_cpu, or a pool of `workers`); clustering then runs on the survivors.
    """
    put = put or (lambda *a, **k: None)
    size = max(1, params.chunk_size)
    items = [(i, docs[lo:lo + size], params, filters, decon) for i, lo in enumerate(range(0, len(docs), size))]
    parts: dict[int, tuple] = {}
    for item, res in (mapper or pool_mapper(workers))(analyse_task, items, desc="dedupe: filter and hash"):
        parts[item[0]] = res if isinstance(res, tuple) else analyse_task(item)  # redo a failed chunk here
    del items
    drops = [d for i in range(len(parts)) for d in parts[i][0]]
    ordered = [(parts[i][1], np.array([d is None for d in parts[i][0]], bool)) for i in range(len(parts))]
    parts.clear()
    sigs = assemble(ordered, params.num_perm)  # the survivors' signatures only
    verdicts: dict[str, tuple] = {}
    survivors = []
    for d, drop in zip(docs, drops):
        if drop is None:
            survivors.append(d)
        else:
            verdicts[d.id] = ("dropped", drop[0], drop[1])
    clusters = find_clusters(survivors, params, sigs=sigs)
    del sigs
    for d in survivors:
        if d.id in clusters.dropped:
            verdicts[d.id] = ("dropped", "duplicate", clusters.dropped[d.id])
        else:
            verdicts[d.id] = ("ok", None, None)
    for d in docs:
        status, reason, payload = verdicts[d.id]
        put(d.id, status, reason, payload)
    return build_report(docs, verdicts, clusters)


def build_report(docs: list[Doc], verdicts: dict[str, tuple], clusters: Clusters) -> dict:
    by_id = {d.id: d for d in docs}
    reasons = Counter(v[1] for v in verdicts.values() if v[0] == "dropped")
    sizes = Counter(len(c) for c in clusters.clusters)
    kept = sum(1 for v in verdicts.values() if v[0] == "ok")
    largest = []
    for members in clusters.clusters[:LARGEST]:
        largest.append({"size": len(members), "representative": members[0], "members": [
            {"id": m, "representative": m == members[0], **by_id[m].meta,
             **({k: clusters.dropped[m][k] for k in ("similarity", "signature")} if m in clusters.dropped else {})}
            for m in members]})
    return {
        "counts": {"input": len(docs), "ok": kept, "dropped": sum(reasons.values()),
                   "by_reason": dict(sorted(reasons.items()))},
        "clusters": {"count": len(clusters.clusters), "in_clusters": sum(len(c) for c in clusters.clusters),
                     "size_histogram": {str(k): sizes[k] for k in sorted(sizes)}, "largest": largest},
        "links": clusters.pairs,
        "params": clusters.params,
    }
