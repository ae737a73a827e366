"""sftbuild.dedupe: quality filters, decontamination, exact and near dedup of kernel records.

Library use, without a store:

    from sftbuild.dedupe import Doc, Params, find_clusters
    result = find_clusters(docs, Params(), workers=2)

Map (what lives where):
- stage.py runs the stage; prevalidate.py clusters records before validate; analysis.py is the
  parallel pass both share.
- normalize.py (tokens for hashing), signature.py (vectorised MinHash), near.py (clustering),
  params.py (its parameters); fingerprints.py and decontam.py (benchmark contamination).
- filters/: quality filters, one plug-in per file.
What one may touch: a new filter is one file in filters/. What hashing sees (normalize.VERSION,
and the comment stripper in sftbuild.parsing) decides every stored signature: change it knowingly.
"""
from sftbuild.dedupe.near import Clusters, Doc, find_clusters
from sftbuild.dedupe.params import Params

__all__ = ["Clusters", "Doc", "Params", "find_clusters"]
