"""The SQLite sample store: contract 3 behaviour, migrations, retention, clear errors at open."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from observer.errors import StoreError
from observer.store.base import SampleRecord, SampleStore
from observer.store.sqlite import MIGRATIONS, SCHEMA_VERSION, SqliteStore, content_hash


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def rec(version: str = "stable", i: int = 0, ts: float | None = None, **kw: object) -> SampleRecord:
    return SampleRecord(version=version, prompt=f"prompt {i}", output=f"output {i}",
                        ts=1_000_000.0 + i if ts is None else ts, **kw)  # type: ignore[arg-type]


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


def test_add_returns_ids_in_order_and_reads_back_newest_first(store: SqliteStore) -> None:
    ids = store.add([rec(i=1, model="m", finish_reason="stop", prompt_tokens=3, output_tokens=5,
                         latency_s=0.5, ttft_s=0.1, tenant_tier="gold", source="proxy"),
                     rec(i=3), rec(i=2), rec("canary", 9)])
    assert ids == sorted(ids) and len(set(ids)) == 4
    got = store.samples("stable")
    assert [s.prompt for s in got] == ["prompt 3", "prompt 2", "prompt 1"]
    first = got[-1]
    assert (first.id, first.model, first.finish_reason, first.prompt_tokens, first.output_tokens,
            first.latency_s, first.ttft_s, first.tenant_tier, first.source) == \
        (ids[0], "m", "stop", 3, 5, 0.5, 0.1, "gold", "proxy")
    assert first.content_hash == content_hash("prompt 1", "output 1")
    assert dict(first.scores) == {}
    assert store.count() == 4 and store.count("stable") == 3 and store.count("nope") == 0
    assert store.counts() == {"stable": 3, "canary": 1}


def test_filters_since_until_limit_source(store: SqliteStore) -> None:
    store.add([rec(i=i, source="golden" if i % 2 else "ingest") for i in range(10)])
    assert [s.ts for s in store.samples("stable", since=1_000_005.0)] == [1_000_009.0 - k for k in range(5)]
    assert [s.ts for s in store.samples("stable", until=1_000_002.0)] == [1_000_001.0, 1_000_000.0]
    assert len(store.samples("stable", limit=3)) == 3
    assert {s.source for s in store.samples("stable", source="golden")} == {"golden"}
    assert store.samples("stable", limit=0) == []


def test_content_hash_is_unambiguous() -> None:
    assert content_hash("ab", "c") != content_hash("a", "bc")
    assert content_hash("x", "y") == content_hash("x", "y")


def test_attach_score_replaces_and_unscored_excludes(store: SqliteStore) -> None:
    ids = store.add([rec(i=i) for i in range(4)])
    store.attach_score(ids[0], scorer="refusal", passed=True, score=None, reason="", meta={"k": [1, 2]})
    store.attach_score(ids[0], scorer="refusal", passed=False, score=0.25, reason="again", meta={})
    store.attach_score(ids[1], scorer="judge", passed=None, score=None, reason="judge error", meta={})
    scored = {s.id: s for s in store.samples("stable")}
    score = scored[ids[0]].scores["refusal"]
    assert (score.passed, score.score, score.reason) == (False, 0.25, "again")
    assert scored[ids[1]].scores["judge"].passed is None
    assert [s.id for s in store.unscored("stable", "refusal", limit=10)] == [ids[3], ids[2], ids[1]]
    assert [s.id for s in store.unscored("stable", "refusal", limit=1)] == [ids[3]]


def test_attach_score_errors_are_precise(store: SqliteStore) -> None:
    with pytest.raises(StoreError, match="sample 999 does not exist"):
        store.attach_score(999, scorer="x", passed=True, score=1.0, reason="", meta={})
    [sid] = store.add([rec()])
    with pytest.raises(StoreError, match="not JSON-serialisable"):
        store.attach_score(sid, scorer="x", passed=True, score=1.0, reason="", meta={"bad": object()})


def test_retention_by_age_and_rows(tmp_path: Path) -> None:
    clock = Clock(1_000_000.0)
    store = SqliteStore(tmp_path / "r.db", clock=clock)
    store.add([rec(i=i, ts=1_000_000.0 - 1000 + i) for i in range(10)])  # 1000..991 s old
    store.add([rec("canary", i, ts=999_990.0 + i) for i in range(10)])
    ids = store.add([rec(i=100 + i, ts=999_995.0) for i in range(5)])  # equal timestamps: id breaks ties
    store.attach_score(ids[0], scorer="s", passed=True, score=1.0, reason="", meta={})
    deleted = store.prune(max_age_seconds=995.0, max_rows_per_version=4)
    stable = store.samples("stable")
    assert [s.id for s in stable] == sorted(ids, reverse=True)[:4]
    assert store.count("canary") == 4 and next(s.ts for s in store.samples("canary")) == 999_999.0
    assert deleted == 25 - 8
    # the score of a pruned sample went with it (ON DELETE CASCADE)
    assert store._db.execute("SELECT COUNT(*) FROM scores").fetchone()[0] == 0
    store.close()


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


def test_concurrent_writers_from_threads(store: SqliteStore) -> None:
    def work(k: int) -> None:
        for j in range(20):
            store.add([rec(f"v{k}", j)])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.counts() == {f"v{k}": 20 for k in range(4)}
