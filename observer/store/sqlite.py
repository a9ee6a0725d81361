"""The SQLite sample store: WAL journal, fsync on every commit, numbered migrations, retention.

Durability: `add` returns only after its transaction is committed with `synchronous=FULL`, so an
acknowledged sample survives `kill -9` and power loss. One connection guarded by a lock serves all
threads (async callers use `asyncio.to_thread`); SQLite serialises writers anyway.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from observer.store.base import SampleRecord, Score, StoredSample, StoreError, stored_sample
from observer.store.sql import SqlReads, encode_meta, insert_rows, insert_sql

# Each entry migrates the schema from version i to i + 1; never edit a released entry, append one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE samples (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        version TEXT NOT NULL,
        ts REAL NOT NULL,
        source TEXT NOT NULL,
        model TEXT,
        prompt TEXT NOT NULL,
        output TEXT NOT NULL,
        finish_reason TEXT,
        prompt_tokens INTEGER,
        output_tokens INTEGER,
        latency_s REAL,
        ttft_s REAL,
        tenant_tier TEXT,
        content_hash TEXT NOT NULL
    );
    CREATE INDEX samples_version_ts ON samples (version, ts);
    CREATE TABLE scores (
        sample_id INTEGER NOT NULL REFERENCES samples (id) ON DELETE CASCADE,
        scorer TEXT NOT NULL,
        passed INTEGER,
        score REAL,
        reason TEXT NOT NULL,
        meta TEXT NOT NULL,
        ts REAL NOT NULL,
        PRIMARY KEY (sample_id, scorer)
    );
    CREATE INDEX scores_scorer ON scores (scorer, sample_id);
    """,
    """
    CREATE INDEX samples_content_hash ON samples (content_hash);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class SqliteStore(SqlReads):
    """A `SampleStore` in one SQLite file. Opening checks integrity and takes the write lock once."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_seconds: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        if self.path.parent and not self.path.parent.exists():
            raise StoreError(f"could not open sample store {self.path}: directory {self.path.parent} "
                             "does not exist; create it or set sampling.store.path")
        try:
            self._db = sqlite3.connect(str(self.path), timeout=busy_timeout_seconds, isolation_level=None,
                                       check_same_thread=False)
        except sqlite3.Error as e:
            raise StoreError(f"could not open sample store {self.path}: {e}") from e
        try:
            self._open()
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise StoreError(self._explain(e)) from e

    def _explain(self, e: sqlite3.Error) -> str:
        text = str(e)
        if "locked" in text or "busy" in text:
            return (f"could not open sample store {self.path}: the database is locked by another process "
                    f"({text}); stop the other observer or point sampling.store.path elsewhere")
        if "not a database" in text or "malformed" in text or "corrupt" in text:
            return (f"could not open sample store {self.path}: the file is corrupt ({text}); move it aside "
                    "(samples in it are lost unless a backup exists) and restart")
        return f"could not open sample store {self.path}: {text}"

    def _open(self) -> None:
        db = self._db
        db.execute("PRAGMA foreign_keys = ON")
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.DatabaseError(f"could not switch to WAL journal mode (got {mode})")
        # FULL: WAL commits are fsynced, so an acknowledged sample survives power loss, not only kill -9.
        db.execute("PRAGMA synchronous = FULL")
        check = db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {check}")
        # Take the write lock once at start, so a locked database fails now and not on the first sample.
        db.execute("BEGIN IMMEDIATE")
        try:
            current = int(db.execute("PRAGMA user_version").fetchone()[0])
            if current > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(f"schema version {current} is newer than this observer's "
                                            f"{SCHEMA_VERSION}; upgrade observer")
            for number in range(current, SCHEMA_VERSION):
                for statement in MIGRATIONS[number].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {number + 1}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    @property
    def schema_version(self) -> int:
        """The schema version of the open database."""
        with self._locked() as db:
            return int(db.execute("PRAGMA user_version").fetchone()[0])

    def _locked(self) -> _Locked:
        if self._closed:
            raise StoreError(f"sample store {self.path} is closed")
        return _Locked(self)

    def add(self, samples: Sequence[SampleRecord]) -> list[int]:
        """Store samples in one committed transaction and return their ids, in input order."""
        if not samples:
            return []
        rows = insert_rows(samples)
        with self._locked() as db:
            try:
                db.execute("BEGIN IMMEDIATE")
                ids: list[int] = []
                for row in rows:
                    cur = db.execute(insert_sql("?"), row)
                    ids.append(int(cur.lastrowid or 0))
                db.execute("COMMIT")
            except (sqlite3.Error, OverflowError, ValueError, TypeError) as e:
                _rollback(db)
                raise StoreError(f"could not store {len(rows)} sample(s) in {self.path}: {e}") from e
        return ids

    def _read(self, sql: str, args: Sequence[Any]) -> list[StoredSample]:
        with self._locked() as db:
            try:
                rows = db.execute(sql, args).fetchall()
                scores = self._scores(db, [int(r[0]) for r in rows])
            except sqlite3.Error as e:
                raise StoreError(f"could not read samples from {self.path}: {e}") from e
        return [stored_sample(r, scores.get(int(r[0]), {})) for r in rows]

    @staticmethod
    def _scores(db: sqlite3.Connection, ids: list[int]) -> dict[int, dict[str, Score]]:
        out: dict[int, dict[str, Score]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for sid, scorer, passed, score, reason, meta, ts in db.execute(
                    f"SELECT sample_id, scorer, passed, score, reason, meta, ts FROM scores "
                    f"WHERE sample_id IN ({marks})", chunk):
                out.setdefault(int(sid), {})[scorer] = Score(
                    scorer=scorer, passed=None if passed is None else bool(passed), score=score,
                    reason=reason, meta=MappingProxyType(json.loads(meta)), ts=ts)
        return out

    def attach_score(self, sample_id: int, *, scorer: str, passed: bool | None, score: float | None,
                     reason: str, meta: Mapping[str, Any]) -> None:
        """Attach (or replace) one scorer's result on a sample; StoreError if the sample does not exist."""
        encoded = encode_meta(meta, scorer=scorer, sample_id=sample_id)
        with self._locked() as db:
            try:
                db.execute("BEGIN IMMEDIATE")
                db.execute(
                    "INSERT INTO scores (sample_id, scorer, passed, score, reason, meta, ts) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (sample_id, scorer) DO UPDATE SET "
                    "passed = excluded.passed, score = excluded.score, reason = excluded.reason, "
                    "meta = excluded.meta, ts = excluded.ts",
                    (sample_id, scorer, None if passed is None else int(passed), score, reason, encoded,
                     self._clock()))
                db.execute("COMMIT")
            except sqlite3.IntegrityError as e:
                _rollback(db)
                raise StoreError(f"could not attach score {scorer!r}: sample {sample_id} "
                                 "does not exist") from e
            except sqlite3.Error as e:
                _rollback(db)
                raise StoreError(f"could not attach score {scorer!r} to sample {sample_id}: {e}") from e

    def count(self, version: str | None = None) -> int:
        """Return the number of stored samples, of one version or of all."""
        with self._locked() as db:
            if version is None:
                return int(db.execute("SELECT COUNT(*) FROM samples").fetchone()[0])
            return int(db.execute("SELECT COUNT(*) FROM samples WHERE version = ?", (version,)).fetchone()[0])

    def counts(self) -> dict[str, int]:
        """Return the number of stored samples per version."""
        with self._locked() as db:
            rows = db.execute("SELECT version, COUNT(*) FROM samples GROUP BY version").fetchall()
        return {str(v): int(n) for v, n in rows}

    def size_bytes(self) -> int:
        """Bytes on disk: the database file plus its write-ahead log."""
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(f"{self.path}{suffix}").st_size
        return total

    def prune(self, *, max_age_seconds: float, max_rows_per_version: int) -> int:
        """Delete samples older than `max_age_seconds` and beyond the newest `max_rows_per_version`."""
        cutoff = self._clock() - max_age_seconds
        with self._locked() as db:
            try:
                db.execute("BEGIN IMMEDIATE")
                deleted = db.execute("DELETE FROM samples WHERE ts < ?", (cutoff,)).rowcount
                for (version,) in db.execute("SELECT DISTINCT version FROM samples").fetchall():
                    row = db.execute("SELECT ts, id FROM samples WHERE version = ? ORDER BY ts DESC, id DESC "
                                     "LIMIT 1 OFFSET ?", (version, max_rows_per_version)).fetchone()
                    if row is not None:
                        deleted += db.execute(
                            "DELETE FROM samples WHERE version = ? AND (ts < ? OR (ts = ? AND id <= ?))",
                            (version, row[0], row[0], row[1])).rowcount
                db.execute("COMMIT")
            except sqlite3.Error as e:
                _rollback(db)
                raise StoreError(f"could not prune sample store {self.path}: {e}") from e
            if deleted:
                db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        return int(deleted)

    def not_ready(self) -> str | None:
        """Always ready: a file that cannot be opened fails at start instead."""
        return None

    def close(self) -> None:
        """Checkpoint and close the database; later calls raise StoreError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # Another reader may hold the WAL; then SQLite checkpoints on the next open instead.
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()


class _Locked:
    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def __enter__(self) -> sqlite3.Connection:
        self._store._lock.acquire()
        if self._store._closed:
            self._store._lock.release()
            raise StoreError(f"sample store {self._store.path} is closed")
        return self._store._db

    def __exit__(self, *exc: object) -> None:
        # Whatever went wrong inside (a sqlite error, an int too large to bind, a bug), a connection goes
        # back with no open transaction: else it would hold SQLite's write lock and show uncommitted rows.
        try:
            with contextlib.suppress(sqlite3.Error):
                _rollback(self._store._db)
        finally:
            self._store._lock.release()


def _rollback(db: sqlite3.Connection) -> None:
    if db.in_transaction:
        db.execute("ROLLBACK")

