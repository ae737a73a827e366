"""The dataset card."""
from __future__ import annotations

import json
from collections import Counter

from sftbuild.context import environment
from sftbuild.funnel import format_funnel
from sftbuild.output.exporters import EXPORTERS, Batch, Exporter


@EXPORTERS.register
class Card(Exporter):
    """README.md: the dataset card with the funnel, sources, licences, provenance and validation environment."""

    name = "card"
    order = 90  # last: it describes what the others wrote

    def files(self, batch: Batch):
        return {"README.md": card(batch)}


def card(batch: Batch) -> str:
    records = batch.records
    licences = Counter(r.provenance.get("license") or "unknown" for r in records)
    sources = Counter(r.source for r in records)
    manifests = [m for m in batch.store.manifests() if m["stage"] == "validate"]
    env = manifests[-1]["env"] if manifests else environment()
    lines = [
        "---", "license: other", "tags: [gpu-kernels, cuda, triton, sft, rlvr]", "---", "",
        "# GPU kernel SFT dataset", "",
        f"{len(records)} kernels, each compiled, bound to a torch reference, checked for correctness "
        "and reviewed on a stratified sample. The code of every sample is byte for byte what was validated.",
        "", "## Funnel", "", "```", format_funnel(batch.store.funnel()), "```", "",
        "## Sources", "", *[f"- {s}: {n}" for s, n in sorted(sources.items())], "",
        "## Licences", "", *[f"- {lic}: {n}" for lic, n in sorted(licences.items())], "",
        "## Provenance", "",
        "| id | source | path | lines | licence | version |", "| --- | --- | --- | --- | --- | --- |",
        *[f"| {r.id[:12]} | {r.source} | {r.provenance.get('path', '')} | {r.provenance.get('lines', '')} | "
          f"{r.provenance.get('license', '')} | {r.provenance.get('version', '')} |" for r in records],
        "", "## Validation environment", "", "```", json.dumps(env, indent=2, sort_keys=True), "```", "",
    ]
    return "\n".join(lines)
