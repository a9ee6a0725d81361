"""Durability: ingest under load into an observer subprocess, SIGKILL it, reopen the store — every
acknowledged sample is there, unchanged, under the id it was acknowledged with. On SQLite and on a real
PostgreSQL."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from observer.store.base import ManagedStore
from observer.store.postgres import PostgresStore
from observer.store.sqlite import SqliteStore
from observer_dev import pgserver as postgres
from tests.support.prom import free_port, wait_http
from tests.support.serve_areas import spawn

pytestmark = pytest.mark.integration

@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.skipif(
    not postgres.available(), reason="Debian package postgresql missing"))])
def test_every_acknowledged_sample_survives_kill_9(tmp_path: Path, backend: str,
                                                   request: pytest.FixtureRequest) -> None:
    port = free_port()
    db = tmp_path / "samples.db"
    url = request.getfixturevalue("postgres_server").database() if backend == "postgres" else None
    store_line = f'url: "{url}"' if url else f'path: "{db}"'
    config = tmp_path / "observer.yaml"
    config.write_text(f"""
fleet:
  versions: [{{name: stable}}, {{name: canary}}]
server: {{host: 127.0.0.1, port: {port}, auth_token: t0k}}
sampling: {{store: {{{store_line}}}}}
""")
    proc = spawn(config, ["sample"], stderr=subprocess.PIPE)
    acked: dict[int, tuple[str, str]] = {}
    lock = threading.Lock()
    stop = threading.Event()
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=30)

        def writer(k: int) -> None:
            n = 0
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": "Bearer t0k"},
                              timeout=10) as client:
                while not stop.is_set():
                    batch = [{"version": "stable" if (n + i) % 3 else "canary", "prompt": f"w{k} n{n + i}",
                              "output": f"answer {k}-{n + i} " + "x" * 200, "ts": 1e9 + n + i}
                             for i in range(25)]
                    try:
                        resp = client.post("/api/v1/samples", json={"samples": batch})
                    except httpx.HTTPError:
                        return  # the server died mid-request: that batch was never acknowledged
                    if resp.status_code == 200:
                        with lock:
                            for item, sid in zip(batch, resp.json()["ids"], strict=True):
                                acked[sid] = (item["version"], item["prompt"])
                    n += 25

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(acked) < 2000 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)  # mid-load: writers are still posting
        proc.wait(10)
        stop.set()
        for t in threads:
            t.join(15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()
    assert len(acked) >= 2000, "load did not reach 2,000 acknowledged samples before the deadline"
    store: ManagedStore
    if url is None:
        assert Path(f"{db}-wal").exists()  # the process never checkpointed: recovery goes through the WAL
        store = SqliteStore(db)
    else:
        store = PostgresStore(url)
    try:
        rows = {s.id: (s.version, s.prompt) for v in ("stable", "canary") for s in store.samples(v)}
        missing = {sid for sid in acked if sid not in rows}
        assert not missing, f"{len(missing)} acknowledged sample(s) lost"
        assert all(rows[sid] == acked[sid] for sid in acked)
        assert len(rows) >= len(acked)  # batches committed but not acknowledged may exist too
    finally:
        store.close()
