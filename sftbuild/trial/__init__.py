"""sftbuild.trial: running one candidate, used by validate, by bind's probes and by the reward.

Map (what lives where):
- kinds/: the candidate kinds (CUDA harness, CUDA file reference, CUDA host launcher, CUDA extension
  function, Triton op, module pair, Inductor program), one plug-in per file, picked from the record's
  binding: the runner a worker calls, the build it needs, whether the interpreter may run it.
- loop.py (the one trial loop), trials.py (CUDA harness and file-reference trials), pyrun.py
  (Triton ops, module pairs, Inductor programs, extension functions); checks/: the run-time checks
  every trial asks (one plug-in per file).
- compile.py, nvcc_parallel.py, include_sets.py, extension.py, inline_sources.py: building;
  harness.py and templates/: the CUDA launchers rendered around the unchanged kernel;
  launchers.py: how a probed host launcher or extension function is called (shared with bind's probes);
  file_reference.py, acceptance.py, element_types.py: a file's own CPU reference, its main()'s
  acceptance test and element types; cuda_shim/ and torch_lean.cuh: the headers a candidate builds against.
- refbook.py (references computed before any candidate runs), sizes.py, fences.py, guards.py,
  pristine.py, deadline.py, parameters.py, tally.py, timing.py, memcheck.py, audit.py, logs.py.
Invariants: trial imports no stage (the import contract's floor below them); a candidate's code runs
only in the sandboxed workers a `runner` is called in, never in the process that chose it.
What one may touch: add a run-time check or a candidate kind as one file in checks/ or kinds/ (raise its
`version` when a change could change a verdict); templates key the validate stage. The loop, guards,
fences and pristine are the anti-cheat core: change them with the red-team tests.
"""
