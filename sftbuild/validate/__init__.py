"""sftbuild.validate: the validate stage, its gates and checks, and the RLVR reward built on the same pipeline.

Map (what lives where):
- stage.py runs the stage; pipeline.py is the one path a record takes (static checks, the build its
  candidate kind asks for, trials in a worker, memcheck), shared with reward.py; clusters.py orders
  the work (near duplicates wait for their cluster's first verdict).
- static/: checks that read the code before anything runs (one plug-in per file; `_read.py` their helpers).
- reward.py and reward_service.py: the reward is this stage's pipeline scored for one candidate, so it
  lives here; export names it (`sftbuild.validate.reward:compute_score`) in the task files it writes and
  never imports it; the CLI serves it.
- Running a candidate (kinds, builds, harnesses, the trial loop, run-time checks, guards) is
  sftbuild.trial, below every stage; validate picks what to run, trial runs it.
What one may touch: add a static check as one file in static/ (raise its `version` when a change could
change a verdict); a run-time check or a candidate kind is one file in sftbuild/trial/checks/ or
sftbuild/trial/kinds/.
"""
from sftbuild.validate.reward import (  # noqa: F401
    Reward, compute_score, compute_score_batch, reward, reward_batch, trl_reward)
