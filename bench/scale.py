"""Fleet-scale benchmark (issue #15) — the ingest part: samples/s into the central observer's ingest API
from concurrent sidecar clients, PostgreSQL against SQLite in the same run.

An `observer serve` subprocess (sample area only, the default redaction on) per backend; PostgreSQL is a
real server from Debian's package started here on a free loopback port (tests/support/postgres.py).
`--clients` asyncio clients each post batches of `--batch` samples (the sidecar's RemoteSink batch) as
fast as acknowledgements come back, for `--seconds`; only acknowledged samples count, and afterwards the
store must hold at least as many rows as were acknowledged. RSS of the observer process at the end.

Not built yet (null in the JSON): the fleet-sized Prometheus and judge timing (`pods`,
`judge_seconds_p95`) and shared jobs across replicas (`jobs_lost`, `jobs_done_twice`, `failover_seconds`).

Usage: python bench/scale.py [--clients 20] [--batch 25] [--seconds 10]
Last line: JSON with ingest_samples_per_s_postgres, ingest_samples_per_s_sqlite, observer_rss_mb.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VERSIONS = [f"v{i}" for i in range(8)]


async def _load(url: str, *, clients: int, batch: int, seconds: float) -> tuple[int, float]:
    import httpx

    acked = 0
    deadline = time.monotonic() + seconds

    async def client(k: int) -> None:
        nonlocal acked
        n = 0
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer bench"}, timeout=30) as c:
            while time.monotonic() < deadline:
                items = [{"version": VERSIONS[(k + i) % len(VERSIONS)], "prompt": f"client {k} request {n + i}: "
                          "what is the capital of France, and why?", "output": "Paris. " * 40,
                          "ts": 1.7e9 + n + i, "model": "llm", "finish_reason": "stop", "prompt_tokens": 14,
                          "output_tokens": 80, "latency_s": 0.8, "ttft_s": 0.05} for i in range(batch)]
                r = await c.post("/api/v1/samples", json={"samples": items})
                if r.status_code == 200:
                    acked += len(r.json()["ids"])
                n += batch

    started = time.monotonic()
    await asyncio.gather(*(client(k) for k in range(clients)))
    return acked, time.monotonic() - started


def run_backend(store_yaml: str, count: Callable[[], int], *, clients: int, batch: int,
                seconds: float) -> dict[str, Any]:
    """Load one backend; `count()` reads the store's rows afterwards (it must hold every acknowledged one)."""
    import psutil

    from tests.support.prom import free_port, wait_http
    from tests.support.serve_areas import spawn

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "observer.yaml"
        versions = ", ".join(f"{{name: {v}}}" for v in VERSIONS)
        config.write_text(f"fleet: {{versions: [{versions}]}}\n"
                          f"server: {{host: 127.0.0.1, port: {port}, auth_token: bench}}\n"
                          f"sampling: {{max_batch_samples: {max(batch, 100)}, store: {store_yaml}}}\n")
        proc = spawn(config, ["sample"], stderr=subprocess.PIPE)
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
            acked, elapsed = asyncio.run(_load(f"http://127.0.0.1:{port}", clients=clients, batch=batch,
                                               seconds=seconds))
            rss = psutil.Process(proc.pid).memory_info().rss / 2**20
        finally:
            proc.terminate()
            proc.wait(30)
            if proc.stderr is not None:
                proc.stderr.close()
    rows = count()
    if rows < acked:
        raise SystemExit(f"{rows} rows stored but {acked} samples acknowledged: samples lost")
    return {"samples_per_s": acked / elapsed, "acked": acked, "rss_mb": rss}


def _counter(open_store: Callable[[], Any]) -> Callable[[], int]:
    def count() -> int:
        store = open_store()
        try:
            return int(store.count())
        finally:
            store.close()
    return count


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    from observer.store.postgres import PostgresStore
    from observer.store.sqlite import SqliteStore
    from tests.support.postgres import run_postgres

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "samples.db"
        sqlite = run_backend(f"{{path: '{db}'}}", _counter(lambda: SqliteStore(db)), clients=args.clients,
                             batch=args.batch, seconds=args.seconds)
    with run_postgres() as pg:
        url = pg.database()
        postgres = run_backend(f"{{url: '{url}'}}", _counter(lambda: PostgresStore(url)), clients=args.clients,
                               batch=args.batch, seconds=args.seconds)
    for name, r in (("sqlite", sqlite), ("postgres", postgres)):
        print(f"{name:9s} {r['samples_per_s']:8.0f} samples/s acknowledged ({r['acked']} in {args.seconds:g}s, "
              f"{args.clients} clients x batches of {args.batch}), observer RSS {r['rss_mb']:.0f} MB")
    ratio = postgres["samples_per_s"] / sqlite["samples_per_s"]
    print(f"postgres / sqlite: {ratio:.2f}x")
    print(json.dumps({
        "clients": args.clients, "batch": args.batch,
        "ingest_samples_per_s_postgres": round(postgres["samples_per_s"], 1),
        "ingest_samples_per_s_sqlite": round(sqlite["samples_per_s"], 1),
        "postgres_vs_sqlite": round(ratio, 3),
        "observer_rss_mb": round(max(postgres["rss_mb"], sqlite["rss_mb"]), 1),
        "pods": None, "judge_seconds_p95": None, "jobs_lost": None, "jobs_done_twice": None,
        "failover_seconds": None}))


if __name__ == "__main__":
    main()
