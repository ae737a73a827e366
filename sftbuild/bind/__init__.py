"""Bind: tie each harvested kernel to a reference and a launch, or record why not.

Map (what lives where): stage.py runs the stage; binders/ holds the binding strategies (one plug-in per
file, tried by `order`); probe.py, launcher_probe.py and extension_probe.py are the task functions the
running binders name (`task_fn`), run in sandboxed workers through sftbuild.trial; a binding is
sftbuild.binding.Binding.
What one may touch: a new strategy is one file in sftbuild/bind/binders/ (raise its `version` when
a change could change a binding: bind then redoes the records it decides).
"""
