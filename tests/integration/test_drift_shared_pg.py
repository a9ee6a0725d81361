"""Drift checks as shared work on a real PostgreSQL (Debian package): two replicas with their own connection
pools, the leader only offers, the other embeds; both read the stored outcomes back and hold the same gated
state. A worker whose lease ran out (its replica stalled) has its late result refused, so each check is
stored once, and a restarted replica rebuilds the streaks from the store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from observer.analyse.embed import HashingEmbedder
from observer.store.postgres import PostgresStore
from observer_dev import pgserver
from observer_dev.pgserver import Postgres
from tests.support.drift_replicas import (
    NOW,
    Clock,
    config,
    drifted_windows,
    replica,
    seed_baseline,
    states,
)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not pgserver.available(), reason="Debian package postgresql missing")]


@pytest.fixture()
def stores(postgres_server: Postgres) -> Iterator[tuple[str, PostgresStore, PostgresStore]]:
    url = postgres_server.database()
    one, two = PostgresStore(url), PostgresStore(url)
    try:
        yield url, one, two
    finally:
        one.close()
        two.close()


async def test_two_replicas_share_the_checks_and_hold_the_same_state(
        tmp_path: Path, stores: tuple[str, PostgresStore, PostgresStore]) -> None:
    url, store_a, store_b = stores
    cfg = config(tmp_path, url)
    clock, emb = Clock(), HashingEmbedder(dim=128, max_cache_entries=5000)
    corpus, rng = seed_baseline(cfg, store_a, emb)
    a, b = replica(cfg, store_a, clock, lambda: emb), replica(cfg, store_b, clock, lambda: emb)
    await drifted_windows(a, b, store_a, clock, corpus, rng)  # a leads, only b works
    sa, sb = states(a, b)
    assert sa == sb and sa["canary"][1]["prompts"] == (True, 2)
    assert a.runner._checker is None  # the leader never embedded

    # A stalled replica: its claim's lease runs out, the other redoes the check; the late result is refused.
    clock.now = NOW + 1200
    assert a.shared is not None and b.worker is not None and a.worker is not None
    await a.shared.enqueue()
    stalled = store_a.claim(worker="stalled", kinds=["drift"], limit=2, lease_seconds=0.0)
    assert len(stalled) == 2
    while await b.worker.run_once():
        pass
    assert not store_a.complete(stalled[0], drift_reports=[])
    with psycopg.connect(url) as conn:
        per_job = conn.execute("SELECT COUNT(*), MAX(done_count) FROM jobs WHERE kind = 'drift'").fetchone()
        reports = conn.execute("SELECT COUNT(*) FROM drift_reports").fetchone()[0]
    assert per_job == (6, 1)  # three rounds of two versions, each done once
    assert reports == 6

    restarted = replica(cfg, PostgresStore(url), clock, lambda: emb)
    try:
        assert restarted.sync is not None and a.sync is not None
        await restarted.sync.run_once()
        await a.sync.run_once()
        assert states(restarted) == states(a)
    finally:
        restarted.runner.store.close()  # type: ignore[union-attr]
