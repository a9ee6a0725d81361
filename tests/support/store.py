"""Helpers of the store tests: a settable clock and numbered sample records."""

from __future__ import annotations

from pathlib import Path

import pytest

from observer.store.base import ManagedStore, SampleRecord


class Clock:
    """A clock the test sets (`now`)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def rec(version: str = "stable", i: int = 0, ts: float | None = None, **kw: object) -> SampleRecord:
    """Sample `i` of `version`: prompt `prompt i`, output `output i`, at 1e6 + i unless `ts`."""
    return SampleRecord(version=version, prompt=f"prompt {i}", output=f"output {i}",
                        ts=1_000_000.0 + i if ts is None else ts, **kw)  # type: ignore[arg-type]


def open_backend(backend: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock) -> ManagedStore:
    """A fresh store of `backend` ("sqlite": a file in `tmp_path`; "postgres": a new database on the
    session's server, the `postgres_server` fixture)."""
    from observer.store.postgres import PostgresStore
    from observer.store.sqlite import SqliteStore

    if backend == "sqlite":
        return SqliteStore(tmp_path / "s.db", clock=clock)
    server = request.getfixturevalue("postgres_server")
    return PostgresStore(server.database(), clock=clock)
