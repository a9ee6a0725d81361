"""The PostgreSQL sample store: the same contract as SQLite's, for a fleet and for several replicas.

psycopg 3 with its connection pool. Durability: `add` returns after its transaction commits with the
server's `synchronous_commit` (on by default: the WAL record is flushed), so an acknowledged sample
survives `kill -9` of the observer and a crash of the database. Migrations are numbered, run in one
transaction under an advisory lock (two replicas starting together migrate once), and recorded in
`observer_schema`. A database that is unreachable, refuses the credentials or holds a newer schema gives
a StoreError naming the host, port and database (never the password) and what to do.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from observer.store.base import SampleRecord, Score, StoredSample, StoreError, stored_sample
from observer.store.sql import SqlReads, encode_meta, insert_rows, insert_sql

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE samples (
        id BIGSERIAL PRIMARY KEY,
        version TEXT NOT NULL,
        ts DOUBLE PRECISION NOT NULL,
        source TEXT NOT NULL,
        model TEXT,
        prompt TEXT NOT NULL,
        output TEXT NOT NULL,
        finish_reason TEXT,
        prompt_tokens BIGINT,
        output_tokens BIGINT,
        latency_s DOUBLE PRECISION,
        ttft_s DOUBLE PRECISION,
        tenant_tier TEXT,
        content_hash TEXT NOT NULL
    );
    CREATE INDEX samples_version_ts ON samples (version, ts);
    CREATE INDEX samples_content_hash ON samples (content_hash);
    CREATE TABLE scores (
        sample_id BIGINT NOT NULL REFERENCES samples (id) ON DELETE CASCADE,
        scorer TEXT NOT NULL,
        passed BOOLEAN,
        score DOUBLE PRECISION,
        reason TEXT NOT NULL,
        meta JSONB NOT NULL,
        ts DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (sample_id, scorer)
    );
    CREATE INDEX scores_scorer ON scores (scorer, sample_id);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
MIGRATION_LOCK = 0x0B5E_0001  # pg_advisory_xact_lock key: one migrator at a time

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
            return (f"could not connect to the PostgreSQL sample store at {self.where}: {_first_line(e)}; check "
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
            raise StoreError(f"could not {what}: connection to {self.where} failed: {_first_line(e)}") from e
        except self._psycopg.Error as e:
            raise StoreError(f"could not {what} in {self.where}: {_first_line(e)}") from e

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

    def add(self, samples: Sequence[SampleRecord]) -> list[int]:
        """Store samples in one committed transaction and return their ids, in input order."""
        if not samples:
            return []
        rows = insert_rows(samples)
        ids: list[int] = []
        with self._conn(f"store {len(rows)} sample(s)") as conn, conn.cursor() as cur:
            try:
                cur.executemany(insert_sql("%s") + " RETURNING id", rows, returning=True)
            except (ValueError, OverflowError) as e:  # not adaptable (e.g. a NUL in text): rolled back
                raise StoreError(f"could not store {len(rows)} sample(s) in {self.where}: {e}") from e
            while True:
                ids.append(int(cur.fetchone()[0]))
                if not cur.nextset():
                    break
        return ids

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
                conn.execute(
                    "INSERT INTO scores (sample_id, scorer, passed, score, reason, meta, ts) "
                    "VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s) ON CONFLICT (sample_id, scorer) DO UPDATE SET "
                    "passed = excluded.passed, score = excluded.score, reason = excluded.reason, "
                    "meta = excluded.meta, ts = excluded.ts",
                    (sample_id, scorer, passed, score, reason, encoded, self._clock()))
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

    def size_bytes(self) -> int:
        """Bytes on disk of the store's tables and their indexes."""
        with self._conn("measure the store") as conn:
            row = conn.execute("SELECT pg_total_relation_size('samples') + pg_total_relation_size('scores')"
                               ).fetchone()
        return int(row[0])

    def prune(self, *, max_age_seconds: float, max_rows_per_version: int) -> int:
        """Delete samples older than `max_age_seconds` and beyond the newest `max_rows_per_version`."""
        cutoff = self._clock() - max_age_seconds
        with self._conn("prune the sample store") as conn:
            deleted = conn.execute("DELETE FROM samples WHERE ts < %s", (cutoff,)).rowcount
            deleted += conn.execute(
                "DELETE FROM samples WHERE id IN (SELECT id FROM (SELECT id, row_number() OVER "
                "(PARTITION BY version ORDER BY ts DESC, id DESC) AS n FROM samples) ranked WHERE n > %s)",
                (max_rows_per_version,)).rowcount
        return int(deleted)

    def close(self) -> None:
        """Close the pool; later calls raise StoreError."""
        if self._closed:
            return
        self._closed = True
        self._pool.close()



def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


LEADER_LOCK = 0x0B5E_1EAD  # pg_try_advisory_lock key of the singleton-jobs leader


class AdvisoryLeader:
    """Leadership of the singleton jobs by a session-level PostgreSQL advisory lock on one dedicated
    connection. The lock lives exactly as long as that connection: a replica that dies (even SIGKILL), or
    whose connection drops, releases it, and the next `holds()` of another replica takes it."""

    def __init__(self, url: str, *, key: int = LEADER_LOCK, connect_timeout_seconds: float = 5.0) -> None:
        import psycopg

        self._psycopg = psycopg
        self.url = url
        self.where = redact_dsn(url)
        self.key = key
        self.timeout = max(1, int(connect_timeout_seconds))
        self._conn: Any = None
        self._held = False
        self._lock = threading.Lock()
        self.changes = 0  # times leadership was gained or lost (exported)

    def holds(self) -> bool:
        with self._lock:
            was = self._held
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._psycopg.connect(self.url, autocommit=True, connect_timeout=self.timeout)
                    self._held = False
                if self._held:
                    self._conn.execute("SELECT 1")  # still connected: still ours
                else:
                    self._held = bool(self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,))
                                      .fetchone()[0])
            except self._psycopg.Error as e:
                if self._held:
                    log.warning("lost the singleton-jobs leadership (%s: %s)", self.where, _first_line(e))
                self._held = False
                self._drop()
            if self._held != was:
                self.changes += 1
                if self._held:
                    log.info("this replica now runs the singleton jobs (advisory lock on %s)", self.where)
            return self._held

    def current(self) -> bool:
        return self._held

    def _drop(self) -> None:
        if self._conn is not None:
            with suppress(self._psycopg.Error):
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._held = False
            self._drop()
