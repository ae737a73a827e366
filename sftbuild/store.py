"""The workspace store: SQLite in WAL mode under the workspace folder.

Tables
  records      immutable kernel records, keyed by code hash
  origins      every (source, path) a record's code was found at, with that provenance and the
               binding that source declared: the same code from two sources keeps both; a record
               read back carries the licence of its own origin as last harvested
  bindings     one current binding per record (sftbuild.binding.Binding), or `unbound` and why;
               `records.binding` is only read once, to migrate a workspace written before this table
  results      one row per (record, stage, config hash): status ok|dropped|waiting, and for
               stages keyed on the binding (describe, validate) the binding key it was reached under
  stage_state  the config hash each stage last ran under (defines "current")
  stage_producers  what produced the results under that hash: plug-in versions, file hashes, project
               version (sftbuild.producers.producers), the hash of the config alone, and a cheap
               fingerprint of the producers' files (sftbuild.producers.fingerprint); a stage with
               none was last run before results were keyed to their producers: its results are stale
  skips        things a harvest saw but did not turn into records, with a reason
  verdicts     append-only log of validation verdicts with their environment
  clusters     clusters of near-identical records found before validation: each member's cluster and
               rank (validate checks rank 0 first, the next only if those before it are dropped) and
               the link it joined by; replaced whole. cluster_state: the config hash they were found under
  reviews      the review sample and the reviewers' verdicts
  manifests    one row per stage run: config, tool versions, host, GPU and pid; a run that ended
               before finishing keeps `finished` empty and says why in `stats.interrupted`

`run.lock` beside the store: an OS lock that a command running stages holds for its life (see `lock`).

Every write is a small transaction, so a `kill -9` loses at most the work in
flight, and every insert is keyed so a rerun never duplicates.

A result of a binding-keyed stage counts (done_ids, alive, funnel) only while its binding key is
the record's current one: a record whose binding changes is described and validated again.
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import os
import sqlite3
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Iterator

from sftbuild.binding import Binding
from sftbuild.record import Record, stable_json
from sftbuild.stages import BINDING_KEYED, NAMES

STAGES = NAMES  # pipeline order, from the one stage table
ORIGINS = ("harvest", "bind")  # who set a binding: harvest's are declared or exact, and bind never replaces them
STATUSES = ("ok", "dropped", "waiting")
LOCK_FILE = "run.lock"

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    language TEXT NOT NULL,
    source TEXT NOT NULL,
    code TEXT NOT NULL,
    entry TEXT NOT NULL,
    binding TEXT,
    provenance TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS origins (
    record_id TEXT NOT NULL REFERENCES records(id),
    source TEXT NOT NULL,
    path TEXT NOT NULL,
    provenance TEXT NOT NULL,
    binding TEXT,
    added REAL NOT NULL,
    PRIMARY KEY (record_id, source, path)
);
CREATE TABLE IF NOT EXISTS results (
    record_id TEXT NOT NULL REFERENCES records(id),
    stage TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'dropped', 'waiting')),
    reason TEXT,
    payload TEXT NOT NULL DEFAULT '{}',
    updated REAL NOT NULL,
    binding_key TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (record_id, stage, config_hash)
);
CREATE INDEX IF NOT EXISTS results_stage ON results(stage, config_hash, status);
CREATE TABLE IF NOT EXISTS bindings (
    record_id TEXT PRIMARY KEY REFERENCES records(id),
    status TEXT NOT NULL CHECK (status IN ('bound', 'unbound')),
    key TEXT NOT NULL DEFAULT '',
    how TEXT,
    origin TEXT NOT NULL,
    binding TEXT,
    reason TEXT,
    evidence TEXT NOT NULL DEFAULT '{}',
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS stage_state (
    stage TEXT PRIMARY KEY,
    config_hash TEXT NOT NULL,
    config TEXT NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS stage_producers (
    stage TEXT PRIMARY KEY,
    config_hash TEXT NOT NULL,
    base TEXT NOT NULL,
    producers TEXT NOT NULL,
    fingerprint TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS skips (
    source TEXT NOT NULL,
    path TEXT NOT NULL,
    item TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL,
    detail TEXT,
    PRIMARY KEY (source, path, item)
);
CREATE TABLE IF NOT EXISTS verdicts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    verdict TEXT NOT NULL,
    reason TEXT,
    detail TEXT NOT NULL,
    env TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS clusters (
    record_id TEXT PRIMARY KEY REFERENCES records(id),
    cluster TEXT NOT NULL,
    rank INTEGER NOT NULL,
    link TEXT NOT NULL DEFAULT '{}',
    config_hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cluster_state (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    config_hash TEXT NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS reviews (
    record_id TEXT PRIMARY KEY,
    sample_key TEXT NOT NULL,
    stratum TEXT NOT NULL,
    verdict TEXT CHECK (verdict IS NULL OR verdict IN ('accept', 'reject')),
    reason TEXT,
    reviewer TEXT,
    decided REAL
);
CREATE TABLE IF NOT EXISTS manifests (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT,
    stage TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    config TEXT NOT NULL,
    env TEXT NOT NULL,
    started REAL NOT NULL,
    finished REAL,
    stats TEXT
);
"""


class StoreError(Exception):
    pass


