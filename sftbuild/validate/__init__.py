"""sftbuild.validate stage, and the RLVR reward built on the same pipeline.

Map (what lives where):
- stage.py runs the stage; pipeline.py is the one path a candidate takes (static, compile, run,
  memcheck), shared with reward.py and reward_service.py; clusters.py orders the work.
- static/: checks that read the code (one plug-in per file; `_read.py` their helpers);
  checks/: run-time checks of one trial (one plug-in per file).
- compile.py, nvcc_parallel.py, include_sets.py, extension.py, inline_sources.py: building;
  harness.py and templates/: the CUDA launchers rendered around the unchanged kernel.
- loop.py (the one trial loop), trials.py (CUDA harness trials), pyrun.py (Triton and module
  pairs), refbook.py (references computed before any candidate runs), sizes.py, fences.py,
  guards.py, pristine.py, deadline.py, parameters.py, tally.py, timing.py, memcheck.py.
- probe.py and launcher_probe.py: the probes bind's binders run through a worker.
What one may touch: add a check as one file in static/ or checks/ (raise its `version` when a
change could change a verdict); harness templates and the tolerance table key the stage. The trial
loop, guards, fences and pristine are the anti-cheat core: change them with the red-team tests.
"""
from sftbuild.validate.reward import (  # noqa: F401
    Reward, compute_score, compute_score_batch, reward, reward_batch, trl_reward)
