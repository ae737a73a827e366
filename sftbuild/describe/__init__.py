"""sftbuild.describe stage: static features and instructions in English and Chinese.

Map (what lives where):
- stage.py runs the stage; features.py reads a kernel's features from its parse tree;
  describers/: one technique per file (a plug-in); writes.py: which parameters a kernel writes
  (from the shared kernel view, sftbuild.parsing); text.py and templates/: instructions and the
  fidelity check that reads their claims back.
What one may touch: a new technique is one file in describers/; templates key the stage.
"""
