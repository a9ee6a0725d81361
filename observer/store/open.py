"""Open the configured sample store: PostgreSQL when `sampling.store.url` is set, else the SQLite file."""

from __future__ import annotations

import time
from collections.abc import Callable

from observer.config.sampling import StoreSpec
from observer.store.base import ManagedStore


def open_store(spec: StoreSpec, *, clock: Callable[[], float] = time.time, wait: bool = True) -> ManagedStore:
    """The store `spec` names, opened and migrated; StoreError (naming what and where) when it cannot be.

    `wait=False` (the running service): a PostgreSQL that is down at start does not stop the service; the
    store reports why in `not_ready()` and reconnects in the background. A SQLite file opens or fails now."""
    if spec.url:
        from observer.store.postgres import PostgresStore

        return PostgresStore(spec.url, max_connections=spec.max_connections,
                             connect_timeout_seconds=spec.connect_timeout_seconds, clock=clock, wait=wait)
    from observer.store.sqlite import SqliteStore

    return SqliteStore(spec.path, busy_timeout_seconds=spec.busy_timeout_seconds, clock=clock)
