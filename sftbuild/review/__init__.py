"""sftbuild.review stage: a seeded, stratified sample with a stated bound, verdicts, and the gate.

Map (what lives where):
- stage.py runs the stage; `gate` and the defect-rate bound live in sftbuild.review_gate, which
  export reads too (no stage imports another); sample.py: the sample's size and strata; evidence.py: what a reviewer sees of one record; terminal.py (`review next`)
  and web.py (`review serve`): the two review flows; packets.py: packets for outside tools, and
  their verdicts read back.
What one may touch: views and packet formats; the sample's seed and bound are what its verdicts prove.
"""
