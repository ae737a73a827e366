"""The sftbuild command line: one command per stage, plus run, status and init."""
from __future__ import annotations

import functools
import json
import sqlite3
import sys
import time
from pathlib import Path

import click

from sftbuild import config as C
from sftbuild import plugins, sandbox, serving, stages
from sftbuild.context import Context, UserError, Waiting, make_executor
from sftbuild.producers import waiting
from sftbuild.funnel import blockers, format_funnel, format_runs
from sftbuild.store import Store, StoreError, write_failure


class PathArg(click.Path):
    """click.Path that refuses a NUL byte and a path the file system cannot look up, with a sentence."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and "\0" in value:
            self.fail(f"{value!r} contains a NUL character", param, ctx)
        try:
            return super().convert(value, param, ctx)
        except (OSError, ValueError) as e:
            self.fail(f"{value[:200]!r} cannot be looked up: {getattr(e, 'strerror', None) or e}", param, ctx)


def common(f=None, *, creates: bool = False, reads: bool = False, locks: bool = False):
    """Options every stage shares. Only a command that `creates` a workspace (harvest, run) makes
    one where none exists; every other command says that there is none. A command that only `reads`
    works on a workspace it cannot write; one that `locks` runs stages, and holds the workspace lock."""
    if f is None:
        return functools.partial(common, creates=creates, reads=reads, locks=locks)

    @click.option("--workspace", "-w", default="sftbuild-work", show_default=True,
                  type=PathArg(file_okay=False), help="Workspace folder holding the store.")
    @click.option("--config", "-c", "config_path", default=None, type=PathArg(dir_okay=False),
                  help="Config file (default: ./sftbuild.yaml when present).")
    @click.option("--executor", type=click.Choice(["local", "ray"]), default=None,
                  help="Where tasks run (default from config: local).")
    @click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
    @functools.wraps(f)
    def wrapper(workspace, config_path, executor, quiet, **kw):
        ex = store = None
        try:
            cfg = C.load(config_path)
            plugins.check_config(cfg)
            if executor:
                cfg.executor.kind = executor
            sandbox.configure(cfg.sandbox)
            sandbox.isolation()  # a named isolation that cannot run here is an error now, not per record
            ex = make_executor(cfg.executor.kind, cfg.executor.cpu_workers, cfg.executor.gpus,
                               progress=not quiet, ray_address=cfg.executor.ray_address)
            store = Store(workspace, create=creates, reads_only=reads)
            if locks:
                store.lock(" ".join(click.get_current_context().command_path.split()[1:]))
        except (C.ConfigError, StoreError, plugins.PluginError, sandbox.SandboxUnavailable) as e:
            for held in (ex, store):
                if held is not None:
                    held.close()
            raise click.ClickException(str(e))
        ctx = Context(store=store, config=cfg, executor=ex, echo=click.echo, progress=not quiet)
        try:
            return f(ctx, **kw)
        except (UserError, C.ConfigError, StoreError, plugins.PluginError) as e:
            raise click.ClickException(str(e))
        except (sqlite3.Error, OSError) as e:  # a full disk, a store gone read-only: the sentence, not a traceback
            said = write_failure(store.root, e)
            if said is None:
                raise
            raise click.ClickException(said)
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
@click.argument("path", default="sftbuild.yaml", type=PathArg(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(path, force):
    """Write a commented config file with every default.

    \b
    Example:
        sftbuild init && $EDITOR sftbuild.yaml
    """
    p = Path(path)
    try:
        if p.exists() and not force:
            raise click.ClickException(f"{p} exists; use --force to overwrite")
        p.write_text(C.template(plugin_defaults), encoding="utf-8")
    except OSError as e:
        raise click.ClickException(f"cannot write {str(p)[:200]}: {e.strerror or e}")
    click.echo(f"wrote {p}")


@main.command()
@click.argument("sources", nargs=-1)
@click.option("--allow-unpinned", is_flag=True, help="Accept git URLs without @REV.")
@common(creates=True, locks=True)
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
    _harvest_failures(ctx, stats)


def _harvest_failures(ctx, stats) -> None:
    """A harvest where any source failed exits non-zero, after the others were harvested."""
    from sftbuild.harvest.stage import ERRORS_REPORT

    failed, done = len(stats.get("errors") or {}), len(stats.get("sources") or {})
    if not failed:
        return
    where = f"each is named above with its reason, as in {ctx.workspace / ERRORS_REPORT}"
    if not done:
        raise click.ClickException(f"no source could be harvested: {failed} failed ({where})")
    raise click.ClickException(f"{failed} of {failed + done} sources could not be harvested ({where}); "
                               f"the other {done} {'was' if done == 1 else 'were'} harvested")


@main.command()
@common(locks=True)
def bind(ctx):
    """Bind every kernel that harvest did not bind to a reference and a launch, or say why not.

    \b
    Example:
        sftbuild bind && sftbuild bindings --how inferred
    """
    from sftbuild.bind import stage

    _stage(ctx, "bind", stage.run)


@main.command()
@click.option("--how", "how", default=None,
              help="Only bindings found this way (declared, exact, inferred, probed, package_reference, "
                   "file_reference), or `unbound`.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@common(reads=True)
def bindings(ctx, how, as_json):
    """List each record's binding: kernel, target, how it was found and the evidence, or why it is unbound.

    \b
    Example:
        sftbuild bindings --how probed
        sftbuild bindings --how unbound --json | jq .reason
    """
    from sftbuild.binding import HOWS, summary

    if how is not None and how not in (*HOWS, "unbound"):
        raise click.ClickException(f"--how {how!r}: expected one of {', '.join((*HOWS, 'unbound'))}")
    rows = ctx.store.binding_rows()
    table = []
    for rec in ctx.store.records():
        row = rows.get(rec.id)
        if row is None:
            continue  # not bound yet: `sftbuild bind` decides
        b = row["binding"]
        shown = row["how"] if row["status"] == "bound" else "unbound"
        if how is not None and shown != how:
            continue
        target = (b.target or b.kind) if b else ""
        item = {"id": rec.id, "kernel": rec.name, "source": rec.source, "kind": b.kind if b else None, "target": target,
                "how": shown, "by": (b.by or None) if b else None, "origin": row["origin"], "key": row["key"] or None,
                "evidence": row["evidence"], "reason": row["reason"]}
        if as_json:
            click.echo(json.dumps(item, sort_keys=True))
            continue
        how_by = f"{shown} ({b.by})" if b and b.by else shown
        tail = summary(row["evidence"]) if row["status"] == "bound" else row["reason"]
        table.append((rec.id[:12], rec.name, target or "-", how_by, tail or ""))
    if as_json:
        return
    if not table:
        click.echo("no binding: " + (f"no record is bound as {how!r}" if how and rows else
                                     "none stored yet; `sftbuild bind` binds what harvest did not"))
        return
    table.insert(0, ("id", "kernel", "target", "how (by)", "evidence, or why unbound"))
    widths = [max((len(r[i]) for r in table), default=0) for i in range(4)]
    for r in table:
        click.echo(("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[4]).rstrip())


@main.command()
@common(locks=True)
def describe(ctx):
    """Write instructions (English and Chinese) for every harvested kernel.

    \b
    Example:
        sftbuild describe && sftbuild status
    """
    from sftbuild.describe import stage

    _stage(ctx, "describe", stage.run)


@main.command()
@click.option("--max-slowdown", type=float, default=None,
              help="Drop kernels this many times slower than the torch baseline (e.g. 1.5).")
@click.option("--memcheck", type=click.Choice(["off", "sample", "all"]), default=None,
              help="compute-sanitizer memcheck on no, a sample of, or all records.")
@common(locks=True)
def validate(ctx, max_slowdown, memcheck):
    """Compile, check resources, and (on a GPU) check correctness and time each kernel.

    Without a GPU, records that need one wait in the state `needs_gpu`.

    \b
    Example:
        sftbuild validate --max-slowdown 1.5
    """
    from sftbuild.validate import stage

    if max_slowdown is not None:
        C.override(ctx.config, "validate.max_slowdown", max_slowdown, "--max-slowdown")
    if memcheck is not None:
        C.override(ctx.config, "validate.memcheck", memcheck, "--memcheck")
    _stage(ctx, "validate", stage.run)


@main.command()
@common(locks=True)
def dedupe(ctx):
    """Drop exact and near duplicates, contaminated and low-quality samples.

    Works on any record set and says which mode it used. After validation (once any record
    passed it) it drops duplicates, contaminated and low-quality records among the validated
    ones (reports/dedupe.json). Before validation it drops nothing: it clusters the harvested
    and bound records so that validate checks one record per cluster first, and the next only
    if that one fails (reports/clusters.json); `sftbuild validate` does this itself first.
    Decontamination: the config key `dedupe.benchmarks` lists the benchmarks you evaluate on.
    A benchmark name (e.g. `KernelBench`) drops, as `contaminated`, every record harvested for
    that benchmark (`sftbuild harvest "inductor:KernelBench/level1?benchmark=KernelBench"`) and
    every record from elsewhere whose code or program matches one of its programs; a path
    (a KernelBench-format folder or file, a dataset file, a fingerprint file) is matched by code.
    A benchmark not named is kept.

    \b
    Example:
        sftbuild dedupe && cat sftbuild-work/reports/dedupe.json
        # sftbuild.yaml:  dedupe: {benchmarks: [KernelBench]}
    """
    from sftbuild.dedupe import stage

    _stage(ctx, "dedupe", stage.run)


@main.group(invoke_without_command=True)
@click.pass_context
def review(cctx):
    """Sample records for human review, review them, and record verdicts.

    \b
    Example:
        sftbuild review sample           # the seeded, stratified sample and what it proves
        sftbuild review next --reviewer alice     # one item per screen, single keys
        sftbuild review serve --reviewer alice    # the same in a local browser page
        sftbuild review status           # progress, the defect-rate bound, kappa
    """
    if cctx.invoked_subcommand is None:  # drawing a sample unasked would replace the one under review
        raise click.UsageError(f"`sftbuild review` needs a command: {', '.join(review.list_commands(cctx))} "
                               f"(`sftbuild review sample` draws the sample)")


@review.command("sample")
@common(locks=True)
def review_sample(ctx):
    """Draw the seeded, stratified review sample and say what it proves.

    Its size is the larger of review.fraction and the zero-defect acceptance plan for
    review.defect_rate at review.confidence. Verdicts already given are never deleted.

    \b
    Example:
        sftbuild review sample
    """
    from sftbuild.review import stage

    _report(ctx, "review", stage.run(ctx))


@review.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@common(reads=True)
def review_status(ctx, as_json):
    """Progress, what the sample proves (a Clopper-Pearson bound), reject reasons and Cohen's kappa.

    \b
    Example:
        sftbuild review status
    """
    from sftbuild.output.stage import waits
    from sftbuild.review import stage

    st = stage.status(ctx, export_waits=waits)  # the gate is what export itself would say
    click.echo(json.dumps(st, indent=2, sort_keys=True) if as_json else "\n".join(stage.status_lines(st)))


@review.command("list")
@click.option("--pending", is_flag=True, help="Only records still waiting for a verdict.")
@click.option("--retired", is_flag=True, help="Records earlier samples held, with the verdicts they kept.")
@common(reads=True)
def review_list(ctx, pending, retired):
    """List the sampled records: stratum, where validated (gpu, interpreter, unbound), verdict, name.

    \b
    Example:
        sftbuild review list --pending
    """
    from sftbuild.review import stage

    rows = [r for r in stage.listing(ctx, retired=retired) if not (pending and r["verdict"])]
    if not rows:
        sampled = ctx.store.stage_config("review") is not None
        click.echo("no record: " + ("no review sample yet; `sftbuild review sample` draws one" if not sampled else
                                    "every sampled record has a verdict" if pending else
                                    "no earlier sample was replaced" if retired else "the review sample is empty"))
    for row in rows:
        click.echo(f"{row['record_id'][:12]}  {row['stratum']:<28} {row['where']:<11} "
                   f"{row['verdict'] or '-':<7} {row['name']}")


@review.command("show")
@click.argument("record_id")
@common(reads=True)
def review_show(ctx, record_id):
    """Print one record: what was checked and where, trials, errors, timing, versions, reference and code.

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


