"""RLVR tasks for TRL's GRPOTrainer: a conversational `prompt` plus the columns its reward functions get.

GRPOTrainer generates from `prompt` and calls each reward function as
`reward_func(prompts=..., completions=..., completion_ids=..., **columns)`, every other
dataset column passed by name as a list over the batch. The columns here: `task` (the JSON
`sftbuild.validate.reward.reward` takes), `task_id`, and the metadata every row carries.
"""
from __future__ import annotations

from sftbuild.output.exporters import EXPORTERS, Batch, Exporter, Table
from sftbuild.output.rows import MESSAGE, features, meta, task_json


@EXPORTERS.register
class RlvrTrl(Exporter):
    """rlvr_trl: {"prompt": [user turn], "task": JSON, "task_id", ...}, one row per record."""

    name = "rlvr_trl"
    version = 1
    order = 31

    def tables(self, batch: Batch):
        text = "string"
        feats = features(prompt=MESSAGE, task=text, task_id=text)
        splits = {split: [{"prompt": [{"role": "user", "content": s.prompt()}], "task": task_json(s),
                           "task_id": s.record.id, **meta(s)} for s in samples]
                  for split, samples in batch.by_split().items()}
        return {self.name: Table(feats, splits)}
