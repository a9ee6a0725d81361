"""Suite-wide settings: offline model hub, no torch in the light path unless a test asks for it; nothing a test
starts outlives the suite, and each outcome is logged as it comes (tests/support/suite_guard.py)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from collections.abc import Iterator

import pytest

from observer_dev import pgserver as postgres
from tests.support import suite_guard


def pytest_configure(config: pytest.Config) -> None:
    suite_guard.pytest_configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    suite_guard.pytest_unconfigure(config)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.Postgres]:
    """One real PostgreSQL for the session (Debian package, temp cluster on a free loopback port)."""
    with postgres.run_postgres() as server:
        yield server


# The longest files first: on `-n 2 --dist loadfile` (make test) a worker takes each at the start instead of
# finishing the suite alone on it while the other idles. Order within a file is kept. (make test runs the
# game day in its serial part; a plain `pytest -n 2` still gets it first.)
LONG_FIRST = ("tests/integration/test_gameday.py", "tests/golden/test_alerts_rules.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)  # stable: everything else keeps its collected order
