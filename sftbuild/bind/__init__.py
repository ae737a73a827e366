"""Bind: tie each harvested kernel to a reference and a launch, or record why not.

Map (what lives where): stage.py runs the stage; the binding strategies are the plug-ins of
sftbuild.bind.binders (one file each, tried by `order`); a binding is sftbuild.binding.Binding.
What one may touch: a new strategy is one file in sftbuild/bind/binders/ (raise its `version` when
a change could change a binding: bind then redoes the records it decides).
"""
