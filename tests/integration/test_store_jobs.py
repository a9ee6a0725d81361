"""Shared work in the store on both backends: the job queue (claims, leases, the completion fence, retries,
bounds), the score feed in commit order and stored golden runs. PostgreSQL is a real server (Debian's
package, started by the suite); two PostgresStore objects stand for two replicas."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from observer.errors import StoreError
from observer.store.base import ManagedStore
from observer.store.jobs import GoldenRunRecord, JobSpec, ScoreWrite, SharedWork
from observer.store.postgres import MIGRATIONS as PG_MIGRATIONS
from observer.store.postgres import PostgresStore
from observer_dev import pgserver as postgres
from observer_dev.pgserver import Postgres
from tests.support.store import Clock, rec

pytestmark = pytest.mark.integration
def _work(store: ManagedStore) -> SharedWork:
    assert isinstance(store, SharedWork)
    return store


def _jobs(n: int, kind: str = "judge") -> list[JobSpec]:
    return [JobSpec(kind=kind, key=f"{kind}:{i}", payload={"sample_id": i}) for i in range(n)]


def test_enqueue_adds_a_key_once_and_drops_beyond_the_bound(clocked: tuple[ManagedStore, Clock]) -> None:
    q = _work(clocked[0])
    first = q.enqueue(_jobs(3), max_queued=10)
    assert (first.added, first.duplicate, first.dropped) == (3, 0, 0)
    again = q.enqueue(_jobs(5), max_queued=4)
    assert (again.added, again.duplicate, again.dropped) == (1, 3, 1)
    assert q.job_counts() == {("judge", "queued"): 4}


def test_claims_oldest_first_and_never_the_same_job_twice(clocked: tuple[ManagedStore, Clock]) -> None:
    q = _work(clocked[0])
    q.enqueue(_jobs(5) + _jobs(2, kind="golden"), max_queued=100)
    a = q.claim(worker="a", kinds=["judge"], limit=2, lease_seconds=30)
    b = q.claim(worker="b", kinds=["judge"], limit=10, lease_seconds=30)
    assert [j.key for j in a] == ["judge:0", "judge:1"]
    assert [j.key for j in b] == ["judge:2", "judge:3", "judge:4"]
    assert all(j.attempt == 1 and j.payload["sample_id"] == int(j.key[6:]) for j in a + b)
    assert q.claim(worker="c", kinds=["judge"], limit=10, lease_seconds=30) == []
    assert [j.kind for j in q.claim(worker="c", kinds=["golden"], limit=10, lease_seconds=30)] == ["golden"] * 2


def test_concurrent_claimers_split_the_queue(clocked: tuple[ManagedStore, Clock], request: pytest.FixtureRequest,
                                             tmp_path: Path) -> None:
    """Four threads claim one job at a time until the queue is empty (on PostgreSQL each has its own store
    object, i.e. its own pool, like a replica): every job is claimed exactly once."""
    store, clock = clocked
    q = _work(store)
    q.enqueue(_jobs(200), max_queued=1000)
    others: list[ManagedStore] = []
    if isinstance(store, PostgresStore):
        others = [PostgresStore(store._url, clock=clock) for _ in range(3)]
    queues = [q] + [_work(o) for o in others] if others else [q] * 4
    got: list[list[str]] = [[] for _ in queues]

    def worker(i: int) -> None:
        while jobs := queues[i].claim(worker=f"w{i}", kinds=["judge"], limit=1, lease_seconds=30):
            got[i].extend(j.key for j in jobs)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(queues))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for o in others:
        o.close()
    keys = [k for g in got for k in g]
    assert sorted(keys) == sorted(f"judge:{i}" for i in range(200))
    assert len(set(keys)) == 200


def test_a_lost_lease_is_fenced_the_late_completion_writes_nothing(clocked: tuple[ManagedStore, Clock]) -> None:
    store, clock = clocked
    q = _work(store)
    (sid,) = store.add([rec()])
    q.enqueue([JobSpec(kind="judge", key="j", payload={"sample_id": sid})], max_queued=10)
    (slow,) = q.claim(worker="slow", kinds=["judge"], limit=1, lease_seconds=10)
    clock.now += 5
    assert q.claim(worker="fast", kinds=["judge"], limit=1, lease_seconds=10) == []  # still leased
    renewed = q.renew(slow, lease_seconds=10)
    assert renewed is not None and renewed.lease_until == clock.now + 10
    clock.now += 11  # the slow replica hangs past its lease: the job is claimable again
    (fast,) = q.claim(worker="fast", kinds=["judge"], limit=1, lease_seconds=10)
    assert fast.attempt == 2
    assert q.complete(fast, scores=[ScoreWrite(sid, "judge:helpful", True, 1.0, "fast")])
    assert not q.complete(slow, scores=[ScoreWrite(sid, "judge:helpful", False, 0.0, "slow")])
    assert q.renew(slow, lease_seconds=10) is None
    assert q.release(slow, error="late", retry_in_seconds=0) == "lost"
    (s,) = store.samples("stable")
    assert s.scores["judge:helpful"].reason == "fast"
    assert q.job_counts() == {("judge", "done"): 1}
    assert _done_count(store, "j") == 1


def _done_count(store: ManagedStore, key: str) -> int:
    if isinstance(store, PostgresStore):
        with store._conn("read") as conn:
            return int(conn.execute("SELECT done_count FROM jobs WHERE key = %s", (key,)).fetchone()[0])
    return int(store._db.execute("SELECT done_count FROM jobs WHERE key = ?", (key,)).fetchone()[0])  # type: ignore[attr-defined]


def test_release_retries_after_a_delay_then_fails_for_good(clocked: tuple[ManagedStore, Clock]) -> None:
    store, clock = clocked
    q = _work(store)
    q.enqueue([JobSpec(kind="judge", key="j", max_attempts=2)], max_queued=10)
    (j,) = q.claim(worker="a", kinds=["judge"], limit=1, lease_seconds=10)
    assert q.release(j, error="judge timed out\nafter 30 s", retry_in_seconds=5) == "queued"
    assert q.claim(worker="a", kinds=["judge"], limit=1, lease_seconds=10) == []  # not before 5 s
    clock.now += 5
    (j2,) = q.claim(worker="b", kinds=["judge"], limit=1, lease_seconds=10)
    assert j2.attempt == 2
    assert q.release(j2, error="judge timed out", retry_in_seconds=5) == "failed"
    clock.now += 60
    assert q.claim(worker="a", kinds=["judge"], limit=1, lease_seconds=10) == []
    assert q.job_counts() == {("judge", "failed"): 1}


def test_a_job_whose_replica_dies_on_every_attempt_ends_failed(clocked: tuple[ManagedStore, Clock]) -> None:
    store, clock = clocked
    q = _work(store)
    q.enqueue([JobSpec(kind="golden", key="g", max_attempts=2)], max_queued=10)
    for _ in range(2):
        assert q.claim(worker="dies", kinds=["golden"], limit=1, lease_seconds=10)
        clock.now += 11
    assert q.claim(worker="x", kinds=["golden"], limit=1, lease_seconds=10) == []
    assert q.job_counts() == {("golden", "failed"): 1}
    clock.now += 100
    assert q.prune_jobs(max_age_seconds=50) == 1 and q.job_counts() == {}


def test_completion_writes_scores_and_golden_runs_in_the_feed(clocked: tuple[ManagedStore, Clock]) -> None:
    store, _ = clocked
    q = _work(store)
    a, b = store.add([rec("stable", 0), rec("canary", 1)])
    store.attach_score(a, scorer="rule:refusal", passed=True, score=None, reason="ok", meta={})
    first = q.score_events(after=(0, 0), limit=100)
    assert [(e.sample_id, e.version, e.scorer, e.passed) for e in first] == [(a, "stable", "rule:refusal", True)]
    assert first[0].sample_ts == 1_000_000.0
    q.enqueue([JobSpec(kind="judge", key="j")], max_queued=10)
    (j,) = q.claim(worker="w", kinds=["judge"], limit=1, lease_seconds=10)
    run = GoldenRunRecord(version="canary", golden_set="basic", started=5.0, finished=6.0, body={"items": [1, 2]})
    assert q.complete(j, scores=[ScoreWrite(b, "judge:helpful", None, None, "judge error", {"error": True}),
                                 ScoreWrite(10**9, "judge:helpful", True, 1.0, "pruned sample")],
                      golden_runs=[run])
    after = q.score_events(after=first[-1].cursor, limit=100)
    assert [(e.sample_id, e.scorer, e.passed) for e in after] == [(b, "judge:helpful", None)]
    # re-scoring a sample moves its event to the end of the feed
    store.attach_score(a, scorer="rule:refusal", passed=False, score=None, reason="now refused", meta={})
    tail = q.score_events(after=after[-1].cursor, limit=100)
    assert [(e.sample_id, e.passed) for e in tail] == [(a, False)]
    assert q.score_events(after=tail[-1].cursor, limit=100) == []
    q.add_golden_run(GoldenRunRecord(version="stable", golden_set="basic", started=7.0, finished=8.0, body={}))
    runs = q.golden_runs(after=(0, 0), limit=10)
    assert [(r.version, r.started, dict(r.body)) for _, r in runs] == [("canary", 5.0, {"items": [1, 2]}),
                                                                       ("stable", 7.0, {})]
    assert q.golden_runs(after=runs[0][0], limit=10)[0][1].version == "stable"
    assert [s.id for s in q.samples_by_id([b, a, 12345])] == [b, a]


@pytest.mark.skipif(not postgres.available(), reason="Debian package postgresql missing")
def test_the_feed_waits_for_an_older_open_transaction(postgres_server: Postgres) -> None:
    """Transaction A writes a score and stays open; B writes one and commits. A reader that took B's row
    now and moved its cursor past it would never see A's. So the feed shows neither until A commits, then
    both, in commit-id order."""
    import psycopg

    url = postgres_server.database()
    store = PostgresStore(url)
    try:
        a, b = store.add([rec("stable", 0), rec("stable", 1)])
        with psycopg.connect(url) as open_tx:
            open_tx.execute("INSERT INTO scores (sample_id, scorer, passed, score, reason, meta, ts) "
                            "VALUES (%s, 'rule:empty', true, NULL, 'a', '{}', 0)", (a,))
            store.attach_score(b, scorer="rule:empty", passed=True, score=None, reason="b", meta={})
            assert store.score_events(after=(0, 0), limit=10) == []
            open_tx.commit()
        events = store.score_events(after=(0, 0), limit=10)
        assert [e.sample_id for e in events] == [a, b]
        assert store.score_events(after=events[-1].cursor, limit=10) == []
    finally:
        store.close()


@pytest.mark.skipif(not postgres.available(), reason="Debian package postgresql missing")
def test_migrates_a_first_schema_database_and_feeds_its_old_scores(postgres_server: Postgres) -> None:
    import psycopg

    url = postgres_server.database()
    with psycopg.connect(url) as conn:
        conn.execute(PG_MIGRATIONS[0])
        conn.execute("CREATE TABLE observer_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO observer_schema VALUES (1)")
        sid = conn.execute("INSERT INTO samples (version, ts, source, prompt, output, content_hash) VALUES "
                           "('stable', 1.0, 'ingest', 'p', 'o', 'h') RETURNING id").fetchone()[0]
        conn.execute("INSERT INTO scores (sample_id, scorer, passed, score, reason, meta, ts) "
                     "VALUES (%s, 'rules', true, NULL, 'all passed', '{}', 1.0)", (sid,))
    store = PostgresStore(url)
    try:
        assert store.schema_version == len(PG_MIGRATIONS)
        assert [(e.sample_id, e.scorer) for e in store.score_events(after=(0, 0), limit=10)] == [(sid, "rules")]
        store.enqueue(_jobs(1), max_queued=10)
        assert store.job_counts() == {("judge", "queued"): 1}
    finally:
        store.close()


def test_an_idempotency_key_stores_a_batch_once(clocked: tuple[ManagedStore, Clock]) -> None:
    store, clock = clocked
    first = store.add([rec("stable", 0), rec("stable", 1)], idempotency_key="batch-1")
    again = store.add([rec("stable", 0), rec("stable", 1)], idempotency_key="batch-1")
    other = store.add([rec("stable", 0)], idempotency_key="batch-2")
    assert again == first and other[0] not in first
    assert store.count() == 3
    clock.now += 2 * 3600  # keys are kept an hour: after that the same key stores anew
    store.prune(max_age_seconds=10**9, max_rows_per_version=10**6)
    assert store.add([rec("stable", 0)], idempotency_key="batch-1") != first[:1]


@pytest.mark.skipif(not postgres.available(), reason="Debian package postgresql missing")
def test_a_connection_lost_mid_transaction_is_retried_and_stores_once(postgres_server: Postgres) -> None:
    """A trigger kills the inserting session's own backend once, in the middle of the add's transaction
    (what a database failover or a network cut does): the add retries on a new connection under its key
    and the batch is stored exactly once."""
    import psycopg

    url = postgres_server.database()
    store = PostgresStore(url)
    try:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("CREATE SEQUENCE fault_once")  # not transactional: survives the killed transaction
            admin.execute("""
                CREATE FUNCTION cut_once() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF nextval('fault_once') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;
                  RETURN NEW;
                END $$""")
            admin.execute("CREATE TRIGGER cut AFTER INSERT ON samples FOR EACH ROW EXECUTE FUNCTION cut_once()")
        ids = store.add([rec("stable", i) for i in range(5)], idempotency_key="k")
        assert len(ids) == 5 and store.count() == 5
        with psycopg.connect(url, autocommit=True) as admin:
            assert admin.execute("SELECT last_value FROM fault_once").fetchone()[0] > 1  # it fired, then the retry
            admin.execute("SELECT setval('fault_once', 1, false)")  # arm it again
        with pytest.raises(StoreError):  # without a key the add is not retried: it could duplicate
            store.add([rec("stable", 9)])
        assert store.count() == 5
    finally:
        store.close()