@review.command("next")
@click.option("--reviewer", required=True, help="Who is reviewing (required; resumes where they stopped).")
@common
def review_next(ctx, reviewer):
    """Review the sample in the terminal: one item per screen, single keys.

    a accept, r reject then a reason key, s skip, b back, q quit. Without a terminal,
    keys are read from stdin.

    \b
    Example:
        sftbuild review next --reviewer alice
    """
    from sftbuild.review import terminal

    if ctx.store.stage_config("review") is None:
        raise click.ClickException("no review sample yet: run `sftbuild review sample` first")
    if not reviewer.strip():
        raise click.ClickException("--reviewer needs a name")
    terminal.flow(ctx, reviewer.strip(), terminal.key_reader(sys.stdin))


@review.command("serve")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="Port on 127.0.0.1 (0 picks a free one).")
@click.option("--reviewer", default="", help="Reviewer name (else the page asks for one).")
@common
def review_serve(ctx, port, reviewer):
    """Review in a local browser page (127.0.0.1 only): keyboard shortcuts, reference beside code.

    \b
    Example:
        sftbuild review serve --reviewer alice   # then open the printed address
    """
    from sftbuild.review import web

    if ctx.store.stage_config("review") is None:
        raise click.ClickException("no review sample yet: run `sftbuild review sample` first")
    try:
        web.serve(ctx, port, reviewer)
    except OSError as e:
        raise click.ClickException(f"cannot listen on 127.0.0.1:{port}: {e.strerror or e}")


