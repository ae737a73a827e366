"""Which records validate checks, round by round, so that a cluster of near duplicates costs one check.

Dedupe before validation stores clusters of near-identical records, each member with its rank
(`Store.clusters()`; sftbuild.dedupe.prevalidate says how they are found and ranked). Given those,
the records to validate and the verdicts that already count, `Rounds` decides:

  - a record in no cluster is checked in the first round, as without clusters;
  - in a cluster, the best-ranked member that is not dropped must have a verdict: it is checked
    when it has none; once it is validated ok, or while it waits (for a GPU), every member ranked
    after it is held back; when it is dropped, the next one is checked in the next round.
  - a cluster whose members keep failing widens its window: once d members ranked first are
    dropped (d >= 2), the next d are checked together (1, 1, 2, 4, 8, ...), so a cluster of n
    failing members takes about log2(n) rounds, each of which starts the GPU workers afresh,
    rather than n; at most about twice the checks of one at a time.

`held()` gives each member held back at the end of the run and the payload of its
`waiting:duplicate` result: the record it stands behind (`duplicate_of`), why (`ok`: validated ok,
`pending`: still waiting for its own verdict) and the link that put it in the cluster. Such a result
is no verdict: the record is looked at again on every run, so when the verdict it stands behind
changes (its binding changed, it was dropped under a new config) it is checked in its turn.
"""
from __future__ import annotations

from collections import defaultdict


class Rounds:
    def __init__(self, clusters: dict[str, dict], todo: list[str], verdicts: dict[str, str]):
        """`clusters`: record id -> {"cluster", "rank", "link"}; `todo`: the records without a verdict
        that counts, in the order to check them; `verdicts`: record id -> ok|dropped (those that count)."""
        self.order = {rid: i for i, rid in enumerate(todo)}
        self.verdicts = dict(verdicts)
        self.links = {rid: c.get("link") or {} for rid, c in clusters.items()}
        members: dict[str, list[tuple[int, str]]] = defaultdict(list)
        known = set(todo) | set(verdicts)  # members that are no longer alive take no part
        for rid, c in clusters.items():
            if rid in known:
                members[c["cluster"]].append((c["rank"], rid))
        self.members = {k: [rid for _, rid in sorted(v)] for k, v in members.items() if v}
        clustered = {rid for ms in self.members.values() for rid in ms}
        self.single = [rid for rid in todo if rid not in clustered]
        self.tried: set[str] = set()

    def next(self) -> list[str]:
        """The records to check now, in `todo` order; empty when the run is done."""
        batch = [rid for rid in self.single if rid not in self.tried]
        for ms in self.members.values():
            batch.extend(self._next_in(ms))
        batch.sort(key=self.order.__getitem__)
        self.tried.update(batch)
        return batch

    def record(self, rid: str, status: str) -> None:
        """The verdict one checked record reached (ok, dropped or waiting)."""
        self.verdicts[rid] = status

    def _next_in(self, ms: list[str]) -> list[str]:
        """The members of one cluster to check now: the first that is not dropped, when it has no
        verdict yet, and after d >= 2 drops the d members from there on (up to one that has one)."""
        dropped = next((i for i, m in enumerate(ms) if self.verdicts.get(m) != "dropped"), len(ms))
        out: list[str] = []
        for m in ms[dropped:]:
            if len(out) == max(1, dropped):
                break
            if self.verdicts.get(m) == "dropped":
                continue
            if self.verdicts.get(m) == "ok" or m in self.tried or m not in self.order:
                break  # validated ok, or waiting for its verdict: the members after it wait behind it
            out.append(m)
        return out

    def _ahead(self, ms: list[str]) -> str | None:
        """The best-ranked member that is not dropped."""
        return next((m for m in ms if self.verdicts.get(m) != "dropped"), None)

    def held(self) -> dict[str, dict]:
        """record id -> payload of its waiting:duplicate result, for each member not checked in this run."""
        out: dict[str, dict] = {}
        for cluster, ms in self.members.items():
            ahead = self._ahead(ms)
            ok = self.verdicts.get(ahead) == "ok"
            for m in ms:
                if m == ahead or m not in self.order or m in self.tried:
                    continue
                why = "ok" if ok else "pending"
                out[m] = {"duplicate_of": ahead, "because": why, "cluster": cluster, **{
                    k: v for k, v in self.links.get(m, {}).items() if k in ("similarity", "signature", "via")},
                    "detail": f"a near duplicate of {ahead[:12]}, which is "
                              + ("validated ok" if ok else "still waiting for its verdict")
                              + "; validated only if that one is dropped"}
        return out
