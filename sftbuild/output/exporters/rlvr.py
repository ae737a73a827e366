"""RLVR tasks: a prompt and what the reward function needs to check an answer."""
from __future__ import annotations

import json

from sftbuild.output.exporters import EXPORTERS, Batch, Exporter, Sample


@EXPORTERS.register
class Rlvr(Exporter):
    """rlvr_verl.parquet (verl rows) and rlvr_trl.jsonl (TRL GRPO rows), one task per record.

    verl rows: data_source, prompt (chat), ability, reward_model, extra_info. TRL rows:
    the prompt plus the task columns the reward function reads.
    """

    name = "rlvr"
    order = 30

    def files(self, batch: Batch):
        tasks = [_task(s) for s in batch.samples]
        return {"rlvr_trl.jsonl": [{"prompt": t["prompt"], **t["columns"]} for t in tasks],
                "rlvr_verl.parquet": [t["verl"] for t in tasks]}


def _task(sample: Sample) -> dict:
    rec, instr, val = sample.record, sample.instructions, sample.validation
    prompt = instr.get("en:detailed") or next(iter(instr.values()), "")
    task = {"task_id": rec.id, "language": rec.language, "binding": rec.binding, "entry": rec.entry,
            "baseline_ms": {k: v.get("eager_ms", {}).get("median") for k, v in (val.get("timing") or {}).items()}}
    columns = {"task": json.dumps(task, sort_keys=True), "task_id": rec.id}
    verl = {"data_source": "sftbuild", "prompt": [{"role": "user", "content": prompt}],
            "ability": f"{rec.language}-kernel",
            "reward_model": {"style": "rule", "ground_truth": columns["task"]},
            "extra_info": {"task_id": rec.id, "source": rec.source}}
    return {"prompt": prompt, "columns": columns, "verl": verl}