@review.command("packet")
@click.option("--format", "fmt", type=click.Choice(["label-studio", "argilla"]), required=True,
              help="Label Studio task import JSON, or an Argilla dataset folder.")
@click.argument("out", type=PathArg())
@common
def review_packet(ctx, fmt, out):
    """Write the review sample for Label Studio or Argilla; read verdicts back with `review import`.

    \b
    Example:
        sftbuild review packet --format label-studio tasks.json
        sftbuild review packet --format argilla review-argilla/
    """
    from sftbuild.review import packets

    written = packets.write(ctx, fmt, Path(out))
    click.echo(f"wrote {written} records to {out} ({fmt})")


@review.command("import")
@click.argument("file", type=PathArg(exists=True))
@common
def review_import(ctx, file):
    """Read verdicts from a Label Studio export JSON or an Argilla records file or folder.

    \b
    Example:
        sftbuild review import project-1-export.json
    """
    from sftbuild.review import packets

    st = packets.read(ctx, Path(file))
    click.echo(", ".join(f"{k}={v}" for k, v in st.items()))


@main.command()
@click.option("--force", is_flag=True, help="Replace an export that holds more records than this one.")
@click.option("--push-to-hub", "push_to_hub", metavar="OWNER/NAME", default=None,
              help="Also upload the export as a Hugging Face dataset repo (huggingface_hub, HF_TOKEN).")
