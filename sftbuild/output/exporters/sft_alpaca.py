"""SFT rows as instruction / input / output (the Alpaca layout)."""
from __future__ import annotations

from sftbuild.output.exporters import EXPORTERS, Batch, Exporter, per_instruction


@EXPORTERS.register
class SftAlpaca(Exporter):
    """sft_alpaca: {"instruction", "input": "", "output": code, ...}, one row per record and instruction.

    The instruction is whole (a reference program is quoted in it), so `input` stays empty.
    """

    name = "sft_alpaca"
    version = 1
    order = 12

    def tables(self, batch: Batch):
        text = "string"
        return {self.name: per_instruction(batch, {"instruction": text, "input": text, "output": text},
                                           lambda s, t: {"instruction": t, "input": "", "output": s.record.code})}
