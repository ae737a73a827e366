"""A kernel and its deliberately broken twin through the pipeline, for the GPU tests of probed bindings."""
from __future__ import annotations

from pathlib import Path


def validate_twins(ctx, good: Path, broken: Path, kernel: str | None = None) -> tuple:
    """Harvest the folders `good` and `broken` into `ctx`, then bind, describe and validate them, with
    validate's clustering off (twins are near duplicates: both are checked). Returns (good's record,
    broken's record, validate's results); with `kernel`, the records of that kernel."""
    from sftbuild.bind import stage as bind
    from sftbuild.describe import stage as describe
    from sftbuild.harvest import stage as harvest
    from sftbuild.validate import stage as validate

    ctx.config.dedupe.before_validation = False
    harvest.run(ctx, [str(good), str(broken)])
    bind.run(ctx)
    describe.run(ctx)
    validate.run(ctx)
    by_source = {r.provenance["url"].rsplit("/", 1)[-1]: r for r in ctx.store.records()
                 if kernel is None or r.entry["kernels"] == [kernel]}
    return by_source[good.name], by_source[broken.name], ctx.store.results_for("validate")
