"""sftbuild.harvest stage: sources in, kernel records with provenance and declared bindings out.

Map (what lives where):
- stage.py runs the stage; worker.py is the per-file task (read, filter, extract), kept light.
- kinds/: source kinds, one plug-in per file (git, pip, dir, dataset, torch-aten, ...);
  sources.py and specs.py: how a spec string names a source; registry.yaml: the named sources.
- filters/: file filters, one plug-in per file; catalog/: the Inductor source's program catalogs.
- cuda_extract.py (tree-sitter CUDA), triton_extract.py (`ast`), kernelbench.py, inductor.py,
  main_reader.py: extraction (Inductor's output code is read by sftbuild.inductor_code, which the
  trials share); license.py: the SPDX id of each file.
What one may touch: a new source kind, file filter or catalog is one file in its folder. Extraction
never runs harvested code; what it reads of C text it shares through sftbuild.parsing.
"""
