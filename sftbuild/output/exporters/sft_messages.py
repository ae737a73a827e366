"""SFT rows in chat form: `messages`, the layout TRL's SFTTrainer and most chat trainers load as is."""
from __future__ import annotations

from sftbuild.output.exporters import EXPORTERS, Batch, Exporter, per_instruction
from sftbuild.output.rows import MESSAGE


@EXPORTERS.register
class SftMessages(Exporter):
    """sft_messages: {"messages": [user instruction, assistant code], ...}, one row per record and instruction."""

    name = "sft_messages"
    version = 1
    order = 10

    def tables(self, batch: Batch):
        return {self.name: per_instruction(batch, {"messages": MESSAGE}, lambda s, text: {"messages": [
            {"role": "user", "content": text}, {"role": "assistant", "content": s.record.code}]})}
