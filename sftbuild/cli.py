"""The sftbuild command line: one command per stage, plus run, status and init."""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import click

from sftbuild import config as C
from sftbuild import plugins, stages
from sftbuild.context import Context, UserError, Waiting, make_executor
from sftbuild.funnel import format_funnel
from sftbuild.store import Store, StoreError


def common(f):
    """Options every stage shares."""
    @click.option("--workspace", "-w", default="sftbuild-work", show_default=True,
                  type=click.Path(file_okay=False), help="Workspace folder holding the store.")
    @click.option("--config", "-c", "config_path", default=None, type=click.Path(dir_okay=False),
                  help="Config file (default: ./sftbuild.yaml when present).")
    @click.option("--executor", type=click.Choice(["local", "ray"]), default=None,
                  help="Where tasks run (default from config: local).")
    @click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
    @functools.wraps(f)
    def wrapper(workspace, config_path, executor, quiet, **kw):
        try:
            cfg = C.load(config_path)
            if executor:
                cfg.executor.kind = executor
            store = Store(workspace)
        except (C.ConfigError, StoreError) as e:
            raise click.ClickException(str(e))
        ex = make_executor(cfg.executor.kind, cfg.executor.cpu_workers, cfg.executor.gpus,
                           progress=not quiet, ray_address=cfg.executor.ray_address)
        ctx = Context(store=store, config=cfg, executor=ex, echo=click.echo, progress=not quiet)
        try:
            return f(ctx, **kw)
        except (UserError, C.ConfigError, StoreError, plugins.PluginError) as e:
            raise click.ClickException(str(e))
        finally:
            ex.close()
            store.close()
    return wrapper


class PipelineGroup(click.Group):
    """Lists `init`, then the stages in pipeline order, then the other commands."""

    def list_commands(self, ctx):
        first = ["init", *stages.NAMES, "run", "status"]
        return [c for c in first if c in self.commands] + sorted(c for c in self.commands if c not in first)


@click.group(cls=PipelineGroup)
@click.version_option(package_name="sftbuild")
def main():
    """Build verified SFT datasets and RLVR task sets of GPU kernels.

    \b
    Example:
        sftbuild run                 # every stage on the built-in default sources
        sftbuild status              # the funnel: counts per stage and drop reason
    """


