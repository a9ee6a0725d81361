"""The SQLite sample store: WAL, migrations, clear errors at open (the contract itself, on both backends:
tests/integration/test_store_contract.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from observer.errors import StoreError
from observer.store.base import SampleStore
from observer.store.sql import content_hash
from observer.store.sqlite import MIGRATIONS, SCHEMA_VERSION, SqliteStore
from tests.support.store import Clock, rec


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    s = SqliteStore(tmp_path / "s.db", clock=Clock())
    yield s  # type: ignore[misc]
    s.close()


def test_is_a_sample_store_and_uses_wal(store: SqliteStore) -> None:
    assert isinstance(store, SampleStore)
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert store.schema_version == SCHEMA_VERSION


def test_content_hash_is_unambiguous() -> None:
    assert content_hash("ab", "c") != content_hash("a", "bc")
    assert content_hash("x", "y") == content_hash("x", "y")


def test_migrates_an_old_schema_and_keeps_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0])
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO samples (version, ts, source, prompt, output, content_hash) "
               "VALUES ('stable', 1.0, 'ingest', 'p', 'o', 'h')")
    db.commit()
    db.close()
    store = SqliteStore(path)
    assert store.schema_version == SCHEMA_VERSION
    assert [s.prompt for s in store.samples("stable")] == ["p"]
    assert store._db.execute("SELECT name FROM sqlite_master WHERE name = 'samples_content_hash'").fetchone()
    store.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    db.close()
    with pytest.raises(StoreError, match="newer than this observer"):
        SqliteStore(path)


def test_corrupt_file_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not an sqlite database at all" * 200)
    with pytest.raises(StoreError, match=r"corrupt.*move it aside"):
        SqliteStore(path)


def test_damaged_pages_give_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    store = SqliteStore(path)
    store.add([rec(i=i) for i in range(2000)])
    store.close()
    data = bytearray(path.read_bytes())
    for offset in range(4096 * 2, len(data), 4096 * 3):  # scribble over some b-tree pages
        data[offset:offset + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="could not open sample store"):
        SqliteStore(path)


def test_locked_database_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    SqliteStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="locked by another process"):
            SqliteStore(path, busy_timeout_seconds=0.1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_missing_directory_and_closed_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        SqliteStore(tmp_path / "nope" / "x.db")
    store = SqliteStore(tmp_path / "c.db")
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="is closed"):
        store.add([rec()])
