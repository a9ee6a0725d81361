"""Suite-wide settings: offline model hub, no torch in the light path unless a test asks for it."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from collections.abc import Iterator

import pytest

from tests.support import postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.Postgres]:
    """One real PostgreSQL for the session (Debian package, temp cluster on a free loopback port)."""
    with postgres.run_postgres() as server:
        yield server
