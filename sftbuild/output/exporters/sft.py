"""SFT rows: instruction and code."""
from __future__ import annotations

from sftbuild.output.exporters import EXPORTERS, Batch, Exporter


@EXPORTERS.register
class Sft(Exporter):
    """sft.jsonl: {"id", "instruction", "output", "lang", ...}, one row per record and instruction."""

    name = "sft"
    order = 10

    def files(self, batch: Batch):
        return {"sft.jsonl": [{**s.meta(key), "instruction": s.instructions[key], "output": s.record.code}
                              for s in batch.samples for key in sorted(s.instructions)]}
