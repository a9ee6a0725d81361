"""Fixtures of the integration tests: a fresh store of each backend (SQLite file, real PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from observer.store.base import ManagedStore
from observer_dev import pgserver as postgres
from tests.support.store import Clock, open_backend

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.skipif(
    not postgres.available(), reason="Debian package postgresql missing (make test installs it)"))]


@pytest.fixture(params=BACKENDS)
def clocked(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ManagedStore, Clock]]:
    """A new store of each backend with a settable clock; closed after the test."""
    clock = Clock()
    s = open_backend(request.param, tmp_path, request, clock)
    yield s, clock
    s.close()