@common(locks=True)
def export(ctx, force, push_to_hub):
    """Write the SFT tables (messages, prompt/completion, instruction/input/output), the RLVR
    tasks (verl, TRL) and the dataset card, as a folder `datasets.load_dataset` reads.

    Refuses while sampled records lack a verdict or the review sample failed, when there is
    nothing to export (it says why), and, without --force, when the export it would replace
    holds more records.

    \b
    Example:
        sftbuild export && python -c "import datasets; print(datasets.load_dataset('sftbuild-work/export'))"
        sftbuild export --push-to-hub me/gpu-kernels
    """
    from sftbuild.output import stage

    _report(ctx, "export", stage.run(ctx, force=force, push_to_hub=push_to_hub))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the funnel as JSON.")
@click.option("--dropped", "dropped_at", default=None, metavar="STAGE",
              type=click.Choice(list(stages.NAMES)),
              help="Instead, list each record a stage dropped: its reason and the first line of why.")
@common(reads=True)
def status(ctx, as_json, dropped_at):
    """Print the funnel: counts per stage and drop reason, overall and per source.

    Then the results a changed plug-in version, template, table or project version could change,
    with what changed: `validate: 12 records wait: runtime_check output_type v1→v2` (the stage's
    next run redoes them).

    \b
    Example:
        sftbuild status --json | jq .stages.validate
        sftbuild status --dropped validate     # which records, and why
    """
    if dropped_at:
        rows = [(rid, r) for rid, r in sorted(ctx.store.results_for(dropped_at).items()) if r["status"] == "dropped"]
        if not rows:
            click.echo(f"{dropped_at}: no record dropped under its current config")
        for rid, r in rows:
            rec, p = ctx.store.get(rid), r.get("payload") or {}
            why = str(p.get("detail") or p.get("why") or p.get("log")
                      or (ctx.store.binding_row(rid) or {}).get("reason") or "").strip().splitlines()
            click.echo(f"{rid[:12]}  {r['reason']:<16} {rec.source}: {rec.name}  {why[0][:160] if why else ''}")
        return
    funnel, runs = ctx.store.funnel(), ctx.store.runs()
    rerun = waiting(ctx.store)  # results whose plug-ins, templates, tables or project version changed
    if as_json:
        click.echo(json.dumps({**funnel, "runs": runs, "rerun": rerun, "blockers": blockers(funnel)}, indent=2,
                              sort_keys=True))
    else:
        click.echo("\n".join([*format_runs(runs), format_funnel(funnel), *rerun]))


