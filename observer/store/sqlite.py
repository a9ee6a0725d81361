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
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from observer.store.base import SampleRecord, Score, StoredSample, StoreError, stored_sample
from observer.store.feedback import FeedbackRecord
from observer.store.jobs import (
    ClaimedJob,
    DriftReportRecord,
    Enqueued,
    GoldenRunRecord,
    JobSpec,
    Release,
    ScoreEvent,
    ScoreWrite,
)
from observer.store.pairs import PairRecord
from observer.store.schema import SQLITE_MIGRATIONS as MIGRATIONS
from observer.store.sql import (
    INGEST_KEY_SECONDS,
    JOB_COUNTS_SQL,
    LEASE_RAN_OUT,
    PENDING_JOBS_SQL,
    SqlReads,
    claimed,
    complete_sql,
    drift_report_row,
    encode_meta,
    enqueue_rows,
    feedback_row,
    fingerprint_counts_query,
    golden_run_row,
    insert_drift_report_sql,
    insert_feedback_sql,
    insert_golden_run_sql,
    insert_job_sql,
    insert_pair_sql,
    insert_rows,
    insert_sql,
    job_error,
    job_rows,
    pair_record,
    pair_row,
    paired_samples_sql,
    pairs_sql,
    prune_jobs_sql,
    release_sql,
    released,
    renew_sql,
    spend_one,
)

_T = TypeVar("_T")

