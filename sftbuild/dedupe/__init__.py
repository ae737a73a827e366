"""sftbuild.dedupe: quality filters, decontamination, exact and near dedup of kernel records.

Library use, without a store:

    from sftbuild.dedupe import Doc, Params, find_clusters
    result = find_clusters(docs, Params(), workers=2)

Modules: normalize (tokens for hashing), signature (vectorised MinHash), near
(clustering), filters (quality plug-ins), fingerprints and decontam
(benchmark contamination), stage (the pipeline stage, ``run(ctx)``).
"""
from sftbuild.dedupe.near import Clusters, Doc, find_clusters
from sftbuild.dedupe.params import Params

__all__ = ["Clusters", "Doc", "Params", "find_clusters"]
