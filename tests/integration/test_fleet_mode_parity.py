"""Fleet mode judges with the same facts: the own source and the Prometheus source read the same recorded
window of the same simulated fleet (the observer scraping it, a real Prometheus scraping the observer), and
give the same ArmData fields — replicas, prefix-cache hit ratio, GPU and engine environment, paired counts, the
router's TTFT and its saturated pool."""

from __future__ import annotations

import shutil

import pytest

from observer_dev.parity import fields_missing
from tests.support.fleet_window import both_sources

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian package prometheus missing")]


def test_the_prometheus_source_gives_every_fact_the_own_source_gives() -> None:
    for version, (a, b) in both_sources().items():
        assert fields_missing(a, b) == [], (version, a, b)
        assert b.replicas == a.replicas == 1
        assert b.environment == a.environment and {"gpu_model", "gpu_driver", "engine_args"} <= set(a.environment)
        assert b.paired == a.paired
        assert b.prefix_cache_hit_ratio == pytest.approx(a.prefix_cache_hit_ratio, abs=0.1)
        assert b.total_requests == pytest.approx(a.total_requests, rel=0.35)
        assert "saturated" in a.router_trouble and b.router_trouble  # the router's pool, in both modes
        assert a.spec_decode and b.spec_decode and set(a.spec_decode) == set(b.spec_decode) == {"accepted", "rejected"}
        assert sum(b.spec_decode.values()) == pytest.approx(sum(a.spec_decode.values()), rel=0.35)
        assert a.corrupted and b.corrupted and b.corrupted == pytest.approx(a.corrupted, rel=0.35)
        assert sum(s.corrupted or 0 for s in b.slices) == pytest.approx(sum(s.corrupted or 0 for s in a.slices),
                                                                        rel=0.35)
        assert b.histograms["router_ttft"].count == pytest.approx(a.histograms["router_ttft"].count, rel=0.35)
