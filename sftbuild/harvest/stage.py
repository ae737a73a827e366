"""The harvest stage: sources -> kernel records with provenance and declared bindings.

Each source is read by its kind (`sftbuild.harvest.kinds`) through the `Harvest` below;
the files of a tree pass the configured file filters (`sftbuild.harvest.filters`): the
path stage here, the data stage on the CPU workers. Every source is harvested on its
own: a source that fails (unreachable, missing, unsafe, malformed) is reported in
`stats["errors"]` and the others continue.
Files are parsed in parallel on the CPU pool; everything the harvest sees but
does not keep is recorded with a reason (store skips for files and unextracted
`__global__`/jit definitions, dropped results for kernels). Records are keyed by
code hash, so a rerun after a crash converges to the same record set.
"""
from __future__ import annotations

import errno
import fnmatch
import json
import re
import sqlite3
from collections import Counter
from pathlib import Path

from sftbuild.context import Context, StageRun, UserError
from sftbuild.executor import WorkerFailure
from sftbuild.harvest import filters as F
from sftbuild.harvest import license as L
from sftbuild.harvest import sources as S
from sftbuild.harvest import specs
from sftbuild.harvest.cuda_extract import (CALLER_EXT, calls_fit, include_dirs, late_includes, local_headers,
                                           macros_tested, needed_includes, prune_headers)
from sftbuild.harvest.kinds import KINDS
from sftbuild.harvest.triton_extract import module_of
from sftbuild.harvest.worker import CODE_EXT, CUDA_EXT, ParseTask, attach_launchers, find_callers, parse_files
from sftbuild.record import Record

ERRORS_REPORT = "reports/harvest_errors.json"  # under the workspace: the sources that failed the last harvest, and why
MAX_FOREIGN_LAUNCHERS = 3  # launchers from other modules appended to one record


def _modules_above(module: str, name: str, table: dict) -> list[tuple[str, str]]:
    """Keys of `table` for `name` in `module` or re-exported by a package above it, nearest first."""
    parts = module.split(".")
    return [k for i in range(len(parts), 0, -1) if (k := (".".join(parts[:i]), name)) in table]


def _fits(code: str, calls, record_code: str, launching: dict[str, set[str]]) -> bool:
    """A wrapper from another module fits a record where it redefines none of the record's names and
    calls no other record's launcher (it would compose kernels: an entry point of neither); the module
    it imports one from may re-export it."""
    return not _defined(code) & _defined(record_code) and not any(
        d == m or d.startswith(m + ".") for m, f in calls for d in launching.get(f, ()))


def _defined(code: str) -> set[str]:
    """The names a Python snippet defines at its top level with `def` or `class`."""
    return set(re.findall(r"(?m)^(?:async\s+)?(?:def|class)\s+(\w+)", code))


TORCH_INCLUDES = ("<ATen/", "<c10/", "<torch/", '"ATen/', '"c10/')
PYTHON_INCLUDES = ("<Python.h", '"Python.h', "<torch/extension.h", "<torch/python.h", '"torch/extension.h',
                   "<pybind11/")


def resolve(ctx: Context, names: list[str], errors: dict | None = None) -> list[S.Source]:
    """Sources for the given specs (default: the configured ones); failures go to `errors`."""
    errors = {} if errors is None else errors
    registry = specs.load_registry()
    for extra in ctx.config.harvest.registries:
        try:
            registry.update(specs.load_registry(extra))
        except S.SourceError as e:
            errors[extra] = str(e)
    out: list[S.Source] = []
    for spec in names or ctx.config.harvest.sources:
        if spec == specs.BUILTIN:
            out += _builtin(ctx, registry)
            continue
        try:
            out += specs.parse_spec(spec, registry)
        except S.SourceError as e:
            errors[spec] = str(e)
            ctx.echo(f"harvest: source {spec or repr(spec)}: {e} (skipped; other sources continue)")
    return out


def _builtin(ctx: Context, registry: dict[str, S.Source]) -> list[S.Source]:
    """`builtin`'s sources for this machine, less those that need a server this machine cannot reach:
    each of those is one line, and no failure (every server is tried once, for a few seconds)."""
    out, reached = [], {}
    for src in specs.builtin(registry, gpu=ctx.executor.gpu_count > 0):
        url = KINDS.create(src.kind).endpoint(src, ctx.workspace, ctx.config.harvest) if src.network else None
        if url is not None and url not in reached:
            reached[url] = S.reachable(url)
        if url is not None and not reached[url]:
            ctx.echo(f"harvest: source {src.name} skipped: it needs the network and {url} cannot be reached")
            continue
        out.append(src)
    return out