@main.command()
@click.argument("path", default="sftbuild.yaml", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(path, force):
    """Write a commented config file with every default.

    \b
    Example:
        sftbuild init && $EDITOR sftbuild.yaml
    """
    p = Path(path)
    if p.exists() and not force:
        raise click.ClickException(f"{p} exists; use --force to overwrite")
    p.write_text(C.template(plugin_defaults), encoding="utf-8")
    click.echo(f"wrote {p}")


@main.command()
@click.argument("sources", nargs=-1)
@click.option("--allow-unpinned", is_flag=True, help="Accept git URLs without @REV.")
@common
def harvest(ctx, sources, allow_unpinned):
    """Extract kernels from SOURCES (default: the configured built-in sources).

    \b
    Example:
        sftbuild harvest                  # kernels in the installed torch's ATen headers
        sftbuild harvest torch-aten
    """
    from sftbuild.harvest import stage

    ctx.config.harvest.allow_unpinned |= allow_unpinned
    stats = stage.run(ctx, list(sources))
    _report(ctx, "harvest", stats)
    if stats.get("errors") and not stats.get("sources"):
        raise click.ClickException("no source could be harvested")


@main.command()
@common
def describe(ctx):
    """Write instructions (English and Chinese) for every harvested kernel.

    \b
    Example:
        sftbuild describe && sftbuild status
    """
    from sftbuild.describe import stage

    _report(ctx, "describe", stage.run(ctx))


@main.command()
@click.option("--max-slowdown", type=float, default=None,
              help="Drop kernels this many times slower than the torch baseline (e.g. 1.5).")
@click.option("--memcheck", type=click.Choice(["off", "sample", "all"]), default=None,
              help="compute-sanitizer memcheck on no, a sample of, or all records.")
@common
def validate(ctx, max_slowdown, memcheck):
    """Compile, check resources, and (on a GPU) check correctness and time each kernel.

    Without a GPU, records that need one wait in the state `needs_gpu`.

    \b
    Example:
        sftbuild validate --max-slowdown 1.5
    """
    from sftbuild.validate import stage

    if max_slowdown is not None:
        ctx.config.validate.max_slowdown = max_slowdown
    if memcheck is not None:
        ctx.config.validate.memcheck = memcheck
    _report(ctx, "validate", stage.run(ctx))


@main.command()
@common
def dedupe(ctx):
    """Drop exact and near duplicates, contaminated and low-quality samples.

    \b
    Example:
        sftbuild dedupe && cat sftbuild-work/reports/dedupe.json
    """
    from sftbuild.dedupe import stage

    _report(ctx, "dedupe", stage.run(ctx))


@main.group(invoke_without_command=True)
@click.pass_context
def review(cctx):
    """Sample records for human review and record verdicts.

    \b
    Example:
        sftbuild review sample
        sftbuild review list
        sftbuild review verdict 3f2a9c accept --reviewer alice --reason "clean"
    """
    if cctx.invoked_subcommand is None:
        cctx.invoke(review_sample)


@review.command("sample")
@common
def review_sample(ctx):
    """Draw the seeded, stratified review sample (10% by default).

    \b
    Example:
        sftbuild review sample
    """
    from sftbuild.review import stage

    _report(ctx, "review", stage.run(ctx))


@review.command("list")
@click.option("--pending", is_flag=True, help="Only records still waiting for a verdict.")
@common
def review_list(ctx, pending):
    """List the sampled records and their verdicts.

    \b
    Example:
        sftbuild review list --pending
    """
    from sftbuild.review import stage

    for row in stage.listing(ctx):
        if pending and row["verdict"]:
            continue
        click.echo(f"{row['record_id'][:12]}  {row['stratum']:<28} {row['verdict'] or '-':<7} "
                   f"{row['name']}")


@review.command("show")
@click.argument("record_id")
@common
def review_show(ctx, record_id):
    """Print one record: instruction, code, provenance and validation.

    \b
    Example:
        sftbuild review show 3f2a9c
    """
    from sftbuild.review import stage

    click.echo(stage.show(ctx, record_id))


@review.command("verdict")
@click.argument("record_id")
@click.argument("verdict", type=click.Choice(["accept", "reject"]))
@click.option("--reason", default="", help="Why; required for reject.")
@click.option("--reviewer", required=True, help="Who decided.")
@common
def review_verdict(ctx, record_id, verdict, reason, reviewer):
    """Record a reviewer's verdict on a sampled record (id prefix allowed).

    \b
    Example:
        sftbuild review verdict 3f2a9c reject --reason "wrong shapes" --reviewer bob
    """
    from sftbuild.review import stage

    rid = stage.verdict(ctx, record_id, verdict, reason, reviewer)
    click.echo(f"{rid[:12]}: {verdict}")


@main.command()
@common
def export(ctx):
    """Write the SFT JSONL, chat messages, RLVR tasks and the dataset card.

    Refuses while sampled records lack a verdict or the review sample failed.

    \b
    Example:
        sftbuild export && ls sftbuild-work/export
    """
    from sftbuild.output import stage

    _report(ctx, "export", stage.run(ctx))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the funnel as JSON.")
@common
def status(ctx, as_json):
    """Print the funnel: counts per stage and drop reason, overall and per source.

    \b
    Example:
        sftbuild status --json | jq .stages.validate
    """
    funnel = ctx.store.funnel()
    if as_json:
        click.echo(json.dumps(funnel, indent=2, sort_keys=True))
    else:
        click.echo(format_funnel(funnel))


@main.command()
@click.argument("sources", nargs=-1)
@common
def run(ctx, sources):
    """Run every stage in pipeline order (see `sftbuild --help`).

    Export waits (and `run` says so) until every sampled record has a verdict.

    \b
    Example:
        sftbuild run && sftbuild status
    """
    for st in stages.STAGES:
        options = {"sources": list(sources)} if st.name == "harvest" else {}
        try:
            _report(ctx, st.name, stages.module(st.name).run(ctx, **options))
        except Waiting as e:
            click.echo(f"{st.name}: {e}")
            break
    click.echo("")
    click.echo(format_funnel(ctx.store.funnel()))


@main.command("list")
@click.argument("kind", required=False)
def list_plugins(kind):
    """List the registered plug-ins of every kind (or one KIND), with what each does.

    Config selects plug-ins by name; `sftbuild init` writes each one's parameters.

    \b
    Example:
        sftbuild list              # every extension point
        sftbuild list filter       # quality filters only
    """
    try:
        rows = plugins.describe(kind)
    except plugins.PluginError as e:
        raise click.ClickException(str(e))
    last = None
    for k, name, summary in rows:
        if k != last:
            click.echo(("" if last is None else "\n") + f"{k}:")
            last = k
        click.echo(f"  {name:<22} {summary}")


@main.command("ops")
@click.argument("name", required=False)
@click.option("--opdb", is_flag=True, help="Also load and count the ops backed by torch's op_db (takes seconds).")
@click.option("--skipped", is_flag=True, help="List each op_db entry that is no op, and why (implies --opdb).")
def list_ops(name, opdb, skipped):
    """List the reference ops by family, or show one op NAME in full.

    \b
    Example:
        sftbuild ops                 # hand-written ops per family
        sftbuild ops --opdb          # plus torch op_db ops, and what was skipped
        sftbuild ops rope            # one op: semantics, I/O, dtypes, shapes
    """
    from sftbuild.ops import summary

    try:
        click.echo("\n".join(summary.report(name, opdb, skipped)))
    except KeyError as e:
        raise click.ClickException(str(e.args[0]) if e.args else "unknown op")


def plugin_defaults(kind: str) -> list[tuple[str, dict, str]]:
    """(name, default parameters, summary) of each plug-in of `kind`, for the config template."""
    import dataclasses

    return [(cls.name, dataclasses.asdict(cls.Params()), cls.summary()) for cls in plugins.registry(kind)]


def _report(ctx, stage, stats):
    flat = {k: v for k, v in (stats or {}).items() if not isinstance(v, (dict, list))}
    ctx.echo(f"{stage}: " + ", ".join(f"{k}={v}" for k, v in sorted(flat.items())))
    for k, v in (stats or {}).items():
        if isinstance(v, dict) and v:
            ctx.echo(f"  {k}: " + ", ".join(f"{a}={b}" for a, b in sorted(v.items())
                                            if not isinstance(b, (dict, list))))


if __name__ == "__main__":
    sys.exit(main())
