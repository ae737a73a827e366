"""SFT rows as `prompt` / `completion` strings (TRL's prompt-completion format)."""
from __future__ import annotations

from sftbuild.output.exporters import EXPORTERS, Batch, Exporter, per_instruction


@EXPORTERS.register
class SftPromptCompletion(Exporter):
    """sft_prompt_completion: {"prompt": instruction, "completion": code, ...}, one row per record and instruction."""

    name = "sft_prompt_completion"
    version = 1
    order = 11

    def tables(self, batch: Batch):
        text = "string"
        return {self.name: per_instruction(batch, {"prompt": text, "completion": text},
                                           lambda s, t: {"prompt": t, "completion": s.record.code})}
