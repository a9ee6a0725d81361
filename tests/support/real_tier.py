"""What the real tier's tests and bench/real_vllm.py share: the observer's config for the real pair, a TTFT p95
read both by the observer and by PromQL over the raw series, a reply with its per-request fields normalised, and
verdict looks paced one round per slice."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from observer.config.spec import ObserverConfig
from observer_dev.gameday.real import drive
from tests.support.observer_proc import ObserverProcess, run_observer
from tests.support.poll import wait_until
from tests.support.prom import run_prometheus
from tests.support.real_engines import TOKEN, Engines


def real_config(engines: Engines, tmp: Path, *, proxy_port: int | None = None,
            cost: dict[str, Any] | None = None) -> ObserverConfig:
    versions = []
    for name, server in (("stable", engines.stable), ("canary", engines.canary)):
        versions.append({"name": name, "role": name, "vllm": [server.url + "/metrics"],
                         "openai": server.url + "/v1", "expected_traffic_weight": 0.5})
    data: dict[str, Any] = {
        "fleet": {"versions": versions},
        "scrape": {"interval_seconds": 1.0, "timeout_seconds": 1.0, "window_seconds": 600},
        "server": {"auth_token": TOKEN},
        "sampling": {"enabled": proxy_port is not None, "fraction": 1.0, "store": {"path": str(tmp / "s.db")},
                     "reservoir": {"window_seconds": 0.2}},
        "quality": {"enabled": False}, "drift": {"enabled": False},
        "canary": {"window_seconds": 3600, "interval_seconds": 1.0, "slice_seconds": engines.pace.round_seconds},
    }
    if proxy_port is not None:
        data["sampling"]["versions"] = {"stable": {"listen": f"127.0.0.1:{proxy_port}"}}
    if cost is not None:
        data["cost"] = cost
    return ObserverConfig.model_validate(data)


def prom_p95(prom: Any, port: int, at0: float) -> float:
    sel = f'{{__name__=~"vllm[:_]time_to_first_token_seconds_bucket",instance="127.0.0.1:{port}"}}'
    q = f"histogram_quantile(0.95, sum by (le) ({sel} - {sel} @ {at0:.3f}))"
    res = prom.query(q)
    assert res, q
    return float(res[0]["value"][1])


def ttft_p95_pairs(engines: Engines, tmp: Path, *, requests: int = 24) -> tuple[dict[str, float], dict[str, float]]:
    """(observer, PromQL) TTFT p95 per version for a burst of load: the observer's window signal, and
    `histogram_quantile` over the raw `vllm:` buckets' increase since just before the load in a real
    Prometheus scraping the servers directly. Both read the same idle counts before and after."""
    targets = [u.removeprefix("http://") for u in (engines.stable.url, engines.canary.url)]
    with run_observer(real_config(engines, tmp), areas=["scrape"]) as obs, \
            run_prometheus(targets, scrape_interval="1s") as prom:
        obs.wait_ready(timeout=30)
        prom.wait_for('up{job!=""} == 1', min_series=2, timeout=30)
        time.sleep(2.5)  # idle: both have scraped the pre-load counts at least once
        at0 = time.time()
        drive({"stable": engines.stable.url, "canary": engines.canary.url}, requests=requests, concurrency=6)
        done = time.time()
        # Both scrape after the load ended (idle again, so their counts agree bucket by bucket).
        prom.wait_for(f"timestamp(up) > {done + 1.5:.3f}", min_series=2, timeout=30)
        wait_until(lambda: obs.get("/api/v1/signals").json()["generated_at"] > done + 1.5, timeout=30,
                   message="an observer cycle after the load")
        signals = obs.get("/api/v1/signals").json()["versions"]
        got = {name: signals[name]["ttft"]["p95"] for name in ("stable", "canary")}
        want = {name: prom_p95(prom, server.port, at0)
                for name, server in (("stable", engines.stable), ("canary", engines.canary))}
    return got, want


def normalised(body: bytes) -> bytes:
    # A reply's id and creation time differ per request; everything else is the engine's, byte for byte.
    body = re.sub(rb'"id":\s*"[^"]*"', b'"id":"X"', body)
    return re.sub(rb'"created":\s*\d+', b'"created":0', body)


def verdict_of(obs: ObserverProcess) -> dict[str, Any]:
    r = obs.get("/api/v1/canary/verdict", params={"canary": "canary", "baseline": "stable", "weight": "any"})
    assert r.status_code == 200
    out: dict[str, Any] = r.json()
    return out


def looks(obs: ObserverProcess, engines: Engines, *, rounds: int, until: str | None = None) -> list[dict[str, Any]]:
    """Bursts to both arms at the tier's pace, a verdict after each (weight=any); stop early at verdict `until`."""
    out: list[dict[str, Any]] = []
    pace = engines.pace
    for _ in range(rounds):
        started = time.monotonic()
        drive({"stable": engines.stable.url, "canary": engines.canary.url}, requests=pace.requests,
              concurrency=pace.concurrency, timeout=pace.request_timeout_s)
        pace.sleep_out(started)  # one round per slice
        out.append(verdict_of(obs))
        if until is not None and out[-1]["verdict"] == until:
            break
    return out
