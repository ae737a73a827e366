"""The harvest stage: sources -> kernel records with provenance and declared bindings."""
from __future__ import annotations

import fnmatch

from sftbuild.context import Context, StageRun, UserError
from sftbuild.harvest import sources as S
from sftbuild.harvest.cuda_extract import extract_kernels
from sftbuild.record import Record


def resolve(ctx: Context, names: list[str]) -> list[S.Source]:
    registry = S.load_registry()
    for extra in ctx.config.harvest.registries:
        registry.update(S.load_registry(extra))
    out = []
    for name in names or ctx.config.harvest.sources:
        if name not in registry:
            raise UserError(f"unknown source {name!r}; known: {', '.join(sorted(registry))}")
        out.append(registry[name])
    return out


def run(ctx: Context, sources: list[str] | None = None) -> dict:
    cfg = ctx.config.harvest
    chosen = resolve(ctx, sources or [])
    stats = {"sources": {}, "errors": {}}
    with StageRun(ctx, "harvest", {"min_kernel_lines": cfg.min_kernel_lines,
                                   "max_file_bytes": cfg.max_file_bytes}) as run:
        for src in chosen:
            try:
                n = _harvest_source(ctx, run, src)
                stats["sources"][src.name] = n
            except S.SourceError as e:
                stats["errors"][src.name] = str(e)
                ctx.echo(f"harvest: source {src.name}: {e} (skipped; other sources continue)")
        run.stats.update(stats)
    return run.stats


def _harvest_source(ctx: Context, run: StageRun, src: S.Source) -> int:
    cfg = ctx.config.harvest
    prov_base = S.torch_provenance() if src.kind == "torch-aten" else {"source_kind": src.kind}
    count = 0
    for rel, path in S.files(src):
        size = path.stat().st_size
        if size > cfg.max_file_bytes:
            ctx.store.add_skip(src.name, rel, "oversize", f"{size} bytes")
            continue
        data = path.read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            ctx.store.add_skip(src.name, rel, "not_utf8")
            continue
        if b"__global__" not in data:
            continue
        kernels, others = extract_kernels(data)
        for o in others:
            ctx.store.add_skip(src.name, rel, o["reason"], o["detail"], item=f"line {o['line']}")
        records = []
        for k in kernels:
            prov = dict(prov_base, path=rel, lines=list(k.lines), license=src.license or "unknown")
            entry = {"kernels": [k.name], "params": k.params, "template": k.template,
                     "launch_bounds": k.launch_bounds, "launch_sites": k.launch_sites,
                     "includes": k.includes, "needs": k.needs,
                     "include_sets": ["torch"] if src.kind == "torch-aten" else []}
            records.append(Record(language="cuda", code=k.code, source=src.name, entry=entry,
                                  binding=_binding(src, rel, k.name), provenance=prov))
        ctx.store.add_records(records)
        for r, k in zip(records, kernels):
            body_lines = k.lines[1] - k.lines[0] + 1
            if body_lines < cfg.min_kernel_lines:
                run.put(r.id, "dropped", "trivial", {"lines": body_lines})
            else:
                run.put(r.id, "ok")
            count += 1
    return count


def _binding(src: S.Source, rel: str, kernel: str) -> dict | None:
    for b in src.bindings:
        if b.get("kernel") == kernel and fnmatch.fnmatch(rel, b.get("path", "*")):
            out = {k: v for k, v in b.items() if k not in ("kernel", "path")}
            out["how"] = "manifest"
            return out
    return None
