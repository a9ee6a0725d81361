"""Cost and energy per version on the simulator (#17): the observer scrapes the simulated fleet (vLLM and
DCGM with the per-token power model); the exported cost per million generated tokens and joules per
generated token equal an independent computation from the simulator's raw expositions read before and
after a burst of load, within 1e-9.

The simulator idles at 0 W and spends a fixed energy per token, so its DCGM total-energy counter moves only
with tokens: the counts read here before the load are the ones the observer's first cycles saw."""

from __future__ import annotations

import math
import re
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from observer.config import parse_config
from tests.support.observer_proc import run_observer
from tests.support.poll import wait_until
from tests.support.sim import config_yaml, fleet_dict, running_fleet

pytestmark = pytest.mark.integration
H100 = "NVIDIA H100 80GB HBM3"  # the simulator's DCGM modelName


def _raw(url: str, pattern: str) -> float:
    text = httpx.get(url, timeout=10).text
    return sum(float(m.group(1)) for m in re.finditer(pattern, text, re.M))


def test_cost_and_energy_per_token_equal_the_simulators_raw_series() -> None:
    data, ports = fleet_dict(("stable", "canary"))
    data["cost"] = {"gpu_hour_prices": {H100: 3.6}}
    cfg = parse_config(config_yaml(data), source="test", environ={})
    idle = {"load_rps": 0.0, "gpu_idle_watts": 0.0, "gpu_joules_per_token": 0.25}
    vllm_url = f"http://127.0.0.1:{ports.vllm['stable']}/metrics"
    dcgm_url = f"http://127.0.0.1:{ports.dcgm}/metrics"
    gen = r"^vllm:generation_tokens_total\{[^}]*\} (\S+)$"
    energy = r'^DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{[^}]*pod="sim-stable-0"[^}]*\} (\S+)$'
    with running_fleet(cfg, profiles={"stable": idle, "canary": idle}) as (fleet, _), \
            run_observer(cfg, areas=["scrape"]) as obs:
        obs.wait_ready(timeout=30)
        time.sleep(2.5)  # idle: the observer's first cycles saw these counts
        gen0, e0 = _raw(vllm_url, gen), _raw(dcgm_url, energy)
        fleet.set_profile("stable", load_rps=20.0)
        fleet.advance("stable", 30.0)  # a burst of load: 30 simulated seconds at once
        fleet.set_profile("stable", load_rps=0.0)
        done = time.time()
        wait_until(lambda: obs.get("/api/v1/signals").json()["generated_at"] > done + 1.5, timeout=30,
                   message="an observer cycle after the load")
        gen1, e1 = _raw(vllm_url, gen), _raw(dcgm_url, energy)
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(obs.get("/metrics").text) for s in f.samples}
        assert _raw(vllm_url, gen) == gen1  # still idle: the observer's last cycle saw these too

    def one(name: str, **labels: str) -> float:
        hits = [v for (n, ls), v in samples.items() if n == name and all((k, x) in ls for k, x in labels.items())]
        assert len(hits) == 1, (name, labels, hits)
        return hits[0]

    assert gen1 > gen0 and e1 > e0
    cost = one("observer_cost_total", version="stable")
    gpu_s = one("observer_gpu_seconds_total", version="stable", gpu_model=H100)
    assert math.isclose(cost, gpu_s * 3.6 / 3600, rel_tol=1e-9)  # one GPU, held idle or busy
    assert math.isclose(one("observer_cost_per_million_tokens", version="stable", kind="generation"),
                        cost / (gen1 - gen0) * 1e6, rel_tol=1e-9)
    joules = (e1 - e0) / 1000
    assert math.isclose(one("observer_energy_joules_total", version="stable"), joules, rel_tol=1e-9)
    assert math.isclose(one("observer_energy_joules_per_token", version="stable", kind="generation"),
                        joules / (gen1 - gen0), rel_tol=1e-9)
