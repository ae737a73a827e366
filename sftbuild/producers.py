"""What produced a stage's results, as the stage's key holds it, and which stored results that leaves stale.

  * `producers(stage)`: the project's version, each plug-in of the stage's kinds (name -> version and
    the languages it reads) and a hash of each template or table its `reads` patterns match.
  * `fingerprint(stage)` hashes the bytes behind them without importing a plug-in; `current` uses it
    to answer from the last run or a per-user cache, so a stage with nothing to do imports nothing.
  * `changes` names what differs between two producers; `reached` the record languages that change
    can reach, so a change to a Triton-only check redoes Triton verdicts only (`unaffected`: the rest).
  * `stale` and `waiting` say which stored results were produced by other code than this, for
    `status` and for export's refusal.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from pathlib import Path

from sftbuild import plugins, stages
from sftbuild.record import LANGUAGES
from sftbuild.store import Store

PACKAGE = Path(__file__).parent


def producers(stage: str) -> dict:
    """What decides stage `stage`'s results besides its config, as its key holds it: the project's
    version, each plug-in of the stage's kinds as name -> [version, languages it reads or None for
    every one], and each file its `reads` patterns match -> a hash of its contents."""
    st = stages.get(stage)
    kinds = {kind: {cls.name: [cls.version, _languages(cls)] for cls in plugins.registry(kind)}
             for kind in st.plugins}
    files = {str(p.relative_to(PACKAGE)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
             for pattern in st.reads for p in sorted(PACKAGE.glob(pattern)) if p.is_file()}
    return {"sftbuild": _version(), "plugins": kinds, "files": files}


def fingerprint(stage: str) -> str:
    """A hash of the bytes behind `producers(stage)` that imports no plug-in: its kinds' modules and
    installed plug-ins, the files it reads, the project's version. Equal fingerprints mean equal
    producers (a plug-in's name, version and languages are written in its kind's folder), so `status`
    says nothing changed in milliseconds rather than seconds of imports."""
    st = stages.get(stage)
    h = hashlib.sha256(_version().encode())
    for kind in st.plugins:
        folder = PACKAGE.joinpath(*plugins.POINTS[kind].split(".")[1:])
        for path in sorted(folder.glob("*.py")):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
        for ep in importlib.metadata.entry_points(group=f"sftbuild.{kind}"):
            h.update(f"{ep.name}={ep.value}@{ep.dist.version if ep.dist else ''}".encode())
    for pattern in st.reads:
        for path in sorted(PACKAGE.glob(pattern)):
            h.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + (path.read_bytes() if path.is_file() else b""))
    return h.hexdigest()[:16]


def current(store: Store, stage: str) -> dict:
    """`producers(stage)`, without importing a plug-in where the same bytes were read before: from the
    stage's last run in this workspace, or from the per-user cache of earlier workspaces (importing the
    plug-ins costs seconds where they import torch, and `status` or a stage with nothing to do needs none)."""
    if _loaded(stage):
        return producers(stage)
    fp, row = fingerprint(stage), store.stage_producers(stage)
    if row and row["fingerprint"] == fp:
        return row["producers"]
    cached = _cache_dir() / f"{stage}-{fp}.json"
    try:
        return json.loads(cached.read_text())
    except (OSError, ValueError):
        made = producers(stage)
    try:  # a cache only: a home that cannot be written costs the imports next time, nothing else
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(made))
        os.replace(tmp, cached)
    except OSError:
        pass
    return made


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sftbuild" / "producers"


def _loaded(stage: str) -> bool:
    """Whether this process imported every plug-in of the stage already (then `producers` is cheap)."""
    return all(getattr(plugins.REGISTRIES.get(kind), "_loaded", False) for kind in stages.get(stage).plugins)


def _languages(cls) -> list[str] | None:
    langs = getattr(cls, "languages", None)  # a plug-in that names its languages reads no other
    return sorted(langs) if langs else None


def _version() -> str:
    try:
        return importlib.metadata.version("sftbuild")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def changes(old: dict | None, new: dict) -> list[str]:
    """What differs between two stages' `producers`, one phrase each: 'runtime_check output_type v1→v2'."""
    if not old:
        return ["results stored before they were keyed to what produced them"]
    out = [f"sftbuild {old.get('sftbuild')}→{new['sftbuild']}"] if old.get("sftbuild") != new["sftbuild"] else []
    for kind, name, was, now in _plugin_changes(old, new):
        out.append(f"{kind} {name} added (v{now[0]})" if was is None else f"{kind} {name} removed"
                   if now is None else f"{kind} {name} v{was[0]}→v{now[0]}")
    was, now = old.get("files", {}), new["files"]
    out += [f"{path} {'added' if path not in was else 'removed' if path not in now else 'changed'}"
            for path in sorted({*was, *now}) if was.get(path) != now.get(path)]
    return out


def reached(old: dict | None, new: dict) -> set[str]:
    """The record languages whose results a change from `old` to `new` producers could change: every
    language unless each change is a plug-in that names the languages it reads."""
    if not old or old.get("sftbuild") != new["sftbuild"] or old.get("files") != new["files"]:
        return set(LANGUAGES)
    out: set[str] = set()
    for _, _, was, now in _plugin_changes(old, new):
        for entry in (was, now):
            out |= set(entry[1] or LANGUAGES) if entry else set()
    return out


def _plugin_changes(old: dict, new: dict):
    """(kind, name, [version, languages] before or None, after or None) for each plug-in that differs."""
    for kind in sorted({*old.get("plugins", {}), *new["plugins"]}):
        was, now = old.get("plugins", {}).get(kind, {}), new["plugins"].get(kind, {})
        for name in sorted({*was, *now}):
            if was.get(name) != now.get(name):
                yield kind, name, was.get(name), now.get(name)


def unaffected(old: dict | None, new: dict) -> set[str]:
    """The record languages a change from `old` to `new` producers cannot reach."""
    return set(LANGUAGES) - reached(old, new)


def stale(store: Store, stage: str) -> tuple[set[str], list[str]]:
    """Records whose current result of `stage` was produced by other plug-ins, templates, tables or
    project version than this code's, and what changed; (empty, []) when none is."""
    chash = store.stage_config(stage)
    if chash is None:
        return set(), []
    row = store.stage_producers(stage)
    old = row["producers"] if row and row["config_hash"] == chash else None
    new = current(store, stage)
    if old == new:
        return set(), []
    return store.done_ids(stage, chash, languages=reached(old, new)), changes(old, new)


def waiting(store: Store) -> list[str]:
    """One line per stage whose results wait for a rerun because what produces them changed:
    'validate: 12 records wait: runtime_check output_type v1→v2'."""
    lines = []
    for stage in stages.NAMES:
        ids, what = stale(store, stage)
        if ids:
            lines.append(f"{stage}: {len(ids)} records wait: {', '.join(what)}")
    return lines
