"""Source kinds: how a spec string names a source, and how the harvest reads it.

A kind is a `SourceKind` registered in `KINDS`; its `name` is what a registry entry's
`kind:` says. Adding one is one new module in this folder:

    @KINDS.register
    class Wheelhouse(SourceKind):
        '''A folder of package archives, each unpacked and harvested as its own tree.'''
        name = "wheelhouse"
        order = 60

        def recognise(self, spec, path): ...   # Source, or None when the spec is not of this kind
        def harvest(self, h): ...              # h.tree(Tree), h.emit(records, spans), h.skip(...)

A kind may take parameters (`spec_params`: name -> int or str): a spec gives them after `?`
(`torch-inductor?programs=300&seed=1`, `inductor:DIR?benchmark=KernelBench`), a registry entry
under `params:`; `check_params` turns them into typed values or raises `SourceError`.

A kind does up to three things:
- `recognise(spec, path)`: the `Source` a command-line spec names when it is of this kind,
  None when it is not; it raises `SourceError` when the spec is of this kind but unusable.
  `parse_spec` asks every kind in `order`, lowest first; a kind reached only through a
  registry entry keeps the default, which recognises nothing.
- `materialize(src, workspace, cfg)`: put a file tree on disk and describe it as a `Tree`.
- `harvest(h)`: turn the source into records through the harvest `h` (see
  `sftbuild.harvest.stage.Harvest`); the default harvests the materialised tree, after
  keeping a content-addressed copy of its Python files for Triton records to import
  (`_tree.keep`, provenance `tree`).
"""
from __future__ import annotations

from pathlib import Path

from sftbuild.harvest.sources import Source, SourceError, Tree
from sftbuild.plugins import Plugin, Registry


class SourceKind(Plugin):
    """Base of every source kind."""

    order = 500  # recognition priority: kinds with a lower order see a spec first
    spec_params: dict[str, type] = {}  # the parameters a spec or registry entry may give, with their types

    def check_params(self, given: dict, where: str) -> dict:
        """`given` typed as `spec_params` declares; an unknown name or a bad value is a SourceError."""
        out = {}
        for key, value in given.items():
            if key not in self.spec_params:
                known = ", ".join(sorted(self.spec_params)) or "none"
                raise SourceError(f"{where}: kind {self.name!r} takes no parameter {key!r} (it takes: {known})")
            want = self.spec_params[key]
            if want is int:
                try:
                    value = int(str(value).strip())
                except ValueError:
                    raise SourceError(f"{where}: parameter {key} must be an integer, got {value!r}") from None
            elif not isinstance(value, str) or not value.strip() or len(value) > 200:
                raise SourceError(f"{where}: parameter {key} must be a non-empty string of at most 200 characters")
            out[key] = value
        return out

    def recognise(self, spec: str, path: Path) -> Source | None:
        return None

    def endpoint(self, src: Source, workspace: Path, cfg) -> str | None:
        """The URL that `materialize` would reach for `src` (checked before a `builtin` harvest takes a
        source that needs the network), or None when it needs none (a local path, a cached download)."""
        return None

    def materialize(self, src: Source, workspace: Path, cfg) -> Tree:
        raise SourceError(f"source {src.name!r}: kind {src.kind!r} is not a file tree")

    def harvest(self, h) -> None:
        from sftbuild.harvest.kinds._tree import keep

        h.tree(keep(self.materialize(h.src, h.ctx.workspace, h.cfg), h.ctx.workspace))


KINDS: Registry[SourceKind] = Registry("source", SourceKind, __name__, doc="where kernels come from (harvest)")
