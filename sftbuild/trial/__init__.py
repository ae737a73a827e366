"""sftbuild.trial: running one candidate, used by validate, by bind's probes and by the reward.

Map (what lives where):
- loop.py (the one trial loop), trials.py (CUDA harness and file-reference trials), pyrun.py
  (Triton ops, module pairs, Inductor programs, extension functions); checks/: the run-time checks
  every trial asks (one plug-in per file).
- compile.py, nvcc_parallel.py, include_sets.py, extension.py, inline_sources.py: building;
  harness.py and templates/: the CUDA launchers rendered around the unchanged kernel;
  cuda_shim/ and torch_lean.cuh: the headers a candidate builds against.
- refbook.py (references computed before any candidate runs), sizes.py, fences.py, guards.py,
  pristine.py, deadline.py, parameters.py, tally.py, timing.py, memcheck.py, audit.py, logs.py.
What one may touch: add a run-time check as one file in checks/ (raise its `version` when a change
could change a verdict); templates key the validate stage. The loop, guards, fences and pristine are
the anti-cheat core: change them with the red-team tests.
"""
