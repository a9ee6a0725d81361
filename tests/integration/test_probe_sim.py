"""The synthetic probe against the simulator: a streamed one-token request per version through the configured
route; its codes and first-token times are series, a dead route is 502, a shedding one 503, and the client
availability SLO can read the probe instead of the proxy."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from observer.config import parse_config
from observer_dev.promserver import free_port
from tests.support.observer_proc import run_observer
from tests.support.sim import config_yaml, fleet_dict, running_fleet

pytestmark = pytest.mark.integration


def _probe_counts(text: str) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
    codes: dict[tuple[str, str], float] = {}
    ttft: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "observer_probe_requests_total":
                codes[(s.labels["version"], s.labels["code"])] = s.value
            elif s.name == "observer_probe_ttft_seconds_count":
                ttft[s.labels["version"]] = s.value
    return codes, ttft


def test_the_probe_measures_each_versions_route_and_names_what_fails() -> None:
    data, _ = fleet_dict(interval_seconds=1.0)
    # stable's route answers; canary's goes nowhere (a gateway route that was deleted)
    data["probe"] = {"enabled": True, "interval_seconds": 1.0, "timeout_seconds": 1.0,
                     "headers": {"x-route-to": "{role}"}}
    sim_cfg = parse_config(config_yaml(data), source="test config", environ={})
    data["fleet"]["versions"][1]["openai"] = f"http://127.0.0.1:{free_port()}/v1"
    data["slo"] = {"client_availability": [{"name": "probe-availability", "source": "probe", "objective": 0.99}]}
    cfg = parse_config(config_yaml(data), source="test config", environ={})
    with running_fleet(sim_cfg) as (fleet, _), run_observer(cfg, areas=["scrape"]) as obs:
        obs.wait_ready()
        codes: dict[tuple[str, str], float] = {}
        ttft: dict[str, float] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            codes, ttft = _probe_counts(obs.get("/metrics").text)
            if codes.get(("stable", "200"), 0) >= 2 and codes.get(("canary", "502"), 0) >= 2:
                break
            time.sleep(0.3)
        assert codes.get(("stable", "200"), 0) >= 2 and codes.get(("canary", "502"), 0) >= 2, codes
        assert ttft.get("stable", 0) >= 2 and "canary" not in ttft, ttft  # a first token only where one came
        assert codes.get(("canary", "200")) == 0.0 and codes.get(("stable", "503")) == 0.0  # watched codes at 0
        fleet.set_profile("stable", shed_rate=1.0)
        seen = codes[("stable", "503")]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and codes.get(("stable", "503"), 0) < seen + 2:
            time.sleep(0.3)
            codes, _ = _probe_counts(obs.get("/metrics").text)
        assert codes[("stable", "503")] >= seen + 2, codes
