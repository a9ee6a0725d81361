"""A canary report over simulated fleet state, for the report tests and bench/report.py.

The arms' data come from the canary-stream simulator (tests/support/canary_streams.py: per-second Poisson
traffic, log-normal latencies, per-slice counts, as the game day's statistical tests use), enriched with what
the other areas would have given the judge: golden pass rates, paired outcomes, drift results, cost and the
environment facts. `hostile=True` makes the worst answers carry markup and script; `pods` spreads the fleet over
one (canary, stable) pair per 20 pods, the canary on a quarter of them (its traffic weight).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI

from observer.analyse.canary.results import ArmData, DriftObservation, PairCounts
from observer.analyse.canary.service import CanaryService
from observer.config import parse_config
from observer.config.canary import CanaryMetricSpec
from observer.config.spec import ObserverConfig
from observer.export.report import pages
from observer.export.report.model import Example
from tests.support.canary_streams import ArmProfile, simulate_step
from tests.support.prom import free_port, wait_http

TOKEN = "report-test-token"
NOW = 1800.0
PODS_PER_PAIR = 20
HOSTILE = '<script>alert("x")</script><a href="javascript:alert(1)">click</a><img src=x onerror=alert(2)>'


def config_text(pairs: int, *, grafana: bool = True) -> str:
    versions = []
    for i in range(pairs):
        g = f"m{i}"
        versions += [f"    - {{name: {g}-stable, role: stable, group: {g}, expected_traffic_weight: 0.75}}",
                     f"    - {{name: {g}-canary, role: canary, group: {g}, expected_traffic_weight: 0.25}}"]
    links = "    grafana_url: http://grafana.example:3000\n" if grafana else ""
    return ("fleet:\n  versions:\n" + "\n".join(versions) + "\n"
            "canary:\n  window_seconds: 1200\n  pairs:\n"
            + "".join(f"    - {{canary: m{i}-canary, baseline: m{i}-stable}}\n" for i in range(pairs)) +
            "  source: prometheus\n  prometheus_url: http://prometheus.example:9090\n"
            "  metrics:\n"
            "    - {name: errors, kind: ratio, critical: true, finished_reasons: [error]}\n"
            "    - {name: ttft, kind: latency, family: ttft, quantile: 0.9}\n"
            "    - {name: e2e, kind: latency, family: e2e, quantile: 0.9}\n"
            "    - {name: golden, kind: quality, group: quality}\n"
            "    - {name: pairwise, kind: paired, paired_check: judge, group: quality}\n"
            "    - {name: drift_prompts, kind: drift, field: prompts, advisory: true}\n"
            "    - {name: cost_per_token, kind: cost, advisory: true}\n"
            "  groups: {default: 1, quality: 1}\n"
            f"  report:\n{links}"
            "discovery:\n  kubernetes:\n    namespace: llm-serving\n    models:\n"
            + "".join(f"      - {{name: m{i}, selector: {{app: m{i}}}, rollout: m{i}-rollout}}\n"
                      for i in range(pairs)))


class SimulatedSource:
    """Every canary of the fleet fails on errors (5 % against 1 %) unless `healthy`; its latency, golden, paired,
    drift and cost data make every section of the page draw. `down` answers like an unreachable Prometheus."""

    name = "simulated"

    def __init__(self, *, healthy: bool = False, pods: int = PODS_PER_PAIR, down: bool = False) -> None:
        self.step = simulate_step(seed=11, seconds=1800, total_rps=20, weight=0.25,
                                  canary=None if healthy else ArmProfile(error_rate=0.05))
        self.pods = pods
        self.down = down

    async def arm(self, version: str, metrics: Sequence[CanaryMetricSpec], *, since: float, now: float,
                  with_drift: bool) -> ArmData:
        if self.down:
            return ArmData(note="Prometheus at http://prometheus.example:9090 unreachable: ConnectError")
        canary = version.endswith("-canary")
        data = (self.step.canary if canary else self.step.baseline).window(max(0, int(since)), int(now))
        env = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_driver": "550.54.15",
               "engine_args": "max_model_len=8192"}
        canary_pods = max(1, self.pods // 4)
        extra: dict[str, Any] = {
            "replicas": canary_pods if canary else self.pods - canary_pods, "environment": env,
            "prefix_cache_hit_ratio": 0.41 if canary else 0.44,
            "golden": {"": (182, 200) if canary else (188, 200), "factual": (90, 100) if canary else (95, 100)},
            "cost_per_million_tokens": 0.61 if canary else 0.55}
        if canary:
            extra |= {"paired": {"judge": PairCounts(wins=12, losses=31, ties=40, inconsistent=9, errors=2)},
                      "drift": {"prompts": DriftObservation(drift=False, status="ok", p_value=0.42, statistic=0.03,
                                                            n_current=400)},
                      "judge_identity": {"model": "judge-7b", "prompt_hash": "a1b2c3", "rubric_hash": "d4e5f6"}}
        return dataclasses.replace(data, **extra)


def worst(*, hostile: bool) -> Any:
    async def examples(canary: str, *, since: float, limit: int) -> list[Example]:
        text = HOSTILE if hostile else "the capital of France is Lyon"
        return [Example("lost pair", f"What is the capital of France? {text}", f"canary says: {text}",
                        "Paris.", "the pairwise judge preferred the baseline in both orders"),
                Example("live failure", "Return JSON", "{not json", "", "invalid_json: not JSON")][:limit]
    return examples


def build(pairs: int = 1, *, healthy: bool = False, hostile: bool = True, down: bool = False,
          judge: bool = True) -> tuple[FastAPI, CanaryService, ObserverConfig]:
    """The report app over `pairs` simulated pairs, every pair judged once (`judge=False`: none yet)."""
    config = parse_config(config_text(pairs), environ={})
    source = SimulatedSource(healthy=healthy, down=down)
    service = CanaryService(config, source, clock=lambda: NOW)
    if judge:  # in a thread of its own: callers may hold a running loop (Playwright's sync API does)
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, service.run_once()).result()
    app = FastAPI()
    app.include_router(pages.router(config, service, token=TOKEN, anonymous=False, examples=worst(hostile=hostile),
                                    group_of=lambda n: n.split("-")[0], kappa=lambda: 0.62, clock=lambda: NOW + 42))
    return app, service, config


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """`app` on a free loopback port in a thread (uvicorn), stopped on the way out."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/report", timeout=30)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        time.sleep(0)
