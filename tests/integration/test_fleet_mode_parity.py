"""Fleet mode judges with the same facts: the own source and the Prometheus source read the same recorded
window of the same simulated fleet (the observer scraping it, a real Prometheus scraping the observer), and
give the same ArmData fields — replicas, prefix-cache hit ratio, GPU and engine environment, paired counts."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Mapping

import httpx
import pytest

from observer.analyse.canary.sources import OwnSource, PrometheusSource
from observer.config.canary import CanaryMetricSpec, MetricKind
from observer.service import start_in_thread
from observer_dev.parity import fields_missing
from tests.support.prom import run_prometheus
from tests.support.sim import running_fleet, sim_config

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian package prometheus missing")]


class StoredPairs:
    """The shared store's paired outcomes, as both sources read them (one reader, two sources)."""

    def paired_outcomes(self, canary: str, *, since: float) -> tuple[list[Mapping[str, str]], str,
                                                                      dict[str, str]]:
        rows: list[Mapping[str, str]] = [{"judge": "win"}, {"judge": "loss"}, {"judge": "tie"}]
        return rows, "", {"judge_model": "j"}


def test_the_prometheus_source_gives_every_fact_the_own_source_gives() -> None:
    cfg = sim_config(interval_seconds=1.0, window_seconds=30.0)
    metrics = [*cfg.canary.metrics, CanaryMetricSpec(name="paired_judge", kind=MetricKind.PAIRED,
                                                      paired_check="judge")]
    with running_fleet(cfg, seed=3, total_rps=20.0) as (_, config):
        obs = start_in_thread(config, areas=["scrape", "canary"])
        try:
            with run_prometheus([obs.url.removeprefix("http://")], scrape_interval="1s") as prom:
                prom.wait_for("observer_version_environment_info", min_series=2)
                prom.wait_for("observer_window_prefix_cache_hit_ratio", min_series=2)
                since = time.time()
                time.sleep(12.0)
                now = time.time() - 1.0  # the last scrape Prometheus surely has
                signals = obs.service.services.signals
                own = OwnSource(signals=signals, slice_seconds=2.0, pairs=StoredPairs())

                async def fleet_arm(version: str) -> object:
                    async with httpx.AsyncClient() as http:
                        src = PrometheusSource(url=prom.url, http=http, slice_seconds=2.0, pairs=StoredPairs())
                        return await src.arm(version, metrics, since=since, now=now, with_drift=True)

                for version in ("canary", "stable"):
                    a = asyncio.run(own.arm(version, metrics, since=since, now=now, with_drift=True))
                    b = asyncio.run(fleet_arm(version))
                    assert fields_missing(a, b) == [], (version, a, b)  # type: ignore[arg-type]
                    assert b.replicas == a.replicas == 1  # type: ignore[attr-defined]
                    assert b.environment == a.environment and {"gpu_model", "gpu_driver", "engine_args"} <= set(
                        a.environment)  # type: ignore[attr-defined]
                    assert b.paired == a.paired  # type: ignore[attr-defined]
                    assert b.prefix_cache_hit_ratio == pytest.approx(  # type: ignore[attr-defined]
                        a.prefix_cache_hit_ratio, abs=0.1)
                    assert b.total_requests == pytest.approx(a.total_requests, rel=0.35)  # type: ignore[attr-defined]
        finally:
            obs.stop()
