"""The leader of the singleton jobs across replicas sharing PostgreSQL: a session-level advisory lock."""

from __future__ import annotations

import logging
import threading
from contextlib import suppress
from typing import Any

from observer.store.postgres import first_line, redact_dsn

log = logging.getLogger("observer.store")

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
                    log.warning("lost the singleton-jobs leadership (%s: %s)", self.where, first_line(e))
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