_NEXT_SEQ = "(SELECT COALESCE(MAX(seq), 0) + 1 FROM scores)"
_UPSERT_SCORE = (
    "INSERT INTO scores (sample_id, scorer, passed, score, reason, meta, ts, seq) "
    f"VALUES (?, ?, ?, ?, ?, ?, ?, {_NEXT_SEQ}) ON CONFLICT (sample_id, scorer) DO UPDATE SET "
    "passed = excluded.passed, score = excluded.score, reason = excluded.reason, meta = excluded.meta, "
    f"ts = excluded.ts, seq = {_NEXT_SEQ}")
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

    def add(self, samples: Sequence[SampleRecord], *, idempotency_key: str | None = None) -> list[int]:
        """Store samples in one committed transaction and return their ids, in input order; a batch already
        stored under `idempotency_key` is not stored again (its ids are returned)."""
        if not samples:
            return []
        rows = insert_rows(samples)
        with self._locked() as db:
            try:
                db.execute("BEGIN IMMEDIATE")
                if idempotency_key is not None:
                    row = db.execute("SELECT ids FROM ingest_keys WHERE key = ?", (idempotency_key,)).fetchone()
                    if row is not None:
                        db.execute("COMMIT")
                        return [int(i) for i in json.loads(row[0])]
                ids: list[int] = []
                for row in rows:
                    cur = db.execute(insert_sql("?"), row)
                    ids.append(int(cur.lastrowid or 0))
                if idempotency_key is not None:
                    db.execute("INSERT INTO ingest_keys (key, ids, created) VALUES (?, ?, ?)",
                               (idempotency_key, json.dumps(ids), self._clock()))
                db.execute("COMMIT")
            except (sqlite3.Error, OverflowError, ValueError, TypeError) as e:
                _rollback(db)
                raise StoreError(f"could not store {len(rows)} sample(s) in {self.path}: {e}") from e
        return ids

    def _rows(self, what: str, sql: str, args: Sequence[Any]) -> list[Sequence[Any]]:
        with self._locked() as db:
            try:
                return list(db.execute(sql, args).fetchall())
            except sqlite3.Error as e:
                raise StoreError(f"could not {what} in sample store {self.path}: {e}") from e

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
                db.execute(_UPSERT_SCORE, (sample_id, scorer, None if passed is None else int(passed), score,
                                           reason, encoded, self._clock()))
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

    def fingerprint_counts(self, version: str, *, since: float, until: float) -> dict[tuple[str, str], int]:
        """Samples per (template hash, sampling hash) of `version` with since <= ts < until."""
        with self._locked() as db:
            try:
                rows = db.execute(*fingerprint_counts_query(version, since=since, until=until, mark="?")).fetchall()
            except sqlite3.Error as e:
                raise StoreError(f"could not count fingerprints in {self.path}: {e}") from e
        return {(str(t), str(s)): int(n) for t, s, n in rows}

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
                db.execute("DELETE FROM golden_runs WHERE started < ?", (cutoff,))
                db.execute("DELETE FROM drift_reports WHERE checked_at < ?", (cutoff,))
                db.execute("DELETE FROM pairs WHERE ts < ?", (cutoff,))
                db.execute("DELETE FROM feedback WHERE ts < ?", (cutoff,))
                db.execute("DELETE FROM ingest_keys WHERE created < ?", (self._clock() - INGEST_KEY_SECONDS,))
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

    # --- shared work (observer.store.jobs): one process, so the write lock is the only claim needed ---

    def _write(self, what: str, body: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run `body` in one BEGIN IMMEDIATE transaction; StoreError naming `what` on a database error."""
        with self._locked() as db:
            try:
                db.execute("BEGIN IMMEDIATE")
                out = body(db)
                db.execute("COMMIT")
            except sqlite3.Error as e:
                _rollback(db)
                raise StoreError(f"could not {what} in {self.path}: {e}") from e
            return out

    def spend(self, budget: str, *, limit: int, window_seconds: float) -> bool:
        now = self._clock()
        return self._write(f"spend of budget {budget}", lambda db: spend_one(
            db.execute, "?", budget, limit=limit, window_seconds=window_seconds, now=now))

    def enqueue(self, jobs: Sequence[JobSpec], *, max_queued: int) -> Enqueued:
        rows = job_rows(jobs, self._clock())
        insert = insert_job_sql("?")

        def body(db: sqlite3.Connection) -> Enqueued:
            return enqueue_rows(lambda row: int(db.execute(insert, row).rowcount), rows,
                                pending=int(db.execute(PENDING_JOBS_SQL).fetchone()[0]), max_queued=max_queued)

        return self._write(f"enqueue {len(rows)} job(s)", body) if rows else Enqueued()

    def claim(self, *, worker: str, kinds: Sequence[str], limit: int, lease_seconds: float) -> list[ClaimedJob]:
        if limit <= 0 or not kinds:
            return []
        now = self._clock()
        marks = ", ".join("?" * len(kinds))

        def body(db: sqlite3.Connection) -> list[ClaimedJob]:
            db.execute(f"UPDATE jobs SET state = 'failed', updated = ?, error = {LEASE_RAN_OUT} "
                       f"WHERE kind IN ({marks}) AND state = 'running' AND lease_until < ? "
                       "AND attempts >= max_attempts", (now, *kinds, now))
            ids = [int(r[0]) for r in db.execute(
                f"SELECT id FROM jobs WHERE kind IN ({marks}) AND attempts < max_attempts AND "
                "((state = 'queued' AND not_before <= ?) OR (state = 'running' AND lease_until < ?)) "
                "ORDER BY id LIMIT ?", (*kinds, now, now, int(limit)))]
            out = []
            for jid in ids:
                row = db.execute("UPDATE jobs SET state = 'running', worker = ?, attempts = attempts + 1, "
                                 "lease_until = ?, updated = ? WHERE id = ? "
                                 "RETURNING id, kind, key, payload, attempts, lease_until",
                                 (worker, now + lease_seconds, now, jid)).fetchone()
                out.append(claimed(row, worker=worker))
            return out

        return self._write(f"claim jobs for {worker}", body)

    def renew(self, job: ClaimedJob, *, lease_seconds: float) -> ClaimedJob | None:
        until = self._clock() + lease_seconds
        n = self._write(f"renew job {job.id}", lambda db: db.execute(
            renew_sql("?"), (until, job.id, job.worker, job.attempt)).rowcount)
        return replace(job, lease_until=until) if n else None

    def complete(self, job: ClaimedJob, *, scores: Sequence[ScoreWrite] = (),
                 golden_runs: Sequence[GoldenRunRecord] = (),
                 drift_reports: Sequence[DriftReportRecord] = ()) -> bool:
        now = self._clock()
        encoded = [(w.sample_id, w.scorer, None if w.passed is None else int(w.passed), w.score, w.reason,
                    encode_meta(w.meta, scorer=w.scorer, sample_id=w.sample_id), now) for w in scores]
        runs = [golden_run_row(r) for r in golden_runs]
        reports = [drift_report_row(r) for r in drift_reports]

        def body(db: sqlite3.Connection) -> bool:
            n = db.execute(complete_sql("?"), (now, job.id, job.worker, job.attempt)).rowcount
            if not n:
                return False
            for row in encoded:  # a sample pruned meanwhile: its score is moot, the job is still done
                if db.execute("SELECT 1 FROM samples WHERE id = ?", (row[0],)).fetchone() is not None:
                    db.execute(_UPSERT_SCORE, row)
            db.executemany(insert_golden_run_sql("?"), runs)
            db.executemany(insert_drift_report_sql("?"), reports)
            return True

        return self._write(f"complete job {job.id}", body)

    def release(self, job: ClaimedJob, *, error: str, retry_in_seconds: float) -> Release:
        now = self._clock()
        row = self._write(f"release job {job.id}", lambda db: db.execute(
            release_sql("?"), (now + retry_in_seconds, now, job_error(error), job.id, job.worker,
                               job.attempt)).fetchone())
        return released(row)

    def job_counts(self) -> dict[tuple[str, str], int]:
        with self._locked() as db:
            rows = db.execute(JOB_COUNTS_SQL).fetchall()
        return {(str(k), str(st)): int(n) for k, st, n in rows}

    def prune_jobs(self, *, max_age_seconds: float) -> int:
        cutoff = self._clock() - max_age_seconds
        return int(self._write("prune jobs", lambda db: db.execute(prune_jobs_sql("?"), (cutoff,)).rowcount))

    def score_events(self, *, after: tuple[int, int], limit: int) -> list[ScoreEvent]:
        with self._locked() as db:
            rows = db.execute("SELECT c.seq, c.sample_id, s.version, s.ts, c.scorer, c.passed FROM scores c "
                              "JOIN samples s ON s.id = c.sample_id WHERE c.seq > ? ORDER BY c.seq LIMIT ?",
                              (after[1], int(limit))).fetchall()
        return [ScoreEvent(cursor=(0, int(q)), sample_id=int(sid), version=v, sample_ts=float(ts), scorer=sc,
                           passed=None if p is None else bool(p)) for q, sid, v, ts, sc, p in rows]

    def add_golden_run(self, run: GoldenRunRecord) -> None:
        row = golden_run_row(run)
        self._write(f"store a golden run of {run.golden_set} on {run.version}",
                    lambda db: db.execute(insert_golden_run_sql("?"), row))

    def golden_runs(self, *, after: tuple[int, int], limit: int) -> list[tuple[tuple[int, int], GoldenRunRecord]]:
        with self._locked() as db:
            rows = db.execute("SELECT id, version, golden_set, started, finished, body FROM golden_runs "
                              "WHERE id > ? ORDER BY id LIMIT ?", (after[1], int(limit))).fetchall()
        return [((0, int(i)), GoldenRunRecord(version=v, golden_set=g, started=float(st), finished=float(fi),
                                              body=MappingProxyType(json.loads(b))))
                for i, v, g, st, fi, b in rows]

    def drift_reports(self, *, after: tuple[int, int], limit: int
                      ) -> list[tuple[tuple[int, int], DriftReportRecord]]:
        with self._locked() as db:
            rows = db.execute("SELECT id, version, checked_at, body FROM drift_reports WHERE id > ? ORDER BY id "
                              "LIMIT ?", (after[1], int(limit))).fetchall()
        return [((0, int(i)), DriftReportRecord(version=v, checked_at=float(at), body=MappingProxyType(json.loads(b))))
                for i, v, at, b in rows]

    def add_pair(self, pair: PairRecord) -> bool:
        row = pair_row(pair)
        return bool(self._write(f"store a shadow pair of {pair.canary}",
                                lambda db: db.execute(insert_pair_sql("?"), row).rowcount > 0))

    def pairs(self, canary: str, *, since: float, limit: int) -> list[PairRecord]:
        with self._locked() as db:
            return [pair_record(r) for r in db.execute(pairs_sql("?", limit), (canary, since)).fetchall()]

    def paired_samples(self, canary: str, sample_ids: Sequence[int]) -> set[int]:
        if not sample_ids:
            return set()
        with self._locked() as db:
            rows = db.execute(paired_samples_sql("?", len(sample_ids)), (canary, *map(int, sample_ids))).fetchall()
        return {int(r[0]) for r in rows}

    def add_feedback(self, events: Sequence[FeedbackRecord]) -> list[bool]:
        rows = [feedback_row(e) for e in events]

        def insert(db: sqlite3.Connection) -> list[bool]:
            return [db.execute(insert_feedback_sql("?"), row).rowcount > 0 for row in rows]
        return self._write(f"store {len(rows)} feedback event(s)", insert) if rows else []

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

