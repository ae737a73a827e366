"""Dedupe before validation: clusters of near-identical records, so the GPU checks one of each first.

`run(ctx)` clusters the records validate is about to check (those that passed harvest, bind and
describe) with the same filters, decontamination, normalisation and MinHash LSH as the dedupe
stage, and stores the clusters (`Store.set_clusters`): each member's cluster, its rank in
`validation_order` (kept by dedupe's filters, then validated ok, bound before unbound, the stronger
binding, the richer evidence, source priority, a known licence, the shorter code) and the link it
joined by. It drops nothing and
writes no stage result. Validate reads the clusters (sftbuild.validate.clusters): it checks
rank 0 of each cluster, and the next member only when every member before it was dropped (after
two drops, the next 2, 4, ... together); the others wait as `waiting:duplicate`.

Links are those of dedupe after validation (exact, plain, and abstract within one op), so a
held-back record is one that dedupe would drop as a duplicate of the record it stands behind had
both passed: the GPU time goes to records the dataset can keep. A record that a filter or
decontamination will drop after validation (a licence outside the policy, too simple, ...) is
clustered too but ranked after every member that will be kept, so it never stands for one of them,
and a cluster of such records costs one check, not one each.

Clustering is skipped when neither the records (with their bindings and licences) nor the dedupe config
changed since the stored clusters; `dedupe.before_validation: false` turns it off (no clusters:
validate checks every record). `sftbuild validate` and `sftbuild run` call `run` before
validating; `sftbuild dedupe` calls it while no record has passed validation. The report goes
to <workspace>/reports/clusters.json.
"""
from __future__ import annotations

import json
import time
from collections import Counter

from sftbuild.context import Context, environment
from sftbuild.dedupe.analysis import LARGEST, analyse, setup, to_doc
from sftbuild.dedupe.near import Doc, find_clusters, validation_order
from sftbuild.record import config_hash

MODE = "before validation"
OFF = "off"  # the clusters hash while clustering before validation is turned off
ORDER = ("kept by dedupe's filters and decontamination, validated ok, bound, binding how (exact, declared, "
         "probed, package_reference, file_reference, inferred), binding evidence (shapes and dtypes), "
         "source priority, known licence, fewer tokens, id")


def run(ctx: Context, said: bool = False) -> dict:
    """`said`: this command already printed the summary of these clusters (see dedupe.stage.run)."""
    records = ctx.store.alive("validate")
    if not records:  # the caller says why a stage has nothing to do
        return {}
    if not ctx.config.dedupe.before_validation:
        if ctx.store.clusters_hash() != OFF:
            ctx.store.set_clusters(OFF, [])  # validate then checks every record
        ctx.echo(f"dedupe ({MODE}): off (dedupe.before_validation: false): validate checks every record")
        return {"mode": MODE, "off": True}
    s = setup(ctx)
    docs = [to_doc(r, None) for r in records]
    docs.sort(key=lambda d: d.id)
    chash = config_hash({"mode": MODE, "order": ORDER, "manifest": s.manifest,
                         "records": [[d.id, d.op, d.how, d.evidence, d.license] for d in docs]})
    report_path = ctx.workspace / "reports" / "clusters.json"
    if ctx.store.clusters_hash() == chash and report_path.exists():
        report = {**json.loads(report_path.read_text()), "report_path": str(report_path)}
        report.pop("order", None)
        ctx.echo(f"dedupe ({MODE}): the clusters above stand" if said else
                 f"dedupe ({MODE}): nothing changed since the last run; {_summary(report)}")
        return report
    run_id = ctx.store.start_run("dedupe", chash, {"mode": MODE, **s.manifest}, environment())
    ctx.echo(f"dedupe ({MODE}): clustering {len(docs)} records "
             f"({sum(len(d.text) for d in docs) / 2**20:.0f} MB of code) before validating them ...")
    del records  # the documents share the code; what is left of each record goes
    started = time.perf_counter()
    drops, _, sigs = analyse(docs, s.params, s.filters, s.decon, mapper=ctx.executor.map_cpu, every=True)
    for d in docs:
        d.text = ""  # hashed: from here on only the ranking needs the documents
    for d, drop in zip(docs, drops):
        d.filtered = drop[0] if drop else None
    clusters = find_clusters(docs, s.params, sigs=sigs, rank=validation_order)
    del sigs
    by_id = {d.id: d for d in docs}
    rows, ordered = [], []
    for members in clusters.clusters:
        ranked = sorted(members, key=lambda m: validation_order(by_id[m]))
        ordered.append(ranked)
        for rank, m in enumerate(ranked):
            rows.append((m, ranked[0], rank, clusters.dropped.get(m, {})))
    ctx.store.set_clusters(chash, rows)
    report = build_report(docs, ordered, by_id, clusters.pairs, clusters.params)
    report["config_hash"] = chash
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps({**report, "order": ORDER}, indent=1, sort_keys=True))
    report["report_path"] = str(report_path)
    seconds = time.perf_counter() - started
    ctx.store.finish_run(run_id, {**{k: v for k, v in report["counts"].items() if not isinstance(v, dict)},
                                  "seconds": round(seconds, 1)})
    ctx.echo(f"dedupe ({MODE}): {_summary(report)} (clustered in {seconds:.1f} s, "
             f"{len(docs) / max(seconds, 1e-3):.0f} records/s)")
    return report


def build_report(docs: list[Doc], ordered: list[list[str]], by_id: dict[str, Doc], links: dict,
                 params: dict) -> dict:
    in_clusters = sum(len(c) for c in ordered)
    sizes = Counter(len(c) for c in ordered)
    filtered = Counter(d.filtered for d in docs if d.filtered)
    largest = [{"size": len(c), "first": c[0], "members": [
        {"id": m, "rank": i, "how": by_id[m].how, "n_tokens": by_id[m].n_tokens,
         **({"filtered": by_id[m].filtered} if by_id[m].filtered else {}), **by_id[m].meta}
        for i, m in enumerate(c)]} for c in ordered[:LARGEST]]
    return {
        "mode": MODE,
        "counts": {"input": len(docs), "clusters": len(ordered), "in_clusters": in_clusters,
                   # validated only when every member ranked before them is dropped
                   "held_back": in_clusters - len(ordered),
                   "to_validate_first": len(docs) - in_clusters + len(ordered),
                   # dedupe after validation will drop these: each ranks after the members it will keep
                   "filtered": dict(sorted(filtered.items()))},
        "clusters": {"count": len(ordered), "in_clusters": in_clusters,
                     "size_histogram": {str(k): sizes[k] for k in sorted(sizes)}, "largest": largest},
        "links": links,
        "params": params,
    }


def _summary(report: dict) -> str:
    c = report["counts"]
    return (f"{c['input']} records, {c['in_clusters']} in {c['clusters']} clusters of near duplicates; "
            f"validate checks {c['to_validate_first']} first and holds back {c['held_back']} until the "
            f"records ranked before them fail")
