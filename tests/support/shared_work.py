"""Replicas of `observer serve` (sample + quality areas) sharing one PostgreSQL store and a scripted judge:
what the shared-work test and `bench/scale.py` run. Every process started here is stopped on exit."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tests.support.prom import free_port, wait_http
from tests.support.serve_areas import spawn

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "tok"


@dataclass
class Replica:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path


def job_states(url: str) -> dict[str, int]:
    """Jobs per state, read from the database itself."""
    with psycopg.connect(url) as conn:
        return {str(s): int(n) for s, n in conn.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state")}


def judged_output(body: dict[str, Any]) -> str:
    """The OUTPUT block of one request to the judge (which sample it judged)."""
    user = next(str(m["content"]) for m in body["messages"] if m["role"] == "user")
    m = re.search(r"<<<BEGIN_OUTPUT [^>]*>>>\n?(.*?)<<<END_OUTPUT", user, re.DOTALL)
    return m.group(1) if m else ""


def live_samples(n: int) -> list[dict[str, Any]]:
    """`n` distinct samples over two versions; every 4th is a refusal the scripted judge fails."""
    return [{"version": ("stable", "canary")[i % 2], "prompt": f"question {i}",
             "output": f"I'm sorry, I can't help with request {i}." if i % 4 == 0 else f"answer number {i}",
             "ts": time.time(), "finish_reason": "stop"} for i in range(n)]


def ingest(replica: Replica, samples: list[dict[str, Any]]) -> None:
    r = httpx.post(replica.url + "/api/v1/samples", headers={"Authorization": f"Bearer {TOKEN}"},
                   json={"samples": samples}, timeout=60)
    r.raise_for_status()


@contextmanager
def run_replicas(tmp: Path, n: int, *, url: str, judge_url: str, lease_seconds: float = 2.0,
                 judge_concurrency: int = 3, poll_seconds: float = 0.2) -> Iterator[list[Replica]]:
    """`n` replicas, each live-judging every sample (judge_fraction 1) through the shared work queue."""
    replicas: list[Replica] = []
    try:
        for i in range(n):
            port = free_port()
            config = tmp / f"replica{i}.json"
            config.write_text(json.dumps({
                "fleet": {"versions": [{"name": "stable"}, {"name": "canary"}]},
                "server": {"host": "127.0.0.1", "port": port, "auth_token": TOKEN},
                "sampling": {"store": {"url": url, "prune_interval_seconds": 1.0,
                                       "work": {"poll_seconds": poll_seconds, "lease_seconds": lease_seconds,
                                                "sync_seconds": 0.5, "retry_seconds": 0.5}}},
                "quality": {"golden_dirs": [str(ROOT / "golden_sets")],
                            "judge": {"url": judge_url, "model": "scripted-judge", "max_retries": 0,
                                      "concurrency": judge_concurrency, "budget_per_hour": 1_000_000,
                                      "prompt_path": str(ROOT / "evals" / "judge_prompt.yaml"),
                                      "rubric_dir": str(ROOT / "evals" / "rubrics")},
                            "live": {"interval_seconds": 0.5, "judge_fraction": 1.0, "batch_size": 5000}},
            }))
            log = tmp / f"replica{i}.log"
            with log.open("wb") as f:
                proc = spawn(config, ["sample", "quality"], stderr=f.fileno())
            replicas.append(Replica(proc, f"http://127.0.0.1:{port}", log))
        for r in replicas:
            wait_http(r.url + "/readyz", timeout=60)
        yield replicas
    finally:
        for r in replicas:
            if r.proc.poll() is None:
                r.proc.terminate()
                try:
                    r.proc.wait(15)
                except subprocess.TimeoutExpired:
                    r.proc.kill()
                    r.proc.wait(10)
