"""Check an export folder as a trainer would: every config loads with `datasets`, verl and TRL
columns are there, the card's funnel equals `sftbuild status`, and where validation ran.

    python bench/export_check.py sftbuild-work            # the workspace; its export/ is read

Prints one line per config and split, then a summary line; exits non-zero on a failed check.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import datasets
import yaml


def main(ws: str) -> int:
    out = Path(ws) / "export"
    text = (out / "README.md").read_text(encoding="utf-8")
    head = yaml.safe_load(text.split("---\n")[1])
    problems = []
    cache = tempfile.mkdtemp(prefix="export_check_")
    where = Counter()
    for cfg in head["configs"]:
        ds = datasets.load_dataset(str(out), cfg["config_name"], cache_dir=cache)
        for split, rows in ds.items():
            print(f"{cfg['config_name']:<22} {split:<16} {rows.num_rows:>6} rows  columns: {', '.join(rows.column_names)}")
            if cfg["config_name"] == "rlvr_verl":
                if rows.column_names != ["data_source", "prompt", "ability", "reward_model", "extra_info"]:
                    problems.append("verl columns")
                where.update(e["validation"]["where"] for e in rows["extra_info"])
                json.loads(rows[0]["reward_model"]["ground_truth"])
            if cfg["config_name"] == "rlvr_trl" and not {"prompt", "task"} <= set(rows.column_names):
                problems.append("trl columns")
    status = subprocess.run([sys.executable, "-m", "sftbuild.cli", "status", "-w", ws], capture_output=True,
                            text=True).stdout.strip()
    card = re.search(r"## Funnel\n.*?```\n(.*?)\n```", text, re.S).group(1)
    if card != status:
        problems.append("card funnel differs from `sftbuild status`")
    print(f"records by where validation ran: {dict(where)}; licence: {head['license']}; "
          f"card funnel == status: {card == status}; problems: {problems or 'none'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "sftbuild-work"))
