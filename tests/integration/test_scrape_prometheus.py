"""End to end: a real Prometheus scrapes the observer, which scrapes vLLM-format targets; PromQL gives
per-version TTFT p95 from the observer's accumulated histograms.

Two fleets: the project's simulator (stable + a slower canary, with a pod restart mid-test), and
fixture-derived bodies whose counters grow by whole copies of vLLM's own exposition — there the
Prometheus answer must equal the fixture oracle exactly, because quantiles of an increase made of
whole copies are the fixture's own quantiles.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import pytest

from observer.config.spec import ObserverConfig
from tests.support.observer_proc import Route, run_observer, scaled_exposition, target_server
from tests.support.prom import Prometheus, run_prometheus
from tests.support.sim import running_fleet, sim_config

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian package prometheus missing")]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
P95 = "histogram_quantile(0.95, sum by (version, le) (rate(observer_ttft_seconds_bucket[{w}])))"


def oracle_p95(name: str) -> float:
    per = json.loads((FIXTURES / f"{name}.expected.json").read_text())["histograms"]
    entry = per["vllm:time_to_first_token_seconds"]
    return float(next(v for k, v in entry.items() if k.endswith("engine=*"))["p95"])


def per_version(prom: Prometheus, promql: str, *, timeout: float = 40.0) -> dict[str, float]:
    """Poll until both versions have a finite value; return version → value."""
    deadline = time.monotonic() + timeout
    got: dict[str, float] = {}
    while time.monotonic() < deadline:
        got = {r["metric"]["version"]: float(r["value"][1]) for r in prom.query(promql)}
        if {"stable", "canary"} <= set(got) and all(math.isfinite(v) for v in got.values()):
            return got
        time.sleep(0.25)
    raise AssertionError(f"{promql} gave {got} after {timeout}s")


class Growing:
    def __init__(self, text: str) -> None:
        self.text, self.k = text, 0

    def __call__(self) -> bytes:
        self.k += 1
        return scaled_exposition(self.text, self.k).encode()


def test_prometheus_p95_equals_the_fixture_oracle() -> None:
    stable, canary = "generated_vllm-0.33.0_single-engine", "generated_vllm-0.11.0_single-engine"
    with target_server() as server:
        cfg = ObserverConfig.model_validate({
            "fleet": {"versions": [
                {"name": "stable", "vllm": [server.set("/s", Route(body=Growing((FIXTURES / f"{stable}.prom")
                                                                                 .read_text())))]},
                {"name": "canary", "vllm": [server.set("/c", Route(body=Growing((FIXTURES / f"{canary}.prom")
                                                                                 .read_text())))]}]},
            "scrape": {"interval_seconds": 0.5, "timeout_seconds": 0.5, "window_seconds": 30}})
        with run_observer(cfg, areas=["scrape"]) as proc, \
                run_prometheus([proc.url.removeprefix("http://")], scrape_interval="1s") as prom:
            proc.wait_ready()
            got = per_version(prom, P95.format(w="10s"))
    assert got["stable"] == pytest.approx(oracle_p95(stable), rel=1e-9)
    assert got["canary"] == pytest.approx(oracle_p95(canary), rel=1e-9)


def test_prometheus_scrapes_observer_scraping_the_simulated_fleet() -> None:
    cfg = sim_config(interval_seconds=1.0, window_seconds=30.0)
    profiles = {"stable": {"load_rps": 25.0}, "canary": {"preset": "slow", "load_rps": 25.0}}
    with running_fleet(cfg, profiles=profiles, seed=7) as (fleet, config), \
            run_observer(config, areas=["scrape"]) as proc, \
            run_prometheus([proc.url.removeprefix("http://")], scrape_interval="1s") as prom:
        proc.wait_ready()
        first = per_version(prom, P95.format(w="20s"))
        cycles = float(prom.query("observer_scrape_cycles_total")[0]["value"][1])
        fleet.restart("canary")  # a pod restart: vLLM's counters drop to zero
        # until Prometheus holds three observer cycles after the restart
        prom.wait_for(f"observer_scrape_cycles_total >= {cycles + 3}", timeout=20)
        after = per_version(prom, P95.format(w="20s"))
        resets = prom.query('max by (version) (resets(observer_requests_total[1m]))')
        up = prom.query("observer_target_up")
        gpu = prom.query("observer_gpu_framebuffer_used_ratio")
        signals = proc.get("/api/v1/signals").json()["versions"]
    for got in (first, after):
        assert 0 < got["stable"] < got["canary"] < 10, got  # canary is 1.5x slower (`slow` preset)
    assert resets and all(float(r["value"][1]) == 0 for r in resets), resets  # monotonic across the restart
    assert {r["metric"]["version"] for r in up} == {"stable", "canary"} and all(r["value"][1] == "1" for r in up)
    assert {r["metric"]["version"] for r in gpu} == {"stable", "canary"}
    assert signals["canary"]["ttft"]["p95"] > signals["stable"]["ttft"]["p95"]
