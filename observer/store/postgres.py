"""The PostgreSQL sample store: the same contract as SQLite's, for a fleet and for several replicas.

psycopg 3 with its connection pool. Durability: `add` returns after its transaction commits with the
server's `synchronous_commit` (on by default: the WAL record is flushed), so an acknowledged sample
survives `kill -9` of the observer and a crash of the database. Migrations are numbered, run in one
transaction under an advisory lock (two replicas starting together migrate once), and recorded in
`observer_schema`. A database that is unreachable, refuses the credentials or holds a newer schema gives
a StoreError naming the host, port and database (never the password) and what to do.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

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
from observer.store.schema import POSTGRES_MIGRATIONS as MIGRATIONS
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

# A row is in the feed once no transaction older than its own is still open: then every row with a smaller
# (xid, seq) is committed (or rolled back) too, and a reader resuming after a cursor misses nothing.
_FEED_VISIBLE = "xid < pg_snapshot_xmin(pg_current_snapshot())"
_UPSERT_SCORE = (
    "INSERT INTO scores (sample_id, scorer, passed, score, reason, meta, ts) "
    "VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s) ON CONFLICT (sample_id, scorer) DO UPDATE SET "
    "passed = excluded.passed, score = excluded.score, reason = excluded.reason, meta = excluded.meta, "
    "ts = excluded.ts, seq = nextval('scores_seq'), xid = pg_current_xact_id()")
SCHEMA_VERSION = len(MIGRATIONS)
MIGRATION_LOCK = 0x0B5E_0001  # pg_advisory_xact_lock key: one migrator at a time
ENQUEUE_LOCK = 0x0B5E_E0E0  # pg_advisory_xact_lock key held while enqueueing (the queue bound holds)
BUDGET_LOCK = 0x0B5E_B0D6  # ... and while spending a fleet-wide budget (no two replicas take the last unit)

log = logging.getLogger("observer.store")


def redact_dsn(url: str) -> str:
    """host:port/database of a postgresql:// URL, for messages: never the user's password."""
    try:
        u = urlsplit(url)
        return f"{u.hostname or 'localhost'}:{u.port or 5432}{u.path or '/'}"
    except ValueError:
        return "the configured PostgreSQL URL"


