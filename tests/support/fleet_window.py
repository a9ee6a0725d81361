"""One recorded window of a simulated fleet read through both canary sources: the observer scraping the fleet
(the own source) and a real Prometheus scraping the observer (the Prometheus source), with one shared-store
reader of paired outcomes behind both. Used by tests/integration/test_fleet_mode_parity.py and bench/topology.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import httpx

from observer.analyse.canary.results import ArmData
from observer.analyse.canary.sources import OwnSource, PrometheusSource
from observer.config.canary import CanaryMetricSpec, MetricKind
from observer.service import start_in_thread
from tests.support.prom import run_prometheus
from tests.support.sim import running_fleet, sim_config


class StoredPairs:
    """The shared store's paired outcomes, as both sources read them (one reader, two sources)."""

    def paired_outcomes(self, canary: str, *, since: float) -> tuple[list[Mapping[str, str]], str,
                                                                      dict[str, str]]:
        rows: list[Mapping[str, str]] = [{"judge": "win"}, {"judge": "loss"}, {"judge": "tie"}]
        return rows, "", {"judge_model": "j"}


def both_sources(seconds: float = 12.0) -> dict[str, tuple[ArmData, ArmData]]:
    """version → (own source's ArmData, Prometheus source's) for the same window of `seconds`, with the
    default metrics plus a paired one."""
    cfg = sim_config(interval_seconds=1.0, window_seconds=30.0, with_router=True)
    metrics = [*cfg.canary.metrics, CanaryMetricSpec(name="paired_judge", kind=MetricKind.PAIRED,
                                                      paired_check="judge"),
               CanaryMetricSpec(name="router_ttft", kind=MetricKind.LATENCY, family="router_ttft"),
               CanaryMetricSpec(name="spec_acceptance", kind=MetricKind.RATIO, spec_decode=True),
               CanaryMetricSpec(name="nan_logits", kind=MetricKind.RATIO, corrupted=True)]
    out: dict[str, tuple[ArmData, ArmData]] = {}
    # The router in front of both reports its pool saturated, both speculate and both count NaN logits: both
    # sources must see it all.
    # Half the requests corrupted: the canary's 10% share of the load still gives a dozen in the window, so the
    # two sources' counts (exact deltas against Prometheus's extrapolated increase) compare within 35%; at 0.2 a
    # count of 4 against 2.2 failed on a busy machine.
    profiles = {"canary": {"router_saturation": 1.5, "spec_decode_acceptance": 0.7, "corrupted_rate": 0.5},
                "stable": {"spec_decode_acceptance": 0.7, "corrupted_rate": 0.5}}
    with running_fleet(cfg, seed=3, total_rps=20.0, profiles=profiles) as (_, config):
        obs = start_in_thread(config, areas=["scrape", "canary"])
        try:
            with run_prometheus([obs.url.removeprefix("http://")], scrape_interval="1s") as prom:
                prom.wait_for("observer_version_environment_info", min_series=2)
                prom.wait_for("observer_window_prefix_cache_hit_ratio", min_series=2)
                since = time.time()
                time.sleep(seconds)
                now = time.time() - 1.0  # the last scrape Prometheus surely has
                own = OwnSource(signals=obs.service.services.signals, slice_seconds=2.0, pairs=StoredPairs())

                async def arms(version: str) -> tuple[ArmData, ArmData]:
                    async with httpx.AsyncClient() as http:
                        fleet = PrometheusSource(url=prom.url, http=http, slice_seconds=2.0, pairs=StoredPairs())
                        return (await own.arm(version, metrics, since=since, now=now, with_drift=True),
                                await fleet.arm(version, metrics, since=since, now=now, with_drift=True))

                for version in ("canary", "stable"):
                    out[version] = asyncio.run(arms(version))
        finally:
            obs.stop()
    return out
