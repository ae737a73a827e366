"""sftbuild.output: the export stage, a view of the store swapped in whole.

Map (what lives where):
- stage.py runs the export; rows.py: what every row carries and its split; summary.py: the card's
  facts; hub.py: `--push-to-hub`.
- exporters/: one output format per file (a plug-in): SFT layouts, RLVR tasks (verl, TRL), the card.
What one may touch: a new format is one file in exporters/. Export ships only verdicts of the
current validator (stage.py refuses the rest).
"""
