"""Two `observer serve` replicas on one real PostgreSQL: both ingest into the shared store, exactly one runs
the singleton jobs (an advisory lock), and when it is killed with SIGKILL the other takes over within two
job intervals."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from observer_dev import pgserver as postgres
from observer_dev.pgserver import Postgres
from tests.support.prom import free_port, metric, wait_http
from tests.support.serve_areas import spawn

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not postgres.available(), reason="Debian package postgresql missing")]

INTERVAL = 1.0


def test_one_leader_runs_the_singleton_jobs_and_the_other_takes_over_after_sigkill(
        tmp_path: Path, postgres_server: Postgres) -> None:
    url = postgres_server.database()
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for i in range(2):
            port = free_port()
            config = tmp_path / f"r{i}.yaml"
            config.write_text(f"fleet: {{versions: [{{name: stable}}]}}\n"
                              f"server: {{host: 127.0.0.1, port: {port}, auth_token: tok}}\n"
                              f"sampling: {{store: {{url: '{url}', prune_interval_seconds: {INTERVAL}}}}}\n")
            procs.append(spawn(config, ["sample"]))
            urls.append(f"http://127.0.0.1:{port}")
        for u in urls:
            wait_http(u + "/readyz", timeout=60)
        # both ingest into the one store
        for i, u in enumerate(urls):
            r = httpx.post(u + "/api/v1/samples", headers={"Authorization": "Bearer tok"}, timeout=10,
                           json={"samples": [{"version": "stable", "prompt": f"from {i}", "output": "o",
                                              "ts": time.time()}]})
            assert r.status_code == 200, r.text
        rows = httpx.get(urls[1] + "/api/v1/samples", params={"version": "stable"},
                         headers={"Authorization": "Bearer tok"}).json()["samples"]
        assert sorted(r["prompt"] for r in rows) == ["from 0", "from 1"]

        time.sleep(4 * INTERVAL)
        leaders = [metric(u, "observer_leader") for u in urls]
        assert sorted(leaders) == [0.0, 1.0], leaders
        lead = leaders.index(1.0)
        other = 1 - lead
        ran = [metric(u, "observer_job_runs_total", job="sample-store-prune", outcome="ok") for u in urls]
        skipped = [metric(u, "observer_job_runs_total", job="sample-store-prune", outcome="skipped_not_leader")
                   for u in urls]
        assert ran[lead] >= 2 and ran[other] == 0, (ran, skipped)
        assert skipped[other] >= 2 and skipped[lead] == 0, (ran, skipped)

        procs[lead].send_signal(signal.SIGKILL)
        procs[lead].wait(10)
        killed = time.monotonic()
        while metric(urls[other], "observer_leader") != 1.0:
            assert time.monotonic() - killed < 10, "the surviving replica did not take over"
            time.sleep(0.05)
        failover = time.monotonic() - killed
        print(f"failover {failover:.2f}s at a {INTERVAL}s job interval")
        assert failover <= 2 * INTERVAL + 0.5, failover  # one job interval, plus scheduling slack
        before = metric(urls[other], "observer_job_runs_total", job="sample-store-prune", outcome="ok")
        time.sleep(3 * INTERVAL)
        assert metric(urls[other], "observer_job_runs_total", job="sample-store-prune", outcome="ok") > before
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