class Store:
    """A handle on one workspace. Cheap to open; one per process."""

    def __init__(self, workspace: str | os.PathLike, create: bool = True, reads_only: bool = False):
        """Open the workspace; without `create`, a folder that holds no store is a StoreError. With
        `reads_only` (a command that only inspects), a workspace that cannot be written is opened
        read-only (`self.readonly`) instead of refused."""
        self.root = Path(workspace)
        self.path = self.root / "sftbuild.db"
        self.readonly = False
        try:
            self._check_root(create, reads_only)
        except (OSError, ValueError) as e:
            raise StoreError(f"the workspace {str(self.root)[:200]!r} cannot be used: "
                             f"{getattr(e, 'strerror', None) or e}") from None
        if self.readonly:
            self._open_readonly()
            return
        try:
            self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.executescript(SCHEMA)
            self._migrate()
        except sqlite3.DatabaseError as e:
            raise StoreError(write_failure(self.root, e) if "full" in str(e) else
                             f"{self.path} is not a usable sftbuild workspace: {e}") from e

    def _open_readonly(self) -> None:
        """A store on a folder nobody may write: `mode=ro` needs to write the WAL index beside it, so
        the file is read as immutable (what a run still writing there adds is not seen)."""
        try:
            self.db = sqlite3.connect(f"{self.path.absolute().as_uri()}?immutable=1", uri=True,
                                      isolation_level=None)
            self.db.execute("SELECT 1 FROM records LIMIT 1").fetchall()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not a usable sftbuild workspace: {e}") from e

    def _check_root(self, create: bool, reads_only: bool = False) -> None:
        if not create and not self.path.is_file():
            raise StoreError(f"there is no sftbuild workspace at {self.root}: `sftbuild harvest` or "
                             f"`sftbuild run` creates one, or pass the right folder with -w")
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"the workspace {self.root} is a file, not a folder")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the workspace {self.root}: {e.strerror or e}") from None
        if not os.access(self.root, os.W_OK) or (self.path.exists() and not os.access(self.path, os.W_OK)):
            if reads_only and self.path.is_file():
                self.readonly = True
                return
            raise StoreError(f"the workspace {self.root} is not writable: this command records its run there "
                             f"(status, bindings and review status, list and show only read it)")

    def close(self) -> None:
        self.db.close()
        if getattr(self, "_lock", None):
            self._lock.close()  # closing the file releases the lock
            self._lock = None

    def tx(self):
        """A write transaction: `with store.tx(): ...`."""
        return _Tx(self.db)

    def _migrate(self) -> None:
        """A workspace written before bindings had their table: key results, move bindings over; one
        written before origins: each record's own source and provenance is its first origin."""
        if self.db.execute("SELECT 1 FROM records LIMIT 1").fetchone() and \
                not self.db.execute("SELECT 1 FROM origins LIMIT 1").fetchone():
            rows = self.db.execute("SELECT id, source, provenance, created FROM records").fetchall()
            with self.tx():
                for rid, source, prov, created in rows:
                    path = str((json.loads(prov) or {}).get("path") or "")
                    self.db.execute("INSERT OR IGNORE INTO origins VALUES (?,?,?,?,NULL,?)",
                                    (rid, source, path, prov, created))
        cols = {r[1] for r in self.db.execute("PRAGMA table_info(results)").fetchall()}
        legacy = self.db.execute("SELECT id, binding FROM records WHERE binding IS NOT NULL").fetchall()
        if "binding_key" in cols and not legacy:
            return
        with self.tx():
            if "binding_key" not in cols:
                self.db.execute("ALTER TABLE results ADD COLUMN binding_key TEXT NOT NULL DEFAULT ''")
            for rid, text in legacy:
                try:
                    b = Binding.from_dict(json.loads(text))
                except (ValueError, TypeError):
                    continue  # a binding no stage could read: the record is unbound, as it was in effect
                # `manifest` was written by harvest and by the table binder alike: harvest's is the safe guess
                origin = "harvest" if b.how in ("declared", "exact") else "bind"
                self._put_binding(rid, b, origin, None, {})
            self.db.execute("UPDATE records SET binding=NULL WHERE binding IS NOT NULL")
            if "binding_key" not in cols:  # the results so far were reached under the bindings just moved
                marks = ",".join("?" * len(BINDING_KEYED))
                self.db.execute(
                    f"UPDATE results SET binding_key=(SELECT key FROM bindings b WHERE b.record_id=results.record_id) "
                    f"WHERE stage IN ({marks}) AND record_id IN (SELECT record_id FROM bindings)", BINDING_KEYED)

    # ---- records -------------------------------------------------------
    def add_records(self, records: Iterable[Record]) -> int:
        """Insert records not seen before; returns how many were new.

        Every (source, path) the code is found at is kept as an origin, with its provenance and
        the binding that source declared (see `origins`). A record that carries a binding (declared
        by its source, or exact) sets the stored one, also when the code was stored before, unless
        another source declared the current one: then the first declaration stays current and the
        second is kept in its origin. A record without one leaves the stored binding alone."""
        new = 0
        now = time.time()
        with self.tx():
            (seq,) = self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM records").fetchone()
            for r in records:
                seq += 1
                cur = self.db.execute(
                    "INSERT OR IGNORE INTO records VALUES (?,?,?,?,?,?,?,?,?)",
                    (r.id, seq, r.language, r.source, r.code, stable_json(r.entry), None,
                     stable_json(r.provenance), now),
                )
                new += cur.rowcount
                b = r.binding
                self.db.execute("INSERT OR REPLACE INTO origins VALUES (?,?,?,?,?,?)",
                                (r.id, r.source, str((r.provenance or {}).get("path") or ""),
                                 stable_json(r.provenance), stable_json(b.to_dict()) if b else None, now))
                if b and not self._declared_elsewhere(r.id, r.source):
                    self._put_binding(r.id, b, "harvest", None, {})
        return new

    def _declared_elsewhere(self, record_id: str, source: str) -> bool:
        """Whether the record's current binding was declared by a source other than `source`."""
        row = self.db.execute("SELECT origin, binding FROM bindings WHERE record_id=?", (record_id,)).fetchone()
        if not row or row[0] != "harvest" or not row[1]:
            return False
        by = json.loads(row[1]).get("by") or ""
        return by.startswith("source:") and by != f"source:{source}"

    def origins(self, record_id: str) -> list[dict]:
        """Where the record's code was found, first seen first: source, path, provenance, and the
        binding that source declared (None when it declared none)."""
        rows = self.db.execute("SELECT source, path, provenance, binding FROM origins WHERE record_id=? "
                               "ORDER BY added, source, path", (record_id,)).fetchall()
        return [{"source": src, "path": path, "provenance": json.loads(prov),
                 "binding": json.loads(b) if b else None} for src, path, prov, b in rows]

    def carry_results(self, stage: str, chash: str, keep_sources: set[str]) -> int:
        """Give records of sources outside `keep_sources` that have no `stage` result under `chash`
        their latest result under an earlier config, so a setting changed for one harvest does not
        hide what earlier harvests of other sources found. Returns how many were carried."""
        rows = self.db.execute(
            "SELECT s.record_id, s.status, s.reason, s.payload, s.binding_key, r.source FROM results s "
            "JOIN records r ON r.id = s.record_id WHERE s.stage=? AND s.config_hash != ? "
            "AND s.record_id NOT IN (SELECT record_id FROM results WHERE stage=? AND config_hash=?) "
            "ORDER BY s.updated", (stage, chash, stage, chash)).fetchall()
        latest = {r[0]: r for r in rows if r[5] not in keep_sources}  # the newest wins
        now = time.time()
        with self.tx():
            for rid, status, reason, payload, key, _ in latest.values():
                self.db.execute("INSERT OR IGNORE INTO results VALUES (?,?,?,?,?,?,?,?)",
                                (rid, stage, chash, status, reason, payload, now, key))
        return len(latest)

    # ---- bindings ------------------------------------------------------
    def put_binding(self, record_id: str, binding: Binding | None, origin: str = "bind",
                    reason: str | None = None, evidence: dict | None = None) -> None:
        """Set a record's one current binding, or mark it unbound with `reason` (binding None)."""
        with self.tx():
            self._put_binding(record_id, binding, origin, reason, evidence or {})

    def _put_binding(self, record_id, binding, origin, reason, evidence) -> None:
        if origin not in ORIGINS:
            raise ValueError(f"bad binding origin {origin!r}")
        if binding is None:
            if not reason:
                raise ValueError("an unbound record needs a reason")
            row = ("unbound", "", None, None, reason, evidence)
        else:
            row = ("bound", binding.key, binding.how, stable_json(binding.to_dict()), None,
                   evidence or binding.evidence)
        status, key, how, text, why, ev = row
        self.db.execute("INSERT OR REPLACE INTO bindings VALUES (?,?,?,?,?,?,?,?,?)",
                        (record_id, status, key, how, origin, text, why, stable_json(ev), time.time()))

    def binding(self, record_id: str) -> Binding | None:
        """A record's current binding, or None when it has none (or is unbound)."""
        row = self.binding_row(record_id)
        return row["binding"] if row else None

    def binding_row(self, record_id: str) -> dict | None:
        """The stored row: status bound|unbound, key, how, origin, binding (a Binding), reason, evidence."""
        rows = self.binding_rows([record_id])
        return rows.get(record_id)

    def binding_rows(self, ids: Iterable[str] | None = None) -> dict[str, dict]:
        """Stored binding rows by record id (all of them, or those of `ids`)."""
        q = "SELECT record_id, status, key, how, origin, binding, reason, evidence FROM bindings"
        if ids is None:
            rows = self.db.execute(q).fetchall()
        else:
            rows = [r for i in ids for r in self.db.execute(q + " WHERE record_id=?", (i,)).fetchall()]
        keys = ("status", "key", "how", "origin", "binding", "reason", "evidence")
        return {r[0]: {**dict(zip(keys, r[1:])), "binding": Binding.from_dict(json.loads(r[5])) if r[5] else None,
                       "evidence": json.loads(r[7])} for r in rows}

    def get(self, record_id: str) -> Record:
        row = self.db.execute(RECORD_SELECT + " WHERE r.id=?", (record_id,)).fetchone()
        if row is None:
            raise StoreError(f"no record {record_id}")
        return _with_origins(_row_record(row), self.origins(record_id))

    def find(self, prefix: str) -> Record:
        if not prefix:
            raise StoreError("a record id prefix cannot be empty")
        # a prefix is text, not a pattern: `%` and `_` in it match only themselves
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self.db.execute("SELECT id FROM records WHERE id LIKE ? ESCAPE '\\' LIMIT 2",
                               (escaped + "%",)).fetchall()
        if len(rows) != 1:
            raise StoreError(f"{'no' if not rows else 'more than one'} record matches {prefix!r}")
        return self.get(rows[0][0])

    def records(self, ids: Iterable[str] | None = None) -> Iterator[Record]:
        if ids is None:
            q = self.db.execute(RECORD_SELECT + " ORDER BY r.seq")
            several = {r[0] for r in self.db.execute(
                "SELECT record_id FROM origins GROUP BY record_id HAVING COUNT(*) > 1").fetchall()}
            for row in q.fetchall():
                rec = _row_record(row)
                yield _with_origins(rec, self.origins(rec.id)) if rec.id in several else rec
        else:
            for i in ids:
                yield self.get(i)

    def count_records(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM records").fetchone()[0]

    # ---- stage state and results --------------------------------------
    def set_stage_config(self, stage: str, chash: str, config: Any, producers: dict | None = None,
                         base: str = "", fingerprint: str = "") -> None:
        """Make `chash` the stage's current key; `producers`: what produced the results under it."""
        with self.tx():
            self.db.execute("INSERT OR REPLACE INTO stage_state VALUES (?,?,?,?)",
                            (stage, chash, stable_json(config), time.time()))
            if producers is not None:
                self.db.execute("INSERT OR REPLACE INTO stage_producers VALUES (?,?,?,?,?)",
                                (stage, chash, base, stable_json(producers), fingerprint))

    def stage_producers(self, stage: str) -> dict | None:
        """{config_hash, base, producers, fingerprint} as the stage's last run recorded them, or None."""
        row = self.db.execute("SELECT config_hash, base, producers, fingerprint FROM stage_producers WHERE stage=?",
                              (stage,)).fetchone()
        return {"config_hash": row[0], "base": row[1], "producers": json.loads(row[2]), "fingerprint": row[3]} \
            if row else None

    def carry_languages(self, stage: str, old: str, new: str, languages: set[str]) -> int:
        """Copy `stage`'s results under key `old` to key `new` for records of `languages` that have
        none under `new`: what changed between the keys cannot reach them. Returns how many."""
        marks = ",".join("?" * len(languages))
        with self.tx():
            return self.db.execute(
                f"INSERT OR IGNORE INTO results SELECT s.record_id, s.stage, ?, s.status, s.reason, s.payload, "
                f"s.updated, s.binding_key FROM results s JOIN records r ON r.id = s.record_id "
                f"WHERE s.stage=? AND s.config_hash=? AND r.language IN ({marks})",
                (new, stage, old, *sorted(languages))).rowcount

    def stage_config(self, stage: str) -> str | None:
        row = self.db.execute("SELECT config_hash FROM stage_state WHERE stage=?", (stage,)).fetchone()
        return row[0] if row else None

    def put_result(self, record_id: str, stage: str, chash: str, status: str,
                   reason: str | None = None, payload: dict | None = None) -> None:
        self.put_results([(record_id, stage, chash, status, reason, payload)])

    def put_results(self, rows: Iterable[tuple]) -> None:
        """Rows of (record_id, stage, chash, status, reason, payload[, binding_key]); a binding key
        left out or None is the record's current one (for stages keyed on the binding)."""
        now = time.time()
        with self.tx():
            for record_id, stage, chash, status, reason, payload, *key in rows:
                if status not in STATUSES:
                    raise ValueError(f"bad status {status!r}")
                key = key[0] if key and key[0] is not None else self._current_key(record_id, stage)
                self.db.execute(
                    "INSERT OR REPLACE INTO results VALUES (?,?,?,?,?,?,?,?)",
                    (record_id, stage, chash, status, reason, stable_json(payload or {}), now, key))

    def _current_key(self, record_id: str, stage: str) -> str:
        if stage not in BINDING_KEYED:
            return ""
        row = self.db.execute("SELECT key FROM bindings WHERE record_id=?", (record_id,)).fetchone()
        return row[0] if row else ""

    def result(self, record_id: str, stage: str, chash: str | None = None) -> dict | None:
        chash = chash or self.stage_config(stage)
        row = self.db.execute(
            "SELECT status, reason, payload FROM results WHERE record_id=? AND stage=? AND config_hash=?",
            (record_id, stage, chash)).fetchone()
        if row is None:
            return None
        return {"status": row[0], "reason": row[1], "payload": json.loads(row[2])}

    def done_ids(self, stage: str, chash: str, statuses=("ok", "dropped"), languages=None) -> set[str]:
        """Records with a result of `stage` under `chash` in one of `statuses` (of `languages`, when
        given); for a binding-keyed stage, only results reached under the record's current binding."""
        marks = ",".join("?" * len(statuses))
        langs = sorted(languages or ())
        of = f" AND s.record_id IN (SELECT id FROM records WHERE language IN ({','.join('?' * len(langs))}))"
        rows = self.db.execute(
            f"SELECT s.record_id FROM results s {_CURRENT_KEY} WHERE s.stage=? AND s.config_hash=? "
            f"AND s.status IN ({marks}){_keyed(stage)}{of if languages is not None else ''}",
            (stage, chash, *statuses, *langs)).fetchall()
        return {r[0] for r in rows}

    def alive(self, before: str) -> list[Record]:
        """Records that passed every stage before `before`, under each stage's current config."""
        prior = STAGES[: STAGES.index(before)]
        ids = None
        for stage in prior:
            chash = self.stage_config(stage)
            if chash is None:
                return []
            ok = self.done_ids(stage, chash, statuses=("ok",))
            ids = ok if ids is None else ids & ok
        if ids is None:
            return list(self.records())
        return [r for r in self.records() if r.id in ids]

    def results_for(self, stage: str) -> dict[str, dict]:
        chash = self.stage_config(stage)
        rows = self.db.execute(
            "SELECT record_id, status, reason, payload FROM results WHERE stage=? AND config_hash=?",
            (stage, chash)).fetchall()
        return {r[0]: {"status": r[1], "reason": r[2], "payload": json.loads(r[3])} for r in rows}

    # ---- skips ---------------------------------------------------------
    def add_skip(self, source: str, path: str, reason: str, detail: str = "", item: str = "") -> None:
        with self.tx():
            self.db.execute("INSERT OR REPLACE INTO skips VALUES (?,?,?,?,?)",
                            (source, path, item, reason, detail))

    def add_skips(self, rows: Iterable[tuple]) -> None:
        """Many skips, (source, path, reason, detail, item) each, in one transaction."""
        with self.tx():
            for source, path, reason, detail, item in rows:
                self.db.execute("INSERT OR REPLACE INTO skips VALUES (?,?,?,?,?)",
                                (source, path, item, reason, detail))

    def skips(self) -> list[dict]:
        rows = self.db.execute("SELECT source, path, item, reason, detail FROM skips").fetchall()
        return [dict(zip(("source", "path", "item", "reason", "detail"), r)) for r in rows]

    # ---- verdict log ---------------------------------------------------
    def log_verdict(self, record_id: str, stage: str, verdict: str, reason: str | None,
                    detail: dict, env: dict) -> None:
        with self.tx():
            self.db.execute(
                "INSERT INTO verdicts (record_id, stage, verdict, reason, detail, env, created) "
                "VALUES (?,?,?,?,?,?,?)",
                (record_id, stage, verdict, reason, stable_json(detail), stable_json(env), time.time()))

    def put_verdict(self, record_id: str, stage: str, chash: str, status: str, reason: str | None,
                    payload: dict, env: dict, detail: dict | None = None, binding_key: str | None = None) -> None:
        """A stage result and its verdict-log entry (detail, default the payload), committed together;
        `binding_key`: the key of the binding it was reached under (default: the current one)."""
        now = time.time()
        with self.tx():
            if binding_key is None:
                binding_key = self._current_key(record_id, stage)
            self.db.execute("INSERT OR REPLACE INTO results VALUES (?,?,?,?,?,?,?,?)",
                            (record_id, stage, chash, status, reason, stable_json(payload), now, binding_key))
            self.db.execute(
                "INSERT INTO verdicts (record_id, stage, verdict, reason, detail, env, created) "
                "VALUES (?,?,?,?,?,?,?)",
                (record_id, stage, status, reason, stable_json(payload if detail is None else detail),
                 stable_json(env), now))

    def verdicts(self, record_id: str) -> list[dict]:
        rows = self.db.execute(
            "SELECT stage, verdict, reason, detail, env, created FROM verdicts WHERE record_id=? ORDER BY seq",
            (record_id,)).fetchall()
        return [{"stage": r[0], "verdict": r[1], "reason": r[2], "detail": json.loads(r[3]),
                 "env": json.loads(r[4]), "created": r[5]} for r in rows]

    # ---- clusters before validation --------------------------------------
    def set_clusters(self, chash: str, rows: Iterable[tuple]) -> None:
        """Replace every cluster with `rows` ((record_id, cluster, rank, link) each) found under `chash`,
        in one transaction: a kill leaves the old clusters or the new ones, never a mix."""
        with self.tx():
            self.db.execute("DELETE FROM clusters")
            for rid, cluster, rank, link in rows:
                self.db.execute("INSERT INTO clusters VALUES (?,?,?,?,?)",
                                (rid, cluster, rank, stable_json(link or {}), chash))
            self.db.execute("INSERT OR REPLACE INTO cluster_state VALUES (0,?,?)", (chash, time.time()))

    def clusters(self) -> dict[str, dict]:
        """record id -> {"cluster", "rank", "link"} for every member of a stored cluster."""
        rows = self.db.execute("SELECT record_id, cluster, rank, link FROM clusters").fetchall()
        return {r[0]: {"cluster": r[1], "rank": r[2], "link": json.loads(r[3])} for r in rows}

    def clusters_hash(self) -> str | None:
        """The config hash the stored clusters were found under (None: never clustered)."""
        row = self.db.execute("SELECT config_hash FROM cluster_state WHERE id=0").fetchone()
        return row[0] if row else None

    # ---- review --------------------------------------------------------
    # The `reviews` row of a record holds its place in the current sample (`sample_key`, '' once a
    # later sample leaves it out), how many reviewers it needs (`copies`) and the verdict that counts.
    # Every reviewer's verdict is appended to `review_log`, keyed by record id (the code hash), and
    # never deleted: a new sample keeps the verdicts of records it still holds and retires the rest.
    REVIEW_SCHEMA = """
    CREATE TABLE IF NOT EXISTS review_log (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        record_id TEXT NOT NULL,
        reviewer TEXT NOT NULL,
        verdict TEXT NOT NULL CHECK (verdict IN ('accept', 'reject')),
        reason TEXT,
        via TEXT,
        decided REAL NOT NULL
    );
    CREATE INDEX IF NOT EXISTS review_log_record ON review_log(record_id, seq);
    """

    def _review_tables(self) -> None:
        if getattr(self, "_review_ready", False):
            return
        cols = {r[1] for r in self.db.execute("PRAGMA table_info(reviews)")}
        if self.readonly:  # what the upgrade would add, as temporary tables that shadow the stored ones
            if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name='review_log'").fetchone():
                self.db.executescript(self.REVIEW_SCHEMA.replace("CREATE TABLE", "CREATE TEMP TABLE")
                                      .replace("CREATE INDEX IF NOT EXISTS review_log_record",
                                               "CREATE INDEX IF NOT EXISTS temp.review_log_record"))
            if "copies" not in cols:
                self.db.execute("CREATE TEMP TABLE reviews AS SELECT *, 1 AS copies FROM main.reviews")
        else:
            self.db.executescript(self.REVIEW_SCHEMA)
            if "copies" not in cols:
                self.db.execute("ALTER TABLE reviews ADD COLUMN copies INTEGER NOT NULL DEFAULT 1")
        self._review_ready = True

    def set_review_sample(self, sample_key: str, rows: list[tuple]) -> dict:
        """Make `rows` ((record_id, stratum[, copies]) each) the sample. Nothing is deleted: records
        still sampled keep their verdicts, the others are retired with theirs. Returns the counts."""
        self._review_tables()
        with self.tx():
            keep = {r[0] for r in rows}
            old = self.db.execute("SELECT record_id, verdict FROM reviews WHERE sample_key != ''").fetchall()
            retired = [rid for rid, _ in old if rid not in keep]
            for rid in retired:
                self.db.execute("UPDATE reviews SET sample_key='' WHERE record_id=?", (rid,))
            for rid, stratum, *rest in rows:
                self.db.execute(
                    "INSERT INTO reviews (record_id, sample_key, stratum, copies) VALUES (?,?,?,?) "
                    "ON CONFLICT(record_id) DO UPDATE SET sample_key=excluded.sample_key, "
                    "stratum=excluded.stratum, copies=excluded.copies",
                    (rid, sample_key, stratum, rest[0] if rest else 1))
                self._review_settle(rid)
        decided = {rid for rid, v in old if v}
        return {"kept_verdicts": len(keep & decided),
                "retired_verdicts": sum(1 for rid in retired if rid in decided),
                "retired": len(retired)}

    def review_rows(self, retired: bool = False) -> list[dict]:
        """The current sample (or, with `retired`, the records earlier samples held), by record id."""
        self._review_tables()
        rows = self.db.execute(
            "SELECT record_id, sample_key, stratum, verdict, reason, reviewer, decided, copies FROM reviews "
            f"WHERE sample_key {'=' if retired else '!='} '' ORDER BY record_id").fetchall()
        keys = ("record_id", "sample_key", "stratum", "verdict", "reason", "reviewer", "decided", "copies")
        return [dict(zip(keys, r)) for r in rows]

    def set_review_verdict(self, record_id: str, verdict: str, reason: str, reviewer: str,
                           via: str = "cli") -> None:
        """Append one reviewer's verdict; the record's verdict is settled once enough reviewers gave one."""
        self._review_tables()
        with self.tx():
            row = self.db.execute("SELECT sample_key FROM reviews WHERE record_id=?", (record_id,)).fetchone()
            if row is None or row[0] == "":
                raise StoreError(f"record {record_id} is not in the review sample")
            self.db.execute("INSERT INTO review_log (record_id, reviewer, verdict, reason, via, decided) "
                            "VALUES (?,?,?,?,?,?)", (record_id, reviewer, verdict, reason, via, time.time()))
            self._review_settle(record_id)

    def review_votes(self, record_id: str | None = None) -> list[dict]:
        """Each reviewer's latest verdict per record (one record, or all), oldest first."""
        self._review_tables()
        where, args = ("WHERE record_id=?", (record_id,)) if record_id else ("", ())
        rows = self.db.execute(f"SELECT record_id, reviewer, verdict, reason, via, decided, seq FROM review_log "
                               f"{where} ORDER BY seq", args).fetchall()
        latest: dict[tuple, dict] = {}
        for rid, reviewer, verdict, reason, via, decided, seq in rows:
            latest.pop((rid, reviewer), None)  # a later verdict replaces the reviewer's earlier one
            latest[(rid, reviewer)] = {"record_id": rid, "reviewer": reviewer, "verdict": verdict,
                                       "reason": reason, "via": via, "decided": decided}
        return list(latest.values())

    def review_log(self) -> list[dict]:
        """Every verdict ever given, in order (the append-only log)."""
        self._review_tables()
        rows = self.db.execute("SELECT record_id, reviewer, verdict, reason, via, decided FROM review_log "
                               "ORDER BY seq").fetchall()
        return [dict(zip(("record_id", "reviewer", "verdict", "reason", "via", "decided"), r)) for r in rows]

    def _review_settle(self, record_id: str) -> None:
        """The verdict that counts: none until `copies` reviewers decided, then reject if any rejected."""
        votes = self.review_votes(record_id)
        if not votes:  # verdicts from before the log stay as they were
            return
        (copies,) = self.db.execute("SELECT copies FROM reviews WHERE record_id=?", (record_id,)).fetchone()
        if len(votes) < copies:
            self.db.execute("UPDATE reviews SET verdict=NULL, reason=NULL, reviewer=NULL, decided=NULL "
                            "WHERE record_id=?", (record_id,))
            return
        rejects = [v for v in votes if v["verdict"] == "reject"]
        chosen = rejects or votes
        self.db.execute("UPDATE reviews SET verdict=?, reason=?, reviewer=?, decided=? WHERE record_id=?",
                        ("reject" if rejects else "accept", "; ".join(v["reason"] for v in chosen if v["reason"]),
                         ",".join(v["reviewer"] for v in votes), max(v["decided"] for v in votes), record_id))

    # ---- manifests -----------------------------------------------------
    def start_run(self, stage: str, chash: str, config: Any, env: dict) -> int:
        with self.tx():
            cur = self.db.execute(
                "INSERT INTO manifests (stage, config_hash, config, env, started) VALUES (?,?,?,?,?)",
                (stage, chash, stable_json(config), stable_json({**env, "pid": os.getpid()}), time.time()))
            return cur.lastrowid

    def interrupt_run(self, run_id: int | None, why: str) -> None:
        """Mark a run that ended before finishing (its `finished` stays empty), or, with run_id None,
        every run still open: only a run that holds the workspace lock can be running."""
        where, args = ("run_id=?", (run_id,)) if run_id is not None else ("1", ())
        with self.tx():
            self.db.execute(f"UPDATE manifests SET stats=? WHERE {where} AND finished IS NULL AND stats IS NULL",
                            (stable_json({"interrupted": why}), *args))

    def finish_run(self, run_id: int, stats: dict) -> None:
        with self.tx():
            self.db.execute("UPDATE manifests SET finished=?, stats=? WHERE run_id=?",
                            (time.time(), stable_json(stats), run_id))

    def manifests(self) -> list[dict]:
        rows = self.db.execute(
            "SELECT run_id, stage, config_hash, config, env, started, finished, stats FROM manifests "
            "ORDER BY run_id").fetchall()
        return [{"run_id": r[0], "stage": r[1], "config_hash": r[2], "config": json.loads(r[3]),
                 "env": json.loads(r[4]), "started": r[5], "finished": r[6],
                 "stats": json.loads(r[7]) if r[7] else None} for r in rows]

    def runs(self) -> dict:
        """{"running": the lock holder's open runs, "interrupted": open runs nobody is running}, each
        {"run_id", "stage", "pid", "started", "why"}; "holder": who holds the workspace lock, or None.
        An interrupted run that a later run of its stage finished after is left out: it was resumed."""
        holder = self.lock_holder()
        out: dict[str, Any] = {"holder": holder, "running": [], "interrupted": []}
        manifests = self.manifests()
        last_done = {m["stage"]: m["run_id"] for m in manifests if m["finished"] is not None}
        for m in manifests:
            if m["finished"] is not None or last_done.get(m["stage"], 0) > m["run_id"]:
                continue
            row = {"run_id": m["run_id"], "stage": m["stage"], "pid": m["env"].get("pid"), "started": m["started"],
                   "why": (m["stats"] or {}).get("interrupted")}
            alive = holder is not None and row["pid"] == holder.get("pid") and not row["why"]
            out["running" if alive else "interrupted"].append(row)
        return out

    # ---- the workspace lock ----------------------------------------------
    # Commands that run stages hold an OS lock on `run.lock` for their life: the kernel drops it when
    # the process ends, `kill -9` included, so a lock is never stale and a second run is told who runs.
    def lock(self, command: str) -> None:
        """Hold the workspace lock for this process, or raise a StoreError naming who holds it; once
        held, every run left open in the store is one that died, and is marked interrupted."""
        try:
            f = open(self.root / LOCK_FILE, "a+", encoding="utf-8")
        except OSError as e:
            raise StoreError(f"the workspace lock {self.root / LOCK_FILE} cannot be opened: {e.strerror or e}") from None
        if not _take(f):
            f.close()
            raise StoreError(f"another sftbuild run is writing to the workspace {self.root}: "
                             f"{_holder_words(self.lock_holder())}; wait for it to end or stop it") from None
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "command": command, "since": time.time()}))
        f.flush()
        self._lock = f
        self.interrupt_run(None, "the run was killed or lost its machine before it finished")

    def lock_holder(self) -> dict | None:
        """{"pid", "command", "since"} of the process holding the workspace lock, or None."""
        try:
            f = open(self.root / LOCK_FILE, encoding="utf-8")
        except OSError:
            return None
        with f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                try:
                    return json.loads(f.read() or "{}")
                except ValueError:
                    return {}
            fcntl.flock(f, fcntl.LOCK_UN)
            return None

    # ---- the funnel ----------------------------------------------------
    def funnel(self) -> dict:
        """Counts per stage, status and drop reason, overall and per source."""
        sources = dict(self.db.execute("SELECT id, source FROM records").fetchall())
        out: dict[str, Any] = {"records": len(sources), "stages": {}, "by_source": {}}
        by_source: dict[str, dict] = defaultdict(lambda: {"records": 0, "stages": {}})
        for src in sources.values():
            by_source[src]["records"] += 1
        for stage in STAGES:
            chash = self.stage_config(stage)
            if chash is None:
                continue
            counts: dict[str, Any] = {"ok": 0, "dropped": {}, "waiting": {}}
            stale = "s.binding_key != COALESCE(b.key, '')" if stage in BINDING_KEYED else "0"
            for rid, status, reason, old in self.db.execute(
                    f"SELECT s.record_id, s.status, s.reason, {stale} FROM results s {_CURRENT_KEY} "
                    "WHERE s.stage=? AND s.config_hash=?", (stage, chash)).fetchall():
                if old:  # reached under a binding the record no longer has: to be redone
                    status, reason = "waiting", "binding_changed"
                per = by_source[sources.get(rid, "?")]["stages"].setdefault(
                    stage, {"ok": 0, "dropped": {}, "waiting": {}})
                for c in (counts, per):
                    if status == "ok":
                        c["ok"] += 1
                    else:
                        c[status][reason or "unspecified"] = c[status].get(reason or "unspecified", 0) + 1
            out["stages"][stage] = counts
        out["by_source"] = dict(by_source)
        skips: dict[str, int] = defaultdict(int)
        for (reason, n) in self.db.execute("SELECT reason, COUNT(*) FROM skips GROUP BY reason"):
            skips[reason] = n
        out["harvest_skips"] = dict(skips)
        out["bindings"] = self.binding_counts()
        chash = self.stage_config("validate")
        if chash is not None:  # why the records validate dropped as unbound found no binding
            out["unbound_at_validate"] = dict(self.db.execute(
                "SELECT COALESCE(b.reason, ''), COUNT(*) FROM results s JOIN bindings b ON b.record_id = s.record_id "
                "WHERE s.stage='validate' AND s.config_hash=? AND s.status='dropped' AND s.reason='unbound' "
                "GROUP BY b.reason", (chash,)).fetchall())
        # the same records by the cause code their binders reported ('' for a row bound before causes were kept)
        where = ("JOIN results s ON s.record_id = b.record_id AND s.stage='validate' AND s.config_hash=? "
                 "AND s.status='dropped' AND s.reason='unbound'" if chash is not None else "WHERE b.status='unbound'")
        out["unbound_causes"] = dict(self.db.execute(
            f"SELECT COALESCE(json_extract(b.evidence, '$.cause'), ''), COUNT(*) FROM bindings b {where} "
            "GROUP BY 1", (chash,) if chash is not None else ()).fetchall())
        return out

    def binding_counts(self) -> dict:
        """{"bound": {how: n}, "unbound": {reason: n}} over every record with a stored binding row."""
        out: dict[str, dict] = {"bound": {}, "unbound": {}}
        for status, how, reason, n in self.db.execute(
                "SELECT status, how, reason, COUNT(*) FROM bindings GROUP BY status, how, reason"):
            k = how if status == "bound" else reason
            out[status][k] = out[status].get(k, 0) + n
        return out