def run(ctx: Context, sources: list[str] | None = None) -> dict:
    cfg = ctx.config.harvest
    if not sources and not cfg.sources:
        raise UserError("nothing to harvest: harvest.sources is empty in the config and no source was named "
                        "on the command line (e.g. `sftbuild harvest torch-aten`)")
    stats: dict = {"sources": {}, "errors": {}}
    filters = F.configured(cfg.file_filters)
    chosen = resolve(ctx, list(sources or []), stats["errors"])
    # the default selection hashes as it did before filters were plug-ins, so older workspaces stay current
    key = {"min_kernel_lines": cfg.min_kernel_lines,
           **({"file_filters": cfg.file_filters} if cfg.file_filters
              else {"max_file_bytes": F.FILE_FILTERS.get("oversize").Params().max_bytes})}
    with StageRun(ctx, "harvest", key) as run:
        # records of sources not harvested now keep their results from earlier harvests
        ctx.store.carry_results("harvest", run.chash, {s.name for s in chosen})
        for src in chosen:
            h = Harvest(ctx, run, src, filters)
            try:
                h.run()
                stats["sources"][src.name] = h.kernels
                for reason, n in sorted(h.skipped.items()):  # what it saw and did not keep, by reason
                    stats.setdefault("skipped", {})[f"{src.name} {reason}"] = n
            except sqlite3.Error:
                raise  # the store cannot be written (a full disk): no source can go on; the CLI says why
            except (S.SourceError, OSError) as e:
                if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise
                network = src.network and not isinstance(e, S.SourceMissing)
                msg = str(e) + (" (this source needs the network)" if network else "")
                stats["errors"][src.name] = msg
                ctx.echo(f"harvest: source {src.name}: {msg} (skipped; other sources continue)")
            except Exception as e:  # noqa: BLE001 - one malformed source never stops the others
                msg = f"could not be read ({type(e).__name__}: {e})"
                stats["errors"][src.name] = msg
                ctx.echo(f"harvest: source {src.name}: {msg} (skipped; other sources continue)")
            if h.outside:
                shown = ", ".join(h.outside[:3]) + (", ..." if len(h.outside) > 3 else "")
                stats.setdefault("links_outside_root", {})[src.name] = len(h.outside)
                ctx.echo(f"harvest: source {src.name}: {len(h.outside)} symlink(s) point outside the source and "
                         f"were not followed ({shown})")
        run.flush()
        # ... and so do those of a source that failed this time
        ctx.store.carry_results("harvest", run.chash, {s.name for s in chosen if s.name not in stats["errors"]})
        _errors_report(ctx, stats["errors"])
        run.stats.update(stats)
    return run.stats


def _errors_report(ctx: Context, errors: dict) -> None:
    """ERRORS_REPORT: each source that failed this harvest, and why."""
    path = ctx.workspace / ERRORS_REPORT
    if not errors:
        path.unlink(missing_ok=True)  # an earlier harvest's failures are not this one's
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(errors, indent=1, sort_keys=True))


