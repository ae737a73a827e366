"""RLVR tasks as verl reads them: data_source, prompt (chat), ability, reward_model, extra_info.

verl's RLHFDataset applies the chat template to `prompt`, and its reward manager calls
`compute_score(data_source, solution_str, ground_truth, extra_info)` with
`reward_model["ground_truth"]`; here that is the task JSON `sftbuild.validate.reward.reward`
takes. Every other column a row carries (id, language, op or program, source, licence,
validation summary, review) sits in `extra_info`, next to verl's own `split` and `index`.
"""
from __future__ import annotations

from sftbuild.output.exporters import EXPORTERS, Batch, Exporter, Table
from sftbuild.output.rows import META, MESSAGE, meta, task_json

DATA_SOURCE = "sftbuild/gpu-kernels"


@EXPORTERS.register
class RlvrVerl(Exporter):
    """rlvr_verl: one verl row per record: the English detailed instruction as the prompt, the task as ground truth."""

    name = "rlvr_verl"
    version = 1
    order = 30

    def tables(self, batch: Batch):
        text = "string"
        feats = {
            "data_source": text, "prompt": MESSAGE, "ability": text,
            "reward_model": {"style": text, "ground_truth": text},
            "extra_info": {"split": text, "index": "int64", **META}}
        splits: dict[str, list[dict]] = {}
        for split, samples in batch.by_split().items():
            splits[split] = [{"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": s.prompt()}],
                              "ability": "gpu-kernel",
                              "reward_model": {"style": "rule", "ground_truth": task_json(s)},
                              "extra_info": {"split": split, "index": i, **meta(s)}}
                             for i, s in enumerate(samples)]
        return {self.name: Table(feats, splits)}