def _holder_words(holder: dict | None) -> str:
    if not holder:
        return "a run that is just ending"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("since") or 0))
    return f"`sftbuild {holder.get('command', '?')}` (pid {holder.get('pid', '?')}, since {since})"


def write_failure(root: Path, e: BaseException) -> str | None:
    """One sentence for a store or file write the machine refused, or None for another error."""
    full = (isinstance(e, sqlite3.OperationalError) and "full" in str(e)) or \
        (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT))
    if full:
        return (f"the disk holding the workspace {root} is full: what was done so far is kept; free some space "
                f"and run the command again to resume")
    if isinstance(e, sqlite3.OperationalError):
        return (f"the workspace store {root / 'sftbuild.db'} could not be written ({e}): what was done so far "
                f"is kept; run the command again to resume")
    return None


class _Tx:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.db.execute("COMMIT")
        elif self.db.in_transaction:  # SQLite has already rolled back after some errors (a full disk)
            self.db.execute("ROLLBACK")
        return False


# a record's licence is that of its own origin as last harvested (a LICENSE added later counts), not the first
# harvest's, frozen in the record's provenance
RECORD_SELECT = ("SELECT r.id, r.language, r.source, r.code, r.entry, b.binding, r.provenance, b.reason, "
                 "json_extract(o.provenance, '$.license'), json_extract(o.provenance, '$.license_source') "
                 "FROM records r LEFT JOIN bindings b ON b.record_id = r.id "
                 "LEFT JOIN origins o ON o.record_id = r.id AND o.source = r.source "
                 "AND o.path = COALESCE(json_extract(r.provenance, '$.path'), '')")
