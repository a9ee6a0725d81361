"""Shared work across replicas (issue #15): two `observer serve` replicas (sample + quality areas) on one real
PostgreSQL share live judge calls as durable jobs; the leader is killed with SIGKILL mid-work. Every job
ends done exactly once, none is lost, every sample carries its verdict, and the survivor's exported judge
totals count each verdict once, including those the dead replica committed.

The judge is the scripted one on loopback (tests/support/judge_server.py, not an LLM), slowed so the kill
lands while jobs are in flight."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from observer_dev import pgserver as postgres
from observer_dev.pgserver import Postgres
from tests.support.judge_server import Reply, run_judge_server
from tests.support.prom import metric
from tests.support.shared_work import ingest, job_states, judged_output, live_samples, run_replicas

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not postgres.available(), reason="Debian package postgresql missing")]

N = 80


def test_judge_jobs_survive_a_sigkilled_replica_done_once_each(tmp_path: Path, postgres_server: Postgres) -> None:
    url = postgres_server.database()
    with run_judge_server() as judge, run_replicas(tmp_path, 2, url=url, judge_url=judge.url) as replicas:
        judge.script(*[Reply(delay_s=0.3) for _ in range(10 * N)])
        ingest(replicas[0], live_samples(N))
        deadline = time.monotonic() + 30
        while job_states(url).get("done", 0) < N // 4:
            assert time.monotonic() < deadline, f"judge jobs do not progress: {job_states(url)}"
            time.sleep(0.1)
        leaders = [metric(r.url, "observer_leader") for r in replicas]
        assert sorted(leaders) == [0.0, 1.0], leaders
        lead = leaders.index(1.0)
        survivor = replicas[1 - lead].url
        ran = [metric(r.url, "observer_work_attempts_total", kind="judge", outcome="done") for r in replicas]
        assert all(n > 0 for n in ran), f"both replicas should have judged: {ran}"
        held = _held_by(url, replicas[lead].proc.pid)
        while not held:  # kill it while it holds jobs (a judge call takes 0.3 s)
            assert time.monotonic() < deadline, f"the leader never held a job: {job_states(url)}"
            time.sleep(0.01)
            held = _held_by(url, replicas[lead].proc.pid)
        replicas[lead].proc.send_signal(signal.SIGKILL)
        replicas[lead].proc.wait(10)
        in_flight = len(_held_by(url, replicas[lead].proc.pid))
        assert in_flight >= 1

        deadline = time.monotonic() + 60
        while job_states(url).get("done", 0) < N:
            assert time.monotonic() < deadline, f"jobs left undone after the kill: {job_states(url)}"
            time.sleep(0.2)
        with psycopg.connect(url) as conn:
            twice = conn.execute("SELECT COUNT(*) FROM jobs WHERE done_count > 1").fetchone()[0]
            verdicts = conn.execute("SELECT COUNT(*) FROM scores WHERE scorer = 'judge:helpfulness'").fetchone()[0]
            undone = conn.execute("SELECT COUNT(*) FROM jobs WHERE state <> 'done'").fetchone()[0]
        assert (twice, undone, verdicts) == (0, 0, N)
        with psycopg.connect(url) as conn:  # the dead replica's jobs were taken over after their lease
            retaken = conn.execute("SELECT COUNT(*) FROM jobs WHERE attempts = 2 AND id = ANY(%s)",
                                   (held,)).fetchone()[0]
        assert retaken >= 1

        # the survivor counts each verdict once: its own, and those the dead replica committed
        deadline = time.monotonic() + 10
        while True:
            total = sum(metric(survivor, "observer_live_checks_total", version=v, check="judge")
                        for v in ("stable", "canary"))
            if total == N or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert total == N
        failures = sum(metric(survivor, "observer_live_check_failures_total", version=v, check="judge")
                       for v in ("stable", "canary"))
        assert failures == N // 4  # the scripted judge fails the refusals, and only them
        # a judge call is at least once: only the jobs the dead replica held were asked again
        calls = Counter(judged_output(b) for b in judge.requests)
        repeated = sum(n - 1 for n in calls.values() if n > 1)
        print(f"in flight at the kill: {in_flight}, judge calls repeated: {repeated}")
        assert repeated <= in_flight


def _held_by(url: str, pid: int) -> list[int]:
    """Ids of the jobs the replica with this pid holds now (worker ids are host-pid-random)."""
    with psycopg.connect(url) as conn:
        return [int(r[0]) for r in conn.execute("SELECT id FROM jobs WHERE state = 'running' AND worker LIKE %s",
                                                (f"%-{pid}-%",))]
