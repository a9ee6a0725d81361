"""The sample store contract on both backends: SQLite (a file) and PostgreSQL (a real server from Debian's
package, started by the suite on a free loopback port). Same tests, same expectations."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from observer.errors import StoreError
from observer.store.base import ManagedStore, SampleRecord, SampleStore
from observer.store.postgres import SCHEMA_VERSION as PG_SCHEMA
from observer.store.postgres import PostgresStore
from observer.store.sql import content_hash
from observer.store.sqlite import SqliteStore
from observer_dev import pgserver as postgres
from observer_dev.pgserver import Postgres
from tests.support.store import Clock, rec

pytestmark = pytest.mark.integration
@pytest.fixture()
def store(clocked: tuple[ManagedStore, Clock]) -> ManagedStore:
    return clocked[0]


def _score_rows(store: ManagedStore) -> int:
    if isinstance(store, SqliteStore):
        return int(store._db.execute("SELECT COUNT(*) FROM scores").fetchone()[0])
    assert isinstance(store, PostgresStore)
    with store._conn("count scores") as conn:
        return int(conn.execute("SELECT COUNT(*) FROM scores").fetchone()[0])


def test_is_a_managed_sample_store(store: ManagedStore) -> None:
    assert isinstance(store, SampleStore) and isinstance(store, ManagedStore)
    assert store.size_bytes() > 0


def test_add_returns_ids_in_order_and_reads_back_newest_first(store: ManagedStore) -> None:
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
    assert store.add([]) == []


def test_unicode_and_large_texts_round_trip(store: ManagedStore) -> None:
    text = "héllo 👋 " * 20_000 + "\u2028end"
    [sid] = store.add([SampleRecord(version="stable", prompt=text, output=text[::-1], ts=1.0)])
    [got] = store.samples("stable")
    assert (got.id, got.prompt, got.output) == (sid, text, text[::-1])


def test_filters_since_until_limit_source(store: ManagedStore) -> None:
    store.add([rec(i=i, source="golden" if i % 2 else "ingest") for i in range(10)])
    assert [s.ts for s in store.samples("stable", since=1_000_005.0)] == [1_000_009.0 - k for k in range(5)]
    assert [s.ts for s in store.samples("stable", until=1_000_002.0)] == [1_000_001.0, 1_000_000.0]
    assert len(store.samples("stable", limit=3)) == 3
    assert {s.source for s in store.samples("stable", source="golden")} == {"golden"}
    assert store.samples("stable", limit=0) == []


def test_attach_score_replaces_and_unscored_excludes(store: ManagedStore) -> None:
    ids = store.add([rec(i=i) for i in range(4)])
    store.attach_score(ids[0], scorer="refusal", passed=True, score=None, reason="", meta={"k": [1, 2]})
    store.attach_score(ids[0], scorer="refusal", passed=False, score=0.25, reason="again", meta={"k": "v"})
    store.attach_score(ids[1], scorer="judge", passed=None, score=None, reason="judge error", meta={})
    scored = {s.id: s for s in store.samples("stable")}
    score = scored[ids[0]].scores["refusal"]
    assert (score.passed, score.score, score.reason, dict(score.meta)) == (False, 0.25, "again", {"k": "v"})
    assert scored[ids[1]].scores["judge"].passed is None
    assert [s.id for s in store.unscored("stable", "refusal", limit=10)] == [ids[3], ids[2], ids[1]]
    assert [s.id for s in store.unscored("stable", "refusal", limit=1)] == [ids[3]]


def test_attach_score_errors_are_precise(store: ManagedStore) -> None:
    with pytest.raises(StoreError, match="sample 999 does not exist"):
        store.attach_score(999, scorer="x", passed=True, score=1.0, reason="", meta={})
    [sid] = store.add([rec()])
    with pytest.raises(StoreError, match="not JSON-serialisable"):
        store.attach_score(sid, scorer="x", passed=True, score=1.0, reason="", meta={"bad": object()})
    # the store still works after a failed call (no transaction left open)
    store.attach_score(sid, scorer="x", passed=True, score=1.0, reason="", meta={})


def test_a_bad_batch_is_refused_whole_and_leaves_the_store_usable(store: ManagedStore) -> None:
    with pytest.raises(StoreError, match=r"could not store 2 sample\(s\)"):
        store.add([rec(i=1), rec(i=2, prompt_tokens=2**70)])  # too large for the column
    assert store.count() == 0   # all or nothing
    assert len(store.add([rec(i=3)])) == 1


def test_retention_by_age_and_rows(clocked: tuple[ManagedStore, Clock]) -> None:
    store, _ = clocked
    store.add([rec(i=i, ts=1_000_000.0 - 1000 + i) for i in range(10)])  # 1000..991 s old
    store.add([rec("canary", i, ts=999_990.0 + i) for i in range(10)])
    ids = store.add([rec(i=100 + i, ts=999_995.0) for i in range(5)])  # equal timestamps: id breaks ties
    store.attach_score(ids[0], scorer="s", passed=True, score=1.0, reason="", meta={})
    deleted = store.prune(max_age_seconds=995.0, max_rows_per_version=4)
    stable = store.samples("stable")
    assert [s.id for s in stable] == sorted(ids, reverse=True)[:4]
    assert store.count("canary") == 4 and next(s.ts for s in store.samples("canary")) == 999_999.0
    assert deleted == 25 - 8
    assert _score_rows(store) == 0  # the score of a pruned sample went with it (ON DELETE CASCADE)


def test_closed_store_refuses_calls(store: ManagedStore) -> None:
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="is closed"):
        store.add([rec()])


def test_concurrent_writers_from_threads(store: ManagedStore) -> None:
    def work(k: int) -> None:
        for j in range(20):
            store.add([rec(f"v{k}", j)])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.counts() == {f"v{k}": 20 for k in range(4)}


# --- PostgreSQL only ---------------------------------------------------------------------------------

pg = pytest.mark.skipif(not postgres.available(), reason="Debian package postgresql missing")


@pg
def test_two_replicas_opening_one_database_migrate_once_and_share_it(postgres_server: Postgres) -> None:
    url = postgres_server.database()
    opened: list[PostgresStore] = []
    threads = [threading.Thread(target=lambda: opened.append(PostgresStore(url))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(opened) == 3 and all(s.schema_version == PG_SCHEMA for s in opened)
    [sid] = opened[0].add([rec()])
    assert [s.id for s in opened[1].samples("stable")] == [sid]
    for s in opened:
        s.close()


@pg
def test_a_newer_schema_is_refused(postgres_server: Postgres) -> None:
    url = postgres_server.database()
    PostgresStore(url).close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE observer_schema SET version = 99")
    with pytest.raises(StoreError, match="schema version 99, newer than this observer's"):
        PostgresStore(url)


def test_an_unreachable_database_is_named_without_its_password() -> None:
    from tests.support.prom import free_port

    url = f"postgresql://observer:s3cret@127.0.0.1:{free_port()}/samples"
    with pytest.raises(StoreError) as e:
        PostgresStore(url, connect_timeout_seconds=1.0)
    text = str(e.value)
    assert "could not connect to the PostgreSQL sample store at 127.0.0.1:" in text and "/samples" in text
    assert "s3cret" not in text


@pg
def test_serve_starts_degraded_when_the_database_is_down_and_recovers_when_it_comes_up(tmp_path: Path) -> None:
    """Database down at start: serve runs, /readyz says why, ingest answers 503 with Retry-After (nothing is
    acknowledged that was not stored); once PostgreSQL is up the schema is migrated and ingest works."""
    import httpx
    import yaml

    from observer.config import parse_config
    from tests.support.observer_proc import run_observer, wait_until
    from tests.support.prom import free_port

    port = free_port()
    cfg = parse_config(yaml.safe_dump({
        "fleet": {"versions": [{"name": "stable"}]}, "server": {"auth_token": "tok"},
        "sampling": {"store": {"url": f"postgresql://observer@127.0.0.1:{port}/postgres",
                               "connect_timeout_seconds": 1.0}}}), environ={})
    auth = {"Authorization": "Bearer tok"}
    batch = {"samples": [{"version": "stable", "prompt": "p", "output": "o", "ts": 1e9}]}
    with run_observer(cfg, areas=["sample"]) as obs:
        r = obs.get("/readyz")
        assert r.status_code == 503 and "sample store: could not connect" in r.json()["reason"], r.text
        down = httpx.post(obs.url + "/api/v1/samples", json=batch, headers=auth, timeout=15)
        assert down.status_code == 503 and down.headers["Retry-After"] == "5", down.text
        assert "127.0.0.1:" in down.json()["detail"]
        with postgres.run_postgres(port=port):
            def stored() -> bool:
                return httpx.post(obs.url + "/api/v1/samples", json=batch, headers=auth,
                                  timeout=15).status_code == 200
            wait_until(stored, timeout=60, interval=0.5)
            assert obs.get("/readyz").status_code == 200
            rows = httpx.get(obs.url + "/api/v1/samples", params={"version": "stable"}, headers=auth).json()
            assert len(rows["samples"]) == 1  # the refused batch was not stored behind our back


def test_shadow_pairs_are_stored_once_read_in_order_and_pruned(clocked: tuple[ManagedStore, Clock]) -> None:
    from observer.store.pairs import PairRecord

    store, clock = clocked
    body = {"prompt": "p", "judge": {"outcome": "loss"}, "rules": {"refusal": "tie"}, "note": "é 👋"}
    assert store.add_pair(PairRecord("canary", "stable", 7, clock.now - 10, body)) is True
    assert store.add_pair(PairRecord("canary", "stable", 7, clock.now - 5, {"other": 1})) is False  # same sample
    assert store.add_pair(PairRecord("canary", "stable", 8, clock.now - 1, {"x": 2})) is True
    assert store.add_pair(PairRecord("canary-b", "stable", 7, clock.now - 1, {"x": 3})) is True  # another canary
    got = store.pairs("canary", since=0.0, limit=10)
    assert [(p.sample_id, p.ts) for p in got] == [(7, clock.now - 10), (8, clock.now - 1)]
    assert dict(got[0].body) == body and got[0].baseline == "stable"
    assert [p.sample_id for p in store.pairs("canary", since=clock.now - 2, limit=10)] == [8]
    assert store.paired_samples("canary", [7, 8, 9]) == {7, 8} and store.paired_samples("canary", []) == set()
    clock.now += 3600
    store.prune(max_age_seconds=3600 + 5, max_rows_per_version=1000)  # cutoff between the two pairs
    assert [p.sample_id for p in store.pairs("canary", since=0.0, limit=10)] == [8]


def test_feedback_joins_responses_is_stored_once_and_pruned(clocked: tuple[ManagedStore, Clock]) -> None:
    from observer.store.feedback import FeedbackRecord

    store, clock = clocked
    clock.now = 1_000_100.0
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    a, b, _ = store.add([rec(i=1, response_id="chatcmpl-a", conversation="c" * 32),
                         rec("canary", 2, traceparent=f"00-{trace}-00f067aa0ba902b7-01"),
                         rec(i=3, source="golden")])
    by_id, by_trace = store.responses(response_ids={"chatcmpl-a", "chatcmpl-none"}, trace_ids={trace, "0" * 32})
    assert set(by_id) == {"chatcmpl-a"} and set(by_trace) == {trace}
    assert (by_id["chatcmpl-a"].sample_id, by_id["chatcmpl-a"].version, by_id["chatcmpl-a"].unit) == (a, "stable",
                                                                                                      "c" * 32)
    assert (by_trace[trace].version, by_trace[trace].unit) == ("canary", f"sample:{b}")
    assert store.responses(response_ids=set(), trace_ids=set()) == ({}, {})

    def ev(event_id: str, sid: int, unit: str, ts: float, *, version: str = "stable") -> FeedbackRecord:
        return FeedbackRecord(event_id=event_id, version=version, sample_id=sid, unit=unit, answered=1_000_001.0,
                              ts=ts, kind="thumbs", value=0.0, negative=True, comment="é 👋")

    assert store.add_feedback([ev("e1", a, "u", clock.now - 10), ev("e2", a, "u", clock.now - 1),
                               ev("e1", a, "u", clock.now)]) == [True, True, False]
    assert store.add_feedback([ev("e2", a, "u", clock.now)]) == [False] and store.add_feedback([]) == []
    got = store.feedback("stable", since=1_000_000.0, until=clock.now + 1, limit=10)
    assert [(e.event_id, e.negative, e.comment) for e in got] == [("e1", True, "é 👋"), ("e2", True, "é 👋")]
    assert store.feedback("stable", since=1_000_002.0, until=clock.now + 1, limit=10) == []  # answered before
    assert store.unit_feedback({"u", "v"}, since=clock.now - 5) == {"u": 1}
    assert store.stored_feedback_ids({"e1", "e2", "e3"}) == {"e1", "e2"} and store.stored_feedback_ids(set()) == set()
    assert store.answered("stable", since=0.0, until=2e9) == 1  # the golden replay is not a user's answer
    store.attach_score(a, scorer="judge:helpfulness", passed=False, score=None, reason="", meta={})
    assert store.judged_feedback("judge:helpfulness", since=0.0, limit=10) == [(False, False)]  # e1, e2 on `a`
    assert store.judged_feedback("judge:other", since=0.0, limit=10) == []
    clock.now += 3600
    store.prune(max_age_seconds=3600 + 5, max_rows_per_version=1000)  # cutoff between the two events
    assert [e.event_id for e in store.feedback("stable", since=0.0, until=clock.now, limit=10)] == ["e2"]


def test_fingerprint_counts_group_by_hash_pair_in_the_range(store: ManagedStore) -> None:
    store.add([rec(i=1, template_hash="aaaaaaaaaaaa", sampling_hash="111111111111",
                   traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
               rec(i=2, template_hash="aaaaaaaaaaaa", sampling_hash="111111111111"),
               rec(i=3, template_hash="bbbbbbbbbbbb"),  # a mirror that sent no sampling parameters
               rec(i=4),  # no fingerprint at all: not counted
               rec(i=50, template_hash="cccccccccccc", sampling_hash="111111111111"),  # after the range
               rec("canary", 2, template_hash="dddddddddddd", sampling_hash="222222222222")])
    got = store.fingerprint_counts("stable", since=1_000_000.0, until=1_000_010.0)
    assert got == {("aaaaaaaaaaaa", "111111111111"): 2, ("bbbbbbbbbbbb", ""): 1}
    [back] = [s for s in store.samples("stable") if s.prompt == "prompt 1"]
    assert (back.template_hash, back.sampling_hash) == ("aaaaaaaaaaaa", "111111111111")
    assert back.traceparent == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"  # scores link to it
    assert {s.traceparent for s in store.samples("stable") if s.prompt != "prompt 1"} == {None}
    assert store.fingerprint_counts("nope", since=0.0, until=2e9) == {}


def test_a_fleet_wide_budget_is_spent_once_per_unit_across_concurrent_spenders(
        clocked: tuple[ManagedStore, Clock]) -> None:
    """Four threads (on PostgreSQL, four pooled connections: as many replicas) race for 25 units of 100 tries."""
    store, clock = clocked
    took: list[bool] = []
    lock = threading.Lock()

    def spender() -> None:
        for _ in range(25):
            ok = store.spend("judge_calls", limit=25, window_seconds=3600)
            with lock:
                took.append(ok)

    threads = [threading.Thread(target=spender) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert took.count(True) == 25 and len(took) == 100
    assert not store.spend("judge_calls", limit=25, window_seconds=3600)
    assert store.spend("other_budget", limit=1, window_seconds=3600)  # budgets are apart
    clock.now += 3600.5
    assert store.spend("judge_calls", limit=25, window_seconds=3600)  # the window moved on
