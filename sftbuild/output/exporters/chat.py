"""Chat rows: a user turn and an assistant turn."""
from __future__ import annotations

from sftbuild.output.exporters import EXPORTERS, Batch, Exporter


@EXPORTERS.register
class Chat(Exporter):
    """chat.jsonl: {"id", "messages": [user, assistant], ...}, one row per record and instruction."""

    name = "chat"
    order = 20

    def files(self, batch: Batch):
        return {"chat.jsonl": [{**s.meta(key), "messages": [{"role": "user", "content": s.instructions[key]},
                                                            {"role": "assistant", "content": s.record.code}]}
                               for s in batch.samples for key in sorted(s.instructions)]}