_CURRENT_KEY = "LEFT JOIN bindings b ON b.record_id = s.record_id"


def _keyed(stage: str) -> str:
    """The SQL condition that keeps a binding-keyed stage's results reached under the current binding."""
    return " AND s.binding_key = COALESCE(b.key, '')" if stage in BINDING_KEYED else ""


def _with_origins(rec: Record, origins: list[dict]) -> Record:
    """`rec` with provenance["origins"]: every place its code was found, when there is more than one."""
    if len(origins) > 1:
        rec = dataclasses.replace(rec, provenance={**rec.provenance, "origins": [
            {"source": o["source"], "path": o["path"], "url": o["provenance"].get("url"),
             "license": o["provenance"].get("license"), "binding": o["binding"]} for o in origins]})
    return rec


def _row_record(row) -> Record:
    rid, language, source, code, entry, binding, provenance, unbound, lic, lic_source = row
    prov = json.loads(provenance)
    if lic is not None:
        prov.update(license=lic, license_source=lic_source)
    return Record(id=rid, language=language, source=source, code=code, entry=json.loads(entry),
                  binding=Binding.from_dict(json.loads(binding)) if binding else None, provenance=prov,
                  unbound=unbound)


def _take(f, orphan_wait: float = 10.0) -> bool:
    """Take the exclusive lock on `f`. A lock whose recorded holder is dead is held by processes it
    forked, which die with it (PR_SET_PDEATHSIG): wait for them rather than refuse a run after a kill."""
    deadline = time.monotonic() + orphan_wait
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            pass
        try:
            with open(f.name, encoding="utf-8") as held:
                pid = int(json.loads(held.read() or "{}").get("pid", 0))
        except (OSError, ValueError, TypeError, AttributeError):
            pid = 0
        alive = pid > 0 and _alive(pid)
        if alive or time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