@main.command()
@click.argument("sources", nargs=-1)
@common(creates=True, locks=True)
def run(ctx, sources):
    """Run every stage in pipeline order (see `sftbuild --help`).

    Export waits (and `run` says so) until every sampled record has a verdict.

    \b
    Example:
        sftbuild run && sftbuild status
    """
    harvested = {}
    for st in stages.STAGES:
        options = {"sources": list(sources)} if st.name == "harvest" else {}
        if st.name == "dedupe":
            options = {"clustered": True}  # validate's first step clustered these records moments ago
        try:
            began = time.monotonic()
            if st.first:
                stages.first(st.name).run(ctx)
            stats = stages.module(st.name).run(ctx, **options)
            _report(ctx, st.name, stats)
            click.echo(_pace(stats, time.monotonic() - began))
            harvested = stats if st.name == "harvest" else harvested
        except Waiting as e:
            click.echo(f"{st.name}: {e}")
            break
    click.echo("")
    click.echo(format_funnel(ctx.store.funnel()))
    _harvest_failures(ctx, harvested)


@main.command("list")
@click.argument("kind", required=False)
def list_plugins(kind):
    """List the registered plug-ins of every kind (or one KIND), with their versions and what each does.

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
        click.echo(f"  {name:<22} v{plugins.registry(k).get(name).version:<2} {summary}")  # the version keys its stage


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


@main.group()
def reward():
    """The RLVR reward: score candidates with the validator (see the README's RLVR section).

    \b
    Example:
        sftbuild reward serve --port 8777   # one warm validator for every trainer process
    """


@reward.command("serve")
@click.option("--port", default=8777, show_default=True, type=click.IntRange(0, 65535),
              help="Port on 127.0.0.1 (0 picks a free one).")
def reward_serve(port):
    """Serve the reward to every trainer process on this node, with its GPU workers kept warm.

    \b
    Example:
        sftbuild reward serve --port 8777 &
        export SFTBUILD_REWARD_URL=http://127.0.0.1:8777   # trl_reward / compute_score use it
    """
    from sftbuild.validate.reward import serve

    try:
        server = serve(port)
    except OSError as e:
        raise click.ClickException(f"cannot listen on 127.0.0.1:{port}: {e.strerror or e}")
    click.echo(f"reward service on http://127.0.0.1:{server.server_address[1]} (POST /score, GET /health)")
    serving.serve_until_interrupted(server)
@main.command("programs")
@click.argument("location", default="catalog")
@click.option("--programs", "count", type=click.IntRange(1, 100_000), default=None,
              help="How many programs a catalog gives (default: harvest.programs; a folder: all).")
@click.option("--seed", type=int, default=None, help="Catalog seed (default: harvest.seed).")
@click.option("--benchmark", default=None, help="Benchmark name of a folder's programs (default: the folder's name).")
@click.option("--limit", type=click.IntRange(0), default=50, show_default=True,
              help="Programs listed (0: all); the counts cover every program.")
@click.option("--json", "as_json", is_flag=True, help="JSON: {programs: [...], counts: {...}}.")
@click.option("--config", "-c", "config_path", default=None, type=click.Path(dir_okay=False),
              help="Config file (default: ./sftbuild.yaml when present).")
def list_programs(location, count, seed, benchmark, limit, as_json, config_path):
    """List the reference programs the torch-inductor source would compile, without a GPU.

    LOCATION is a catalog (`catalog`: all of them, mixed; `catalog:opdb`, `catalog:fusions`,
    `catalog:handwritten`, or several comma-separated), a folder of KernelBench-format modules,
    or one .py module. Each program: name, catalog, family or op, input shapes, dtypes, benchmark;
    then the counts per catalog.

    \b
    Example:
        sftbuild programs                          # the default catalog, first 50 rows and counts
        sftbuild programs catalog:fusions --programs 600 --seed 1 --limit 5
        sftbuild programs KernelBench/level1 --benchmark KernelBench --json
    """
    from sftbuild.harvest import inductor
    from sftbuild.harvest.catalog import counts, parse_location, row
    from sftbuild.harvest.sources import SourceError

    try:
        cfg = C.load(config_path)
        loc = location.removeprefix("inductor:")
        is_catalog = parse_location(loc) is not None
        skipped: list = []
        progs = inductor.programs(loc, count=count or (cfg.harvest.programs if is_catalog else None),
                                  seed=cfg.harvest.seed if seed is None else seed, benchmark=benchmark,
                                  skipped=skipped)
    except (C.ConfigError, SourceError, plugins.PluginError) as e:
        raise click.ClickException(str(e))
    shown = progs if not limit else progs[:limit]
    summary = {**counts(progs), "skipped_files": [{"file": f, "reason": r} for f, r in skipped]}
    if summary["opdb_ops"]:
        from sftbuild.harvest.catalog import opdb

        summary["opdb_not_programs"] = opdb.load_specs()["skipped"]  # op_db samples left out, by reason
    if as_json:
        click.echo(json.dumps({"programs": [row(p) for p in shown], "counts": summary}, indent=1))
        return
    line = "{:<48} {:<11} {:<40} {:<40} {:<16} {}".format
    if shown:
        click.echo(line("name", "catalog", "family or op", "input shapes", "dtypes", "benchmark"))
    for p in map(row, shown):
        shapes = " ".join("x".join(map(str, s)) or "scalar" for s in p["shapes"]) if p["shapes"] else "-"
        click.echo(line(p["name"], p["catalog"], str(p["family"] or "-")[:40], shapes[:40],
                        ",".join(p["dtypes"] or ["-"]), p["benchmark"] or "-"))
    if len(shown) < len(progs):
        click.echo(f"... {len(progs) - len(shown)} more (--limit 0 lists all)")
    per = ", ".join(f"{k} {v}" for k, v in summary["by_catalog"].items())
    click.echo(f"programs: {summary['programs']} ({per}); distinct: {summary['distinct']}"
               + (f"; distinct ops among single-op programs: {summary['opdb_ops']}" if summary["opdb_ops"] else ""))
    for f, r in skipped:
        click.echo(f"skipped {f}: {r}")
    if summary.get("opdb_not_programs"):
        left = summary["opdb_not_programs"]
        click.echo(f"op_db samples (or ops) left out: {sum(left.values())} ("
                   + "; ".join(f"{why}: {n}" for why, n in sorted(left.items(), key=lambda kv: -kv[1])) + ")")


def plugin_defaults(kind: str) -> list[tuple[str, dict, str]]:
    """(name, default parameters, summary) of each plug-in of `kind`, for the config template."""
    import dataclasses

    return [(cls.name, dataclasses.asdict(cls.Params()), cls.summary()) for cls in plugins.registry(kind)]


def _stage(ctx, name, run, **options):
    """A stage's own command: the stages before it that prepare records run first where they have
    work (bind and describe), then the stage; a stage with nothing to do says why."""
    for st in stages.STAGES[1:stages.NAMES.index(name)]:
        if st.prepares and ctx.store.alive(st.name):
            stats = stages.module(st.name).run(ctx)
            if stats:
                _report(ctx, st.name, stats)
    if stages.get(name).first:
        stages.first(name).run(ctx)
    stats = run(ctx, **options)
    if stats:
        _report(ctx, name, stats)
        if stats.get("waiting:needs_gpu"):
            ctx.echo(f"  needs_gpu: {stats['waiting:needs_gpu']} records compiled and wait for a GPU; "
                     f"`sftbuild {name}` on a machine with one picks them up")
        if stats.get("waiting:duplicate"):
            ctx.echo(f"  duplicate: {stats['waiting:duplicate']} records were not checked: each is a near "
                     f"duplicate of a record of its cluster that is validated ok or still waiting, and is "
                     f"checked only if that one is dropped (reports/clusters.json lists the clusters)")
        dropped = sorted(k.split(":", 1)[1] for k in stats if k.startswith("dropped:"))
        if dropped:
            ctx.echo(f"  dropped ({', '.join(dropped)}): `sftbuild status --dropped {name}` lists each record "
                     f"and why" + ("; `sftbuild bindings --how unbound` says why each unbound kernel found no "
                                   "reference" if "unbound" in dropped else ""))
    else:
        ctx.echo(f"{name}: nothing to do: {_idle_reason(ctx, name)}")


def _idle_reason(ctx, name) -> str:
    for st in stages.STAGES[:stages.NAMES.index(name)]:
        if ctx.store.stage_config(st.name) is None:
            return f"`{st.name}` has not run in this workspace yet (`sftbuild {st.name}`, or `sftbuild run`)"
    if not ctx.store.alive(name):
        return f"no record passed every stage before {name}; `sftbuild status` shows where each stopped and why"
    return "every record is done under this config; `sftbuild status` shows the funnel"


def _pace(stats, seconds: float) -> str:
    """`  took 42 s: 1,234 records, 29.4/s`: the records a stage settled this run (its ok, dropped and
    waiting counts), and how fast."""
    n = sum(v for k, v in (stats or {}).items() if isinstance(v, int) and (k == "ok" or ":" in k))
    rate = f", {n / seconds:.1f}/s" if n and seconds >= 0.05 else ""
    return f"  took {seconds:.0f} s: {n:,} records{rate}"


def _report(ctx, stage, stats):
    if (stats or {}).get("report_path"):  # the stage said what it did in its own line; the rest is in the file
        ctx.echo(f"  {stage} report: {stats['report_path']}")
        return
    flat = {k: v for k, v in (stats or {}).items() if not isinstance(v, (dict, list))}
    order = sorted(flat.items(), key=lambda kv: (kv[0] != "records", kv[0]))  # how many first, then how they ended
    ctx.echo(f"{stage}: " + (", ".join(f"{k}={v}" for k, v in order) or "no records"))
    for k, v in (stats or {}).items():
        if k == "errors":  # harvest names each failed source with its reason as it happens
            continue
        if isinstance(v, dict) and v:
            ctx.echo(f"  {k}: " + ", ".join(f"{a}={b}" for a, b in sorted(v.items())
                                            if not isinstance(b, (dict, list))))


if __name__ == "__main__":
    sys.exit(main())
