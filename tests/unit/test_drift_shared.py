"""Drift checks as shared work: the leader enqueues, any replica's worker embeds and tests, every replica reads
the stored outcomes back and holds the same gated state (streaks included), a restarted replica rebuilds it,
and a check that cannot run is an `error` everywhere, counted where it ran. SQLite here (one process, two
components on one store); tests/integration/test_drift_shared_pg.py runs the same on PostgreSQL."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from observer.analyse.drift import stored
from observer.analyse.drift.pinning import known_version, pin_baseline
from observer.analyse.drift.state import DriftReport, DriftResult
from observer.analyse.embed import EmbeddingError, HashingEmbedder
from observer.config.discovery import DiscoverySpec, KubernetesDiscovery
from observer.config.fleet import VersionSpec
from observer.errors import BaselineError, ConfigError
from observer.fleetview import LiveFleet
from observer.store.jobs import DriftReportRecord, JobSpec
from observer.store.sqlite import SqliteStore
from tests.support.drift_replicas import (
    NOW,
    Clock,
    config,
    drifted_windows,
    one_round,
    records,
    replica,
    seed_baseline,
    states,
)


@pytest.fixture()
def rig(tmp_path: Path) -> Iterator[tuple[Any, SqliteStore, Clock, HashingEmbedder]]:
    cfg = config(tmp_path)
    store = SqliteStore(tmp_path / "samples.db")
    yield cfg, store, Clock(), HashingEmbedder(dim=128, max_cache_entries=5000)
    store.close()


async def test_checks_run_once_anywhere_and_every_replica_holds_the_same_gated_state(rig: Any) -> None:
    cfg, store, clock, emb = rig
    corpus, rng = seed_baseline(cfg, store, emb)
    a, b = replica(cfg, store, clock, lambda: emb), replica(cfg, store, clock, lambda: emb)
    await drifted_windows(a, b, store, clock, corpus, rng)  # a leads, only b works
    sa, sb = states(a, b)
    assert sa == sb
    assert sa["canary"][1]["prompts"] == (True, 2)  # two shifted windows in a row: flagged on both replicas
    assert not any(d for d, _ in sa["stable"][1].values())
    assert a.runner._checker is None  # the leader only offered: it never loaded an embedder
    assert store.job_counts() == {("drift", "done"): 4}

    restarted = replica(cfg, store, clock, lambda: emb)  # reads every stored outcome again, in commit order
    assert restarted.sync is not None
    await restarted.sync.run_once()
    assert states(restarted) == [sa]


async def test_a_slot_is_offered_once_and_a_new_version_at_the_next_look(rig: Any) -> None:
    cfg, store, clock, emb = rig
    a = replica(cfg, store, clock, lambda: emb)
    assert a.shared is not None
    await a.shared.enqueue()
    await a.shared.enqueue()  # same slot: nothing offered again
    assert store.job_counts() == {("drift", "queued"): 2}
    other = replica(cfg, store, clock, lambda: emb)  # a new leader mid-slot: its offers are duplicates
    assert other.shared is not None
    await other.shared.enqueue()
    assert store.job_counts() == {("drift", "queued"): 2}
    assert other.shared.metrics.enqueued[("drift", "duplicate")] == 2
    fleet = a.shared.fleet
    assert isinstance(fleet, LiveFleet)
    fleet.replace("discovery", [VersionSpec(name="v3", model="llama")])  # a new Rollout revision
    await a.shared.enqueue()
    assert store.job_counts() == {("drift", "queued"): 3}
    clock.now += 600  # the next slot: every version again
    await a.shared.enqueue()
    assert store.job_counts() == {("drift", "queued"): 6}


async def test_a_check_that_cannot_run_is_an_error_everywhere_counted_where_it_ran(rig: Any) -> None:
    cfg, store, clock, emb = rig
    corpus, rng = seed_baseline(cfg, store, emb)
    _, now_texts = corpus.draw("none", 300, rng)
    store.add(records("canary", now_texts, clock.now - 300))

    def broken() -> Any:
        raise EmbeddingError("the embedder at http://embedder:8000 refused the connection")

    a, b = replica(cfg, store, clock, lambda: emb), replica(cfg, store, clock, broken)
    await one_round(a, [b], [a, b])
    sa, sb = states(a, b)
    assert sa == sb and sa["canary"][0] == "error"
    report = a.state.report("canary")
    assert report is not None and "refused the connection" in report.message
    assert b.runner.errors[("canary", "embedder")] == 1 and not a.runner.errors


async def test_unreadable_stored_reports_are_skipped_and_counted(rig: Any) -> None:
    cfg, store, clock, emb = rig
    a = replica(cfg, store, clock, lambda: emb)
    store.enqueue([JobSpec(kind="drift", key="k")], max_queued=10)  # bad rows, written as a job's results
    claimed = store.claim(worker="w", kinds=["drift"], limit=1, lease_seconds=30)[0]
    assert store.complete(claimed, drift_reports=[
        DriftReportRecord(version="canary", checked_at=NOW, body={"format": 99, "report": {}}),
        DriftReportRecord(version="canary", checked_at=NOW, body={"format": stored.FORMAT, "report": {"x": 1}})])
    assert a.sync is not None
    assert await a.sync.run_once() == 2
    assert a.sync.undecodable == 2 and a.state.versions() == []


def test_stored_reports_keep_non_finite_statistics() -> None:
    nan = float("nan")
    report = DriftReport(version="canary", model="llama", checked_at=NOW, status="insufficient_data",
                         results={"prompts": DriftResult(field="prompts", statistic=nan, p_value=math.inf,
                                                         drift=False, n_current=3, n_baseline=600, method="mmd",
                                                         status="insufficient_data")})
    body = json.loads(json.dumps(stored.encode(report), allow_nan=False))  # what jsonb accepts
    back = stored.decode(body)
    assert isinstance(back, DriftReport)
    r = back.results["prompts"]
    assert math.isnan(r.statistic) and r.p_value == math.inf and r.n_baseline == 600
    with pytest.raises(ValueError, match="format"):
        stored.decode({"format": 0})


def test_a_discovered_version_may_be_pinned_and_checked_by_name(tmp_path: Path) -> None:
    """With Kubernetes discovery a revision's name (its pod-template hash) is in no list the CLI can read: any
    name is accepted and its stored samples decide; without discovery an unknown name is refused."""
    static = config(tmp_path)
    with pytest.raises(ConfigError, match="unknown version '7d9f8c6b5'"):
        known_version(static, "7d9f8c6b5")
    discovering = static.model_copy(update={"discovery": DiscoverySpec(kubernetes=KubernetesDiscovery())})
    known_version(discovering, "7d9f8c6b5")
    with pytest.raises(BaselineError, match="no stored samples for version '7d9f8c6b5'"):
        pin_baseline(discovering, "7d9f8c6b5", now=NOW, created_by="test")