class Harvest:
    """One source's harvest, handed to its kind's `harvest(h)`; records everything it sees.

    A kind reads `h.src`, `h.cfg` (the harvest config) and `h.ctx`, and calls
    `h.tree(tree)` for a file tree, `h.emit(records, spans, drops)` for records it builds,
    and `h.skip(path, reason, detail, item)` for anything it sees but does not keep.
    """

    def __init__(self, ctx: Context, run: StageRun, src: S.Source, filters: list[F.FileFilter]):
        self.ctx, self.run_, self.src = ctx, run, src
        self.cfg = ctx.config.harvest
        self.path_filters = F.implementing(filters, "check_path")
        self.data_filters = F.implementing(filters, "check_data")
        self.kernels = 0  # kernels extracted (kept or dropped)
        self.outside: list[str] = []  # symlinks that point outside the source's root, never followed
        self._skips: list[tuple] = []
        self.skipped: Counter = Counter()  # skips by reason
        self._local: dict[tuple[str, str], dict] = {}  # (tree root, file) -> `_headers`, read by `_tested`

    def run(self) -> None:
        try:
            KINDS.create(self.src.kind).harvest(self)
        finally:
            self.flush_skips()

    # ---- bookkeeping shared by every kind ---------------------------------
    def skip(self, path: str, reason: str, detail: str = "", item: str = "") -> None:
        self._skips.append((self.src.name, path, reason, detail, item))
        self.skipped[reason] += 1
        if len(self._skips) >= 256:
            self.flush_skips()

    def flush_skips(self) -> None:
        if self._skips:
            self.ctx.store.add_skips(self._skips)
            self._skips = []

    def emit(self, records: list[Record], lines: list[tuple[int, int]], drops: list[str | None] | None = None):
        """Store records; each is kept, dropped as `trivial`, or dropped for its explicit reason."""
        self.ctx.store.add_records(records)
        for i, (r, span) in enumerate(zip(records, lines)):
            reason = drops[i] if drops else None
            detail = None
            if reason is None:
                detail = _trivial(span, self.cfg.min_kernel_lines)
                reason = "trivial" if detail else None
            if reason:
                self.run_.put(r.id, "dropped", reason, {"detail": detail} if detail else None)
            else:
                self.run_.put(r.id, "ok")
            self.kernels += 1

    def binding(self, rel: str, kernel: str) -> dict | None:
        for b in self.src.bindings:
            if b.get("kernel") == kernel and fnmatch.fnmatch(rel, b.get("path", "*")):
                out = {k: v for k, v in b.items() if k not in ("kernel", "path")}
                out["how"] = "declared"
                return out
        return None

    # ---- file trees ---------------------------------------------------------
    def tree(self, tree: S.Tree) -> None:
        todo: list[tuple[str, Path]] = []
        for rel, path, link in S.walk(tree):
            if link == S.NOT_UTF8:
                if rel.endswith(("/", *CODE_EXT)):
                    self.skip(rel, link, "the name is not UTF-8 text, so no record could name it")
                continue
            if link:
                self.skip(rel, link, "never followed")
                if link == "symlink_outside_root":
                    self.outside.append(rel)
                continue
            if not rel.endswith(CODE_EXT):
                continue
            try:
                size = path.stat().st_size
            except OSError as e:
                self.skip(rel, "unreadable", str(e))
                continue
            hit = F.check_path(self.path_filters, rel, size)
            if hit:
                self.skip(rel, *hit)
                continue
            todo.append((rel, path))
        preludes = self._preludes(todo)
        tested = self._tested(tree, todo)
        licenses = L.Resolver(tree.root, tree.license, self.src.license)
        batches = _batches([(rel, str(p), preludes.get(rel, b"")) for rel, p in todo],
                           getattr(self.ctx.executor, "cpu_workers", 1))
        tasks = [ParseTask(batch, self.data_filters, {rel: tested[rel] for rel, _, _ in batch if rel in tested})
                 for batch in batches]
        held: list[tuple[Record, tuple]] = []  # Triton records: other modules may launch or wrap them
        raw: list[tuple[Record, tuple]] = []  # CUDA records with a raw launcher, which another file may call
        launching: set[str] = set()  # every CUDA function of the tree that launches a kernel
        foreign: dict[tuple[str, str], list[str]] = {}  # (module, kernel) -> launchers in other modules
        wrappers: dict[tuple[str, str], list[str]] = {}  # (module, launcher) -> its callers in other modules
        device: dict[tuple[str, str], str] = {}  # (module, jit function) -> a module whose kernels call it
        for task, results in self.ctx.executor.map_cpu(parse_files, tasks, desc=f"harvest {self.src.name}"):
            if isinstance(results, WorkerFailure):
                for rel, _, _ in task.files:
                    self.skip(rel, "parse_error", f"{results.kind}: {results.detail[-300:]}")
                continue
            records, spans = [], []
            for res in results:
                for f in res.get("foreign") or []:
                    if f.get("device"):
                        device.setdefault((f["module"], f["kernel"]), f["from"])
                    else:
                        (wrappers if f.get("wraps") else foreign).setdefault((f["module"], f["kernel"]), []).append(
                            (f["code"], [tuple(c) for c in f.get("calls") or []]) if f.get("wraps") else f["code"])
                for rec, span in zip(*self._file_result(tree, res, licenses)):
                    launcher = rec.entry.get("launcher") if rec.language == "cuda" else None
                    if rec.language == "cuda":
                        launching |= {site["function"] for site in rec.entry.get("launch_sites") or ()}
                        launching |= {launcher["name"]} if launcher else set()
                    if rec.language == "triton":
                        held.append((rec, span))
                    elif launcher and not any("Tensor" in p for p in launcher.get("params") or ()):
                        raw.append((rec, span))
                    else:
                        records.append(rec)
                        spans.append(span)
            self.flush_skips()
            self.emit(records, spans)  # one transaction per batch of files
        if held:
            self.emit(*self._launched_elsewhere(held, foreign, device, wrappers))
        if raw and not tree.torch_headers:
            self.emit(*self._extensions_elsewhere(tree, raw, launching, todo))
        elif raw:
            self.emit([r for r, _ in raw], [s for _, s in raw])

    def _extensions_elsewhere(self, tree: S.Tree, raw, launching: set[str], todo) -> tuple[list[Record], list]:
        """Records whose raw launcher an extension function of another file calls (a binding `.cpp`
        whose functions take tensors and call the launchers the `.cu` files define), with those
        functions as `entry["extensions"]` (at most MAX_FOREIGN_LAUNCHERS, exposed ones first) and the
        headers they include added to the record's; the others unchanged."""
        names = sorted({rec.entry["launcher"]["name"] for rec, _ in raw})
        files = [(rel, str(p)) for rel, p in todo if rel.endswith(CALLER_EXT)]
        callers: dict[str, list[dict]] = {}
        for _, found in self.ctx.executor.map_cpu(find_callers, [(files, names, sorted(launching))],
                                                  desc="extension functions"):
            callers = {} if isinstance(found, WorkerFailure) else found
        out, read_ = [], {}

        def read(rel: str) -> dict:  # a file's headers, read once however many records name it
            if rel not in read_:
                read_[rel] = self._read_headers(tree, rel)
            return read_[rel]

        for rec, span in raw:
            fns = sorted(callers.get(rec.entry["launcher"]["name"]) or [], key=lambda f: not f.get("exposed"))
            fns = [f for f in fns if f["path"] != (rec.provenance or {}).get("path")
                   and calls_fit(f["code"], rec.entry["launcher"])][:MAX_FOREIGN_LAUNCHERS]
            if fns:
                entry = {**rec.entry, "extensions": fns}
                # the headers of the record's file and of each function's, cut to what they all use
                rels = [f["path"] for f in fns[::-1]] + [(rec.provenance or {}).get("path") or ""]
                locals_ = [read(rel) for rel in rels]
                used = rec.code + json.dumps([rec.entry.get("launcher"), fns])
                every = {k: v for lo in locals_ for k, v in (lo.get("headers") or {}).items()}
                fns = [{**f, "includes": needed_includes(f["code"], f["includes"], every)} for f in fns]
                entry["extensions"] = fns
                entry["headers"] = prune_headers(every, used)
                dirs = [d for lo in locals_ for d in lo.get("include_dirs") or []]
                entry["include_dirs"] = list(dict.fromkeys([*(entry.get("include_dirs") or []), *dirs]))
                entry["include_sets"] = list(dict.fromkeys([*(entry.get("include_sets") or []), "torch"]))
                rec = Record(language=rec.language, code=rec.code, source=rec.source, entry=entry,
                             binding=rec.binding, provenance=rec.provenance)
            out.append((rec, span))
        return [r for r, _ in out], [s for _, s in out]

    def _launched_elsewhere(self, held, foreign, device, wrappers) -> tuple[list[Record], list[tuple]]:
        """Records whose kernels only other modules of the package launch, with those launchers
        appended (the record then has entry points); a jit function only other modules' kernels call
        is a device helper, skipped as in its own file. A record whose own entry points other modules
        wrap (a public function that allocates the outputs and calls the launcher) gets those wrappers
        appended; the others unchanged. A kernel or launcher re-exported by a package above its module
        (`from .ops.k import f` in `pkg/__init__.py`) is found under it."""
        todo, out = [], []
        launching: dict[str, set[str]] = {}  # launcher name -> the modules defining one
        for rec, _ in held:
            where = module_of(rec.provenance.get("path") or "")
            for e in rec.entry.get("entry_points") or []:
                launching.setdefault(e["qualname"].split(".")[0], set()).add(where)
        for rec, span in held:
            module = module_of(rec.provenance.get("path") or "")
            names = rec.entry.get("kernels") or []
            own = [e["qualname"].split(".")[0] for e in rec.entry.get("entry_points") or []]
            if own:
                codes = [c for n in own for key in _modules_above(module, n, wrappers) for c, calls in wrappers[key]
                         if _fits(c, calls, rec.code, launching)]
            else:
                codes = [c for k in names for key in _modules_above(module, k, foreign) for c in foreign[key]]
            if not own and not codes and names and all(_modules_above(module, k, device) for k in names):
                where = device[_modules_above(module, names[0], device)[0]]
                self.skip(rec.provenance.get("path") or "", "device_helper",
                          f"{', '.join(names)} (called by the kernels of {where})", item=f"line {span[0]}")
                continue
            codes = list(dict.fromkeys(codes))
            (todo if codes else out).append((rec, span, codes[:MAX_FOREIGN_LAUNCHERS]))
        items = [(rec.code, codes) for rec, _, codes in todo]
        joined = []
        for _, results in self.ctx.executor.map_cpu(attach_launchers, [items], desc="launchers"):
            joined = [] if isinstance(results, WorkerFailure) else results
        for (rec, span, _), (code, entries) in zip(todo, joined or [(None, [])] * len(todo)):
            had = {e["qualname"] for e in rec.entry.get("entry_points") or []}
            if code and entries and (not had or {e["qualname"] for e in entries} - had):  # wrappers that add an entry
                rec = Record(language=rec.language, code=code, source=rec.source,
                             entry={**rec.entry, "entry_points": entries, "launched_from": "another module"
                                    if not rec.entry.get("entry_points") else "its own module, wrapped by another"},
                             binding=rec.binding, provenance=rec.provenance)
            out.append((rec, span, None))
        return [r for r, _, _ in out], [s for _, s, _ in out]

    def _preludes(self, todo) -> dict[str, bytes]:
        files = {}
        for rel, p in todo:
            if rel.endswith(CUDA_EXT):
                try:
                    files[rel] = p.read_bytes()
                except OSError:
                    continue
        return late_includes(files)

    def _tested(self, tree: S.Tree, todo) -> dict[str, list[str]]:
        """Per CUDA file with kernels and file-scope `#define`s, the macro names its own headers test
        (`cuda_extract.macros_tested`): such a define configures those headers (llm.c's
        `#define ENABLE_BF16` before `#include "common.h"` makes `floatX` bf16), so the file's
        closures keep it where main() has it."""
        out: dict[str, list[str]] = {}
        if tree.torch_headers:
            return out
        for rel, p in todo:
            if not rel.endswith(CUDA_EXT):
                continue
            try:
                data = p.read_bytes()
            except OSError:
                continue
            if b"__global__" not in data or b"define" not in data:
                continue
            key = (str(tree.root), rel)
            if key not in self._local:
                self._local[key] = self._read_headers(tree, rel, data)
            names = macros_tested((self._local[key].get("headers") or {}).values())
            if names:
                out[rel] = sorted(names)
        return out

    def _headers(self, tree: S.Tree, rel: str) -> dict:
        """The file's include folders and the tree's own headers it reaches, stored with each record
        so the compile gate finds them after the source tree is gone (see cuda_extract.local_headers).
        Those `_tested` read already are taken from it (once)."""
        if tree.torch_headers:  # torch's own tree: its headers come from the torch include set
            return {}
        kept = self._local.pop((str(tree.root), rel), None)
        return kept if kept is not None else self._read_headers(tree, rel)

    def _read_headers(self, tree: S.Tree, rel: str, src: bytes | None = None) -> dict:
        """`_headers`' reading of the file (`src`: its bytes, where the caller has read them)."""
        dirs = include_dirs(tree.root, rel, self.cfg.include_dirs)
        try:
            src = (tree.root / rel).read_bytes() if src is None else src
        except OSError:
            return {}
        headers = local_headers(tree.root, rel, dirs, src)
        return {"include_dirs": dirs, "headers": headers} if headers else {}

    def _file_result(self, tree: S.Tree, res: dict, licenses: L.Resolver):
        rel = res["rel"]
        if "skip" in res:
            self.skip(rel, *res["skip"])
            return [], []
        for o in res["others"]:
            self.skip(rel, o["reason"], o.get("detail", ""), item=f"line {o['line']}")
        if not res["kernels"]:
            return [], []
        lic, lic_source = licenses.resolve(rel, res["license"])
        records, spans = [], []
        local = self._headers(tree, rel) if res["language"] == "cuda" else {}
        for k in _merge_same_code(res["kernels"]):
            prov = dict(tree.provenance, path=rel, lines=list(k["lines"]), license=lic, license_source=lic_source)
            prov.setdefault("package", None)
            prov.setdefault("version", None)
            entry = _entry(res["language"], k, tree.torch_headers)
            entry.update(local)
            if local.get("headers"):  # each record carries its headers cut to what its code uses
                # what the code, its launcher and its file reference's steps name (a json dump holds each word)
                used = k["code"] + json.dumps([k.get("launcher"), k.get("file_reference")])
                entry["headers"] = prune_headers(local["headers"], used)
                entry["include_sets"] = header_sets(entry["include_sets"], entry["headers"])
            records.append(Record(language=res["language"], code=k["code"], source=self.src.name, entry=entry,
                                  binding=self.binding(rel, k["name"]), provenance=prov))
            spans.append(tuple(k["lines"]))
        return records, spans


