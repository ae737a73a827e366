"""The dedupe stage: quality filters, decontamination, then exact and near dedup.

It works on any record set, in one of two modes, and its report line names the mode:
  after validation   (once any record passed validation) what follows, on the validated records;
  before validation  (no record passed validation yet: before `sftbuild validate`, or on a machine
                     without a GPU) clusters the harvested and bound records instead, so that
                     validate checks one record per cluster first (sftbuild.dedupe.prevalidate);
                     it drops nothing.

Order matters: a record dropped by a filter or as contaminated can never be a
cluster's representative. Every alive record gets one result: ok, or dropped
with the name of the first filter that drops it (see `sftbuild list filter`),
contaminated or duplicate. The config hash covers the near-dedup parameters
and every selected filter with its effective parameters, in run order. The
report goes to <workspace>/reports/dedupe.json.
"""
from __future__ import annotations

import json
from collections import Counter

from sftbuild.context import Context, StageRun
from sftbuild.dedupe import filters as F
from sftbuild.dedupe import prevalidate
from sftbuild.dedupe.analysis import LARGEST, analyse, setup, to_doc
from sftbuild.dedupe.decontam import Decontaminator
from sftbuild.dedupe.near import Clusters, Doc, find_clusters
from sftbuild.dedupe.params import Params


def run(ctx: Context, clustered: bool = False, **options) -> dict:
    """`clustered`: the caller ran `prevalidate.run` just before (`sftbuild run`, as validate's first
    step), so before validation the clusters' summary is not said twice."""
    if not ctx.store.alive("dedupe"):  # nothing validated yet: cluster what validate is about to check
        return prevalidate.run(ctx, said=clustered)
    s = setup(ctx)
    records = ctx.store.alive("dedupe")
    ids = sorted(r.id for r in records)
    report_path = ctx.workspace / "reports" / "dedupe.json"
    licences = {r.id: r.provenance.get("license") for r in records}  # a re-harvest may change one
    with StageRun(ctx, "dedupe", s.manifest, extra_key=[[i, licences[i]] for i in ids]) as run_:
        previous = json.loads(report_path.read_text()) if report_path.exists() else {}
        if ids and run_.done() >= set(ids) and previous.get("config_hash") == run_.chash:
            ctx.echo("dedupe (after validation): nothing changed since the last run")
            return previous
        validation = ctx.store.results_for("validate")
        docs = [to_doc(r, validation.get(r.id)) for r in records]
        docs.sort(key=lambda d: d.id)
        report = dedupe_docs(docs, s.params, s.filters, s.decon, mapper=ctx.executor.map_cpu,
                             put=run_.put)
        report["config_hash"] = run_.chash
        report["mode"] = "after validation"
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(report, indent=1, sort_keys=True))
        report["report_path"] = str(report_path)
        ctx.echo(f"dedupe (after validation): {report['counts']['ok']} kept of {report['counts']['input']}; "
                 f"dropped {report['counts']['dropped']}")
    return report


def dedupe_docs(docs: list[Doc], params: Params, filters: list[F.Filter], decon: Decontaminator | None = None,
                workers: int = 1, mapper=None, put=None) -> dict:
    """The whole stage on plain documents; `put(id, status, reason, payload)` receives each verdict.

    Filters, decontamination and signatures run per chunk in parallel (`mapper`, e.g. an
    executor's map_cpu, or a pool of `workers`); clustering then runs on the survivors.
    """
    put = put or (lambda *a, **k: None)
    drops, survivors, sigs = analyse(docs, params, filters, decon, workers, mapper)
    verdicts: dict[str, tuple] = {}
    for d, drop in zip(docs, drops):
        if drop is not None:
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