class PostgresStore(SqlReads):
    """A `SampleStore` in a PostgreSQL database (`sampling.store.url: postgresql://…`)."""

    MARK = "%s"

    def __init__(self, url: str, *, min_connections: int = 1, max_connections: int = 8,
                 connect_timeout_seconds: float = 5.0, clock: Callable[[], float] = time.time,
                 wait: bool = True) -> None:
        """Connect and migrate. `wait=False` (the service): a database that is down at start is logged,
        `not_ready()` says why, calls fail with StoreError (HTTP 503) and the pool keeps reconnecting in the
        background; the schema is migrated on the first connection that works."""
        import psycopg
        from psycopg_pool import ConnectionPool

        self._psycopg = psycopg
        self.where = redact_dsn(url)
        self._clock = clock
        self._closed = False
        self._url = url
        self._migrated = False
        self._migrate_lock = threading.Lock()
        self.last_error: str | None = None
        self._pool = ConnectionPool(url, min_size=min_connections, max_size=max_connections, open=False,
                                    timeout=connect_timeout_seconds, name="observer-store",
                                    kwargs={"connect_timeout": max(1, int(connect_timeout_seconds))})
        # Not pool.wait(): on timeout it closes the pool, and a degraded start needs it reconnecting.
        problem = self._probe(connect_timeout_seconds)
        if problem is not None and wait:
            raise StoreError(problem)
        self._pool.open(wait=False)
        if problem is not None:
            self.last_error = problem
            log.error("%s; serving degraded (ingest answers 503) and reconnecting in the background", problem)
            return
        try:
            with self._conn("migrate the sample store"):
                pass
        except BaseException:
            self._pool.close()
            raise

    def not_ready(self) -> str | None:
        """Why the store cannot serve yet (None once connected and migrated)."""
        if self._migrated:
            return None
        return f"sample store: {self.last_error or f'not connected to {self.where} yet'}"

    def _probe(self, timeout: float) -> str | None:
        """None when one connection can be made now, else what the on-call engineer needs to read."""
        try:
            self._psycopg.connect(self._url, connect_timeout=max(1, int(timeout))).close()
        except self._psycopg.Error as e:
            return (f"could not connect to the PostgreSQL sample store at {self.where}: {first_line(e)}; check "
                    "that it is up, the host and port, and the credentials in sampling.store.url")
        return None

    @contextmanager
    def _conn(self, what: str) -> Iterator[Any]:
        """A pooled connection in one transaction: committed on success, rolled back on any error."""
        if self._closed:
            raise StoreError(f"sample store {self.where} is closed")
        from psycopg_pool import PoolTimeout

        try:
            with self._pool.connection() as conn:
                if not self._migrated:
                    with self._migrate_lock:
                        if not self._migrated:
                            self._migrate(conn)
                            conn.commit()
                            self._migrated, self.last_error = True, None
                yield conn
        except PoolTimeout as e:
            self.last_error = f"no connection to {self.where} (pool timeout)"
            raise StoreError(f"could not {what}: no connection to {self.where} (pool timeout); "
                             "is the database up?") from e
        except self._psycopg.OperationalError as e:
            raise StoreError(f"could not {what}: connection to {self.where} failed: {first_line(e)}") from e
        except self._psycopg.Error as e:
            raise StoreError(f"could not {what} in {self.where}: {first_line(e)}") from e

    def _migrate(self, conn: Any) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS observer_schema (version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM observer_schema").fetchone()
        current = 0 if row is None else int(row[0])
        if current > SCHEMA_VERSION:
            raise StoreError(f"the sample store at {self.where} has schema version {current}, newer than "
                             f"this observer's {SCHEMA_VERSION}; upgrade observer")
        for number in range(current, SCHEMA_VERSION):
            conn.execute(MIGRATIONS[number])
        if row is None:
            conn.execute("INSERT INTO observer_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
        elif current != SCHEMA_VERSION:
            conn.execute("UPDATE observer_schema SET version = %s", (SCHEMA_VERSION,))

    @property
    def schema_version(self) -> int:
        with self._conn("read the schema version") as conn:
            return int(conn.execute("SELECT version FROM observer_schema").fetchone()[0])

    def add(self, samples: Sequence[SampleRecord], *, idempotency_key: str | None = None) -> list[int]:
        """Store samples in one committed transaction and return their ids, in input order.

        With `idempotency_key` the key is recorded in the same transaction, so the add is retried once when
        the connection is lost mid-transaction (whether or not the lost attempt committed, the samples end
        stored once), and a later add with the same key returns the first one's ids."""
        if not samples:
            return []
        rows = insert_rows(samples)
        attempts = 2 if idempotency_key is not None else 1
        for attempt in range(1, attempts + 1):
            try:
                return self._add(rows, idempotency_key)
            except StoreError as e:
                if attempt == attempts or not isinstance(e.__cause__, self._psycopg.OperationalError):
                    raise
                log.warning("sample store: %s; retrying once on a new connection (idempotency key %s)", e,
                            idempotency_key)
        raise AssertionError("unreachable")

    def _add(self, rows: list[tuple[Any, ...]], key: str | None) -> list[int]:
        ids: list[int] = []
        with self._conn(f"store {len(rows)} sample(s)") as conn, conn.cursor() as cur:
            if key is not None:
                # Blocks while another transaction holds the same key; then sees its ids (or takes the key).
                cur.execute("INSERT INTO ingest_keys (key, ids, created) VALUES (%s, '[]', %s) "
                            "ON CONFLICT (key) DO NOTHING", (key, self._clock()))
                if not cur.rowcount:
                    row = cur.execute("SELECT ids FROM ingest_keys WHERE key = %s", (key,)).fetchone()
                    return [int(i) for i in row[0]]
            try:
                cur.executemany(insert_sql("%s") + " RETURNING id", rows, returning=True)
            except (ValueError, OverflowError) as e:  # not adaptable (e.g. a NUL in text): rolled back
                raise StoreError(f"could not store {len(rows)} sample(s) in {self.where}: {e}") from e
            while True:
                ids.append(int(cur.fetchone()[0]))
                if not cur.nextset():
                    break
            if key is not None:
                cur.execute("UPDATE ingest_keys SET ids = %s::jsonb WHERE key = %s", (json.dumps(ids), key))
        return ids

    def _rows(self, what: str, sql: str, args: Sequence[Any]) -> list[Sequence[Any]]:
        with self._conn(what) as conn:
            return list(conn.execute(sql, args).fetchall())

    def _read(self, sql: str, args: Sequence[Any]) -> list[StoredSample]:
        with self._conn("read samples") as conn:
            rows = conn.execute(sql, args).fetchall()
            ids = [int(r[0]) for r in rows]
            scores: dict[int, dict[str, Score]] = {}
            if ids:
                for sid, scorer, passed, score, reason, meta, ts in conn.execute(
                        "SELECT sample_id, scorer, passed, score, reason, meta, ts FROM scores "
                        "WHERE sample_id = ANY(%s)", (ids,)):
                    scores.setdefault(int(sid), {})[scorer] = Score(
                        scorer=scorer, passed=passed, score=score, reason=reason,
                        meta=MappingProxyType(dict(meta)), ts=ts)
        return [stored_sample(r, scores.get(int(r[0]), {})) for r in rows]

    def attach_score(self, sample_id: int, *, scorer: str, passed: bool | None, score: float | None,
                     reason: str, meta: Mapping[str, Any]) -> None:
        """Attach (or replace) one scorer's result on a sample; StoreError if the sample does not exist."""
        encoded = encode_meta(meta, scorer=scorer, sample_id=sample_id)
        with self._conn(f"attach score {scorer!r} to sample {sample_id}") as conn:
            try:
                conn.execute(_UPSERT_SCORE, (sample_id, scorer, passed, score, reason, encoded, self._clock()))
            except self._psycopg.errors.ForeignKeyViolation as e:
                raise StoreError(f"could not attach score {scorer!r}: sample {sample_id} does not exist") from e

    def count(self, version: str | None = None) -> int:
        with self._conn("count samples") as conn:
            if version is None:
                return int(conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0])
            return int(conn.execute("SELECT COUNT(*) FROM samples WHERE version = %s", (version,)).fetchone()[0])

    def counts(self) -> dict[str, int]:
        with self._conn("count samples") as conn:
            rows = conn.execute("SELECT version, COUNT(*) FROM samples GROUP BY version").fetchall()
        return {str(v): int(n) for v, n in rows}

    def fingerprint_counts(self, version: str, *, since: float, until: float) -> dict[tuple[str, str], int]:
        """Samples per (template hash, sampling hash) of `version` with since <= ts < until."""
        with self._conn("count fingerprints") as conn:
            rows = conn.execute(*fingerprint_counts_query(version, since=since, until=until, mark="%s")).fetchall()
        return {(str(t), str(s)): int(n) for t, s, n in rows}

    def size_bytes(self) -> int:
        """Bytes on disk of the store's tables and their indexes."""
        with self._conn("measure the store") as conn:
            row = conn.execute("SELECT pg_total_relation_size('samples') + pg_total_relation_size('scores') + "
                               "pg_total_relation_size('jobs') + pg_total_relation_size('golden_runs') + "
                               "pg_total_relation_size('drift_reports')").fetchone()
        return int(row[0])

    def prune(self, *, max_age_seconds: float, max_rows_per_version: int) -> int:
        """Delete samples older than `max_age_seconds` and beyond the newest `max_rows_per_version`."""
        cutoff = self._clock() - max_age_seconds
        with self._conn("prune the sample store") as conn:
            deleted = conn.execute("DELETE FROM samples WHERE ts < %s", (cutoff,)).rowcount
            conn.execute("DELETE FROM golden_runs WHERE started < %s", (cutoff,))
            conn.execute("DELETE FROM drift_reports WHERE checked_at < %s", (cutoff,))
            conn.execute("DELETE FROM pairs WHERE ts < %s", (cutoff,))
            conn.execute("DELETE FROM feedback WHERE ts < %s", (cutoff,))
            conn.execute("DELETE FROM ingest_keys WHERE created < %s", (self._clock() - INGEST_KEY_SECONDS,))
            deleted += conn.execute(
                "DELETE FROM samples WHERE id IN (SELECT id FROM (SELECT id, row_number() OVER "
                "(PARTITION BY version ORDER BY ts DESC, id DESC) AS n FROM samples) ranked WHERE n > %s)",
                (max_rows_per_version,)).rowcount
        return int(deleted)

    # --- shared work (observer.store.jobs) ---

    def spend(self, budget: str, *, limit: int, window_seconds: float) -> bool:
        now = self._clock()
        with self._conn(f"spend of budget {budget}") as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (BUDGET_LOCK,))
            return spend_one(conn.execute, "%s", budget, limit=limit, window_seconds=window_seconds, now=now)

    def enqueue(self, jobs: Sequence[JobSpec], *, max_queued: int) -> Enqueued:
        if not jobs:
            return Enqueued()
        rows = job_rows(jobs, self._clock())
        insert = insert_job_sql("%s", json_cast="::jsonb")
        with self._conn(f"enqueue {len(rows)} job(s)") as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (ENQUEUE_LOCK,))  # the bound holds across replicas
            return enqueue_rows(lambda row: int(conn.execute(insert, row).rowcount), rows,
                                pending=int(conn.execute(PENDING_JOBS_SQL).fetchone()[0]), max_queued=max_queued)

    def claim(self, *, worker: str, kinds: Sequence[str], limit: int, lease_seconds: float) -> list[ClaimedJob]:
        if limit <= 0 or not kinds:
            return []
        now = self._clock()
        with self._conn(f"claim jobs for {worker}") as conn:
            conn.execute(f"UPDATE jobs SET state = 'failed', updated = %s, error = {LEASE_RAN_OUT} "
                         "WHERE kind = ANY(%s) AND state = 'running' AND lease_until < %s "
                         "AND attempts >= max_attempts", (now, list(kinds), now))
            rows = conn.execute(
                "UPDATE jobs SET state = 'running', worker = %s, attempts = attempts + 1, lease_until = %s, "
                "updated = %s WHERE id IN (SELECT id FROM jobs WHERE kind = ANY(%s) AND attempts < max_attempts "
                "AND ((state = 'queued' AND not_before <= %s) OR (state = 'running' AND lease_until < %s)) "
                "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) "
                "RETURNING id, kind, key, payload, attempts, lease_until",
                (worker, now + lease_seconds, now, list(kinds), now, now, int(limit))).fetchall()
        return sorted((claimed(r, worker=worker) for r in rows), key=lambda j: j.id)

    def renew(self, job: ClaimedJob, *, lease_seconds: float) -> ClaimedJob | None:
        until = self._clock() + lease_seconds
        with self._conn(f"renew job {job.id}") as conn:
            n = conn.execute(renew_sql("%s"), (until, job.id, job.worker, job.attempt)).rowcount
        return replace(job, lease_until=until) if n else None

    def complete(self, job: ClaimedJob, *, scores: Sequence[ScoreWrite] = (),
                 golden_runs: Sequence[GoldenRunRecord] = (),
                 drift_reports: Sequence[DriftReportRecord] = ()) -> bool:
        now = self._clock()
        encoded = [(w.sample_id, w.scorer, w.passed, w.score, w.reason,
                    encode_meta(w.meta, scorer=w.scorer, sample_id=w.sample_id), now) for w in scores]
        runs = [golden_run_row(r) for r in golden_runs]
        reports = [drift_report_row(r) for r in drift_reports]
        with self._conn(f"complete job {job.id}") as conn:
            n = conn.execute(complete_sql("%s"), (now, job.id, job.worker, job.attempt)).rowcount
            if not n:
                return False
            for row in encoded:  # a sample pruned meanwhile: its score is moot, the job is still done
                if conn.execute("SELECT 1 FROM samples WHERE id = %s FOR KEY SHARE", (row[0],)).fetchone():
                    conn.execute(_UPSERT_SCORE, row)
            for run in runs:
                conn.execute(insert_golden_run_sql("%s", json_cast="::jsonb"), run)
            for report in reports:
                conn.execute(insert_drift_report_sql("%s", json_cast="::jsonb"), report)
        return True

    def release(self, job: ClaimedJob, *, error: str, retry_in_seconds: float) -> Release:
        now = self._clock()
        with self._conn(f"release job {job.id}") as conn:
            row = conn.execute(release_sql("%s"), (now + retry_in_seconds, now, job_error(error), job.id, job.worker,
                                                   job.attempt)).fetchone()
        return released(row)

    def job_counts(self) -> dict[tuple[str, str], int]:
        with self._conn("count jobs") as conn:
            rows = conn.execute(JOB_COUNTS_SQL).fetchall()
        return {(str(k), str(st)): int(n) for k, st, n in rows}

    def prune_jobs(self, *, max_age_seconds: float) -> int:
        with self._conn("prune jobs") as conn:
            return int(conn.execute(prune_jobs_sql("%s"), (self._clock() - max_age_seconds,)).rowcount)

    def score_events(self, *, after: tuple[int, int], limit: int) -> list[ScoreEvent]:
        with self._conn("read the score feed") as conn:
            rows = conn.execute(
                "SELECT c.xid::text::bigint, c.seq, c.sample_id, s.version, s.ts, c.scorer, c.passed "
                f"FROM scores c JOIN samples s ON s.id = c.sample_id WHERE c.{_FEED_VISIBLE} "
                "AND (c.xid, c.seq) > (%s::text::xid8, %s) ORDER BY c.xid, c.seq LIMIT %s",
                (str(after[0]), after[1], int(limit))).fetchall()
        return [ScoreEvent(cursor=(int(x), int(q)), sample_id=int(sid), version=v, sample_ts=float(ts),
                           scorer=sc, passed=p) for x, q, sid, v, ts, sc, p in rows]

    def add_golden_run(self, run: GoldenRunRecord) -> None:
        row = golden_run_row(run)
        with self._conn(f"store a golden run of {run.golden_set} on {run.version}") as conn:
            conn.execute(insert_golden_run_sql("%s", json_cast="::jsonb"), row)

    def golden_runs(self, *, after: tuple[int, int], limit: int) -> list[tuple[tuple[int, int], GoldenRunRecord]]:
        with self._conn("read golden runs") as conn:
            rows = conn.execute(
                "SELECT xid::text::bigint, id, version, golden_set, started, finished, body FROM golden_runs "
                f"WHERE {_FEED_VISIBLE} AND (xid, id) > (%s::text::xid8, %s) ORDER BY xid, id LIMIT %s",
                (str(after[0]), after[1], int(limit))).fetchall()
        return [((int(x), int(i)), GoldenRunRecord(version=v, golden_set=g, started=float(st),
                                                  finished=float(fi), body=MappingProxyType(dict(b))))
                for x, i, v, g, st, fi, b in rows]

    def drift_reports(self, *, after: tuple[int, int], limit: int
                      ) -> list[tuple[tuple[int, int], DriftReportRecord]]:
        with self._conn("read drift reports") as conn:
            rows = conn.execute(
                "SELECT xid::text::bigint, id, version, checked_at, body FROM drift_reports "
                f"WHERE {_FEED_VISIBLE} AND (xid, id) > (%s::text::xid8, %s) ORDER BY xid, id LIMIT %s",
                (str(after[0]), after[1], int(limit))).fetchall()
        return [((int(x), int(i)), DriftReportRecord(version=v, checked_at=float(at), body=MappingProxyType(dict(b))))
                for x, i, v, at, b in rows]

    def add_pair(self, pair: PairRecord) -> bool:
        row = pair_row(pair)
        with self._conn(f"store a shadow pair of {pair.canary}") as conn:
            return int(conn.execute(insert_pair_sql("%s", json_cast="::jsonb"), row).rowcount) > 0

    def pairs(self, canary: str, *, since: float, limit: int) -> list[PairRecord]:
        with self._conn(f"read shadow pairs of {canary}") as conn:
            return [pair_record(r) for r in conn.execute(pairs_sql("%s", limit), (canary, since)).fetchall()]

    def paired_samples(self, canary: str, sample_ids: Sequence[int]) -> set[int]:
        if not sample_ids:
            return set()
        with self._conn(f"read shadow pairs of {canary}") as conn:
            rows = conn.execute(paired_samples_sql("%s", len(sample_ids)), (canary, *map(int, sample_ids)))
            return {int(r[0]) for r in rows.fetchall()}

    def add_feedback(self, events: Sequence[FeedbackRecord]) -> list[bool]:
        if not events:
            return []
        with self._conn(f"store {len(events)} feedback event(s)") as conn:
            return [int(conn.execute(insert_feedback_sql("%s"), feedback_row(e)).rowcount) > 0 for e in events]

    def close(self) -> None:
        """Close the pool; later calls raise StoreError."""
        if self._closed:
            return
        self._closed = True
        self._pool.close()



def first_line(e: BaseException) -> str:
    """The first line of a database error, bounded (psycopg's messages run to many lines)."""
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