def header_sets(sets: list[str], headers: dict[str, str]) -> list[str]:
    """`sets` with those the record's own headers need: torch's where one includes torch's headers
    (DeepSpeed's context.h includes <ATen/cuda/CUDAContext.h>), python's where one includes Python's."""
    names = [m.group(2) for text in headers.values() for m in INCLUDE_LINE.finditer(text)]
    out = list(sets)
    for name, prefixes in (("torch", TORCH_INCLUDES), ("python", PYTHON_INCLUDES)):
        bare = tuple(p.lstrip('<"') for p in prefixes)
        if name not in out and any(n.startswith(bare) for n in names):
            out.append(name)
    return out


INCLUDE_LINE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


def _merge_same_code(kernels: list[dict]) -> list[dict]:
    """Kernels whose closures are the same text (one wrapper launching both) are one record."""
    by_code: dict[str, dict] = {}
    for k in kernels:
        if k["code"] in by_code:
            by_code[k["code"]]["also"].append(k["name"])
        else:
            by_code[k["code"]] = dict(k, also=[])
    return list(by_code.values())


def _trivial(lines: tuple[int, int], min_lines: int) -> str | None:
    """Kernels of a line or two teach nothing and are usually stubs."""
    n = lines[1] - lines[0] + 1
    return f"{n} lines < {min_lines}" if n < min_lines else None


