"""Issue #21 items 9–10: a target must not control our cardinality, our memory or the other targets' cycle.

Real observer (in-process, loopback), scripted targets: one exposing 300,000 distinct `model_name` values,
one exposing 1,000,000 series (≈ 5–11 s to parse before the per-target limit existed), and two healthy
vLLM targets (stable, canary). The healthy ones must be scraped every cycle on time, the hostile ones fail
with reason `sample_limit`, `/metrics` stays small, and the process' RSS stays bounded.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from observer.config.spec import ObserverConfig
from tests.support.observer_proc import Route, run_observer, scaled_exposition, target_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VLLM_033 = (FIXTURES / "vllm" / "generated_vllm-0.33.0_single-engine.prom").read_text()


def _rss_mb() -> float:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _many_models(n: int) -> bytes:
    lines = ["# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{engine="0",model_name="m{i}"}} 1' for i in range(n)]
    return ("\n".join(lines) + "\n").encode()


def _many_series(n: int) -> bytes:
    lines = [f'a{{b="{i}"}} 1' for i in range(n)]  # 17 MB: under the body cap, ~5-11 s to parse in full
    return ("\n".join(lines) + "\n").encode()


def test_hostile_targets_neither_flood_metrics_nor_delay_the_others() -> None:
    models, series = _many_models(300_000), _many_series(1_000_000)
    k = {"stable": 0, "canary": 0}

    def growing(version: str) -> bytes:
        k[version] += 1
        return scaled_exposition(VLLM_033, k[version]).encode()

    with target_server() as server:
        urls = {
            "stable": server.set("/stable", Route(body=lambda: growing("stable"))),
            "canary": server.set("/canary", Route(body=lambda: growing("canary"))),
            "models": server.set("/models", Route(body=models)),
            "series": server.set("/series", Route(body=series)),
        }
        cfg = ObserverConfig.model_validate({
            "fleet": {"versions": [{"name": "stable", "vllm": [urls["stable"], urls["models"]]},
                                   {"name": "canary", "vllm": [urls["canary"], urls["series"]]}]},
            "scrape": {"interval_seconds": 3.0, "timeout_seconds": 3.0, "max_body_bytes": 64 * 1024 * 1024},
            "sampling": {"enabled": False}, "quality": {"enabled": False}, "drift": {"enabled": False},
            "canary": {"enabled": False},
        })
        rss0 = _rss_mb()
        with run_observer(cfg, areas=["scrape"]) as proc:
            proc.wait_ready(timeout=30)
            k0 = dict(k)
            t0 = time.monotonic()
            time.sleep(15.0)
            elapsed = time.monotonic() - t0
            metrics = proc.get("/metrics").text
            targets = {t["url"]: t for t in proc.get("/api/v1/targets").json()["targets"]}
            rss = _rss_mb()
    cycles = elapsed / 3.0
    for version in ("stable", "canary"):
        scraped = k[version] - k0[version]
        assert scraped >= cycles - 2, f"{version} scraped {scraped} times in {elapsed:.0f}s ({cycles:.0f} cycles)"
        assert targets[urls[version]]["up"] is True
    for hostile in ("models", "series"):
        assert targets[urls[hostile]]["last_reason"] == "sample_limit", targets[urls[hostile]]
    assert 'model="m1234"' not in metrics and "m299999" not in metrics
    assert len(metrics.splitlines()) < 5_000, len(metrics.splitlines())
    assert rss - rss0 < 600, f"RSS grew {rss - rss0:.0f} MB"