def _entry(language: str, k: dict, torch_headers: bool) -> dict:
    if language == "cuda":
        torch_set = torch_headers or any(i.split()[-1].startswith(TORCH_INCLUDES)
                                                             for i in k["includes"])
        return {"kernels": [k["name"], *k.get("also", [])], "params": k["params"], "template": k["template"],
                "launch_bounds": k["launch_bounds"], "launch_sites": k["launch_sites"],
                "instantiations": k["instantiations"], "includes": k["includes"], "needs": k["needs"],
                "include_sets": (["torch"] if torch_set else [])
                + (["python"] if any(i.split()[-1].startswith(PYTHON_INCLUDES) for i in k["includes"]) else []),
                **({"file_reference": k["file_reference"]} if k.get("file_reference") else {}),
                **({"launcher": k["launcher"]} if k.get("launcher") else {})}
    return {"kernels": [k["name"], *k.get("also", [])], "params": k["params"], "template": False,
            "launch_bounds": None,
            "launch_sites": k["launch_sites"], "includes": k["imports"], "needs": k["needs"],
            "include_sets": [], "helpers": k["helpers"], "autotune": k["autotune"],
            "heuristics": k["heuristics"], "entry_points": k.get("entry_points") or []}


def _batches(items: list, workers: int) -> list[list]:
    """Small batches: enough of them to keep every core busy, few enough to keep overhead low."""
    if not items:
        return []
    size = max(1, min(32, len(items) // (max(1, workers) * 4)))
    return [items[i:i + size] for i in range(0, len(items), size)]
