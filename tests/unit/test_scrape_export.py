"""The exporter: families and labels from conventions, values equal to the store's, no NaN ever."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from observer import conventions as names
from observer.analyse.signals import SignalStore
from observer.collect.model import ModelMetrics, VllmScrape
from observer.collect.scraper import ScrapeReason, ScrapeResult, Target, TargetHealth, TargetKind
from observer.collect.vllm import parse_vllm
from observer.config.fleet import VersionSpec
from observer.export.collector import ScrapeCollector
from observer.export.signals_api import json_response
from observer.jsonsafe import strict
from tests.support.observer_proc import scaled_exposition

FIXTURE = (Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "generated_vllm-0.33.0_single-engine.prom"
           ).read_text()
GOOD, BAD = "http://good/metrics", "http://bad/metrics"
TPOT_COUNT = float(next(line.split()[-1] for line in FIXTURE.splitlines()
                        if line.startswith("vllm:request_time_per_output_token_seconds_count")))


def build() -> tuple[SignalStore, TargetHealth, CollectorRegistry]:
    store = SignalStore([VersionSpec(name="stable", vllm=[GOOD]), VersionSpec(name="canary", vllm=[BAD])],
                        window_seconds=300.0, stale_after_seconds=30.0)
    health = TargetHealth(store.bindings())
    registry = CollectorRegistry()
    registry.register(ScrapeCollector(store, health))
    return store, health, registry


def cycle(store: SignalStore, health: TargetHealth, ts: float, payload: VllmScrape) -> None:
    good, bad = Target(TargetKind.VLLM, GOOD), Target(TargetKind.VLLM, BAD)
    results = {good: ScrapeResult(good, ts, 0.02, vllm=payload),
               bad: ScrapeResult(bad, ts, 1.0, ScrapeReason.TIMEOUT, f"{BAD}: no complete answer within 1s")}
    health.record(results)
    store.record(results, ts=ts)


def exposition(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    hits = [v for (n, ls), v in samples.items() if n == name and all((k, x) in ls for k, x in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_exported_values_equal_the_store() -> None:
    store, health, registry = build()
    cycle(store, health, 0.0, parse_vllm(scaled_exposition(FIXTURE, 1)))
    cycle(store, health, 15.0, parse_vllm(scaled_exposition(FIXTURE, 3)))
    s = store.latest("stable")
    assert s is not None and s.ttft is not None
    got = exposition(registry)
    vm = {"version": "stable", "model": "demo-model-v2"}
    assert value(got, names.WIN_TTFT, quantile="0.95", **vm) == s.ttft.p95
    assert value(got, names.WIN_TTFT + "_count", **vm) == 2 * 120  # summary _count: the running total
    assert value(got, names.HIST_TTFT + "_bucket", le="0.25", **vm) == 2 * 112
    assert value(got, names.HIST_TTFT + "_bucket", le="+Inf", **vm) == 2 * 120
    assert value(got, names.HIST_TPOT + "_count", **vm) == 2 * TPOT_COUNT  # per request, for the goodput SLI
    assert value(got, names.REQUESTS + "_total", finished_reason="abort", **vm) == 2 * 11
    assert value(got, names.REQUESTS + "_total", finished_reason="repetition", **vm) == 0
    assert value(got, names.WIN_REQUEST_RATE, **vm) == s.request_rate
    assert value(got, names.KV_CACHE_USAGE, stat="max", **vm) == s.kv_cache_max
    assert value(got, names.REPLICAS, **vm) == 1
    assert value(got, names.TARGET_UP, version="canary", target=BAD, kind="vllm") == 0
    assert value(got, names.SCRAPE_ERRORS + "_total", target=BAD, reason="timeout") == 2
    assert value(got, names.LAST_SUCCESS, target=GOOD) == 15.0
    assert value(got, names.SCRAPE_CYCLES + "_total") == 2
    assert value(got, names.BUILD_INFO) == 1
    # the canary never answered: no model, so none of its signal series, but 0 replicas and its self-metrics
    assert not [k for k in got if dict(k[1]).get("version") == "canary" and k[0].startswith("observer_window")]
    assert value(got, names.REPLICAS, version="canary") == 0


def test_non_finite_inputs_never_reach_the_exposition() -> None:
    store, health, registry = build()
    m = ModelMetrics(model="m", gauges={"kv_cache_usage_perc": math.nan, "num_requests_waiting": math.inf},
                     gauges_max={"kv_cache_usage_perc": math.nan}, counters={"prompt_tokens": math.nan})
    cycle(store, health, 0.0, VllmScrape(models={"m": m}))
    cycle(store, health, 15.0, VllmScrape(models={"m": m}))
    text = generate_latest(registry).decode()
    assert "NaN" not in text and "Inf" not in text.replace('le="+Inf"', "")
    body = json_response({"signals": store.latest("stable")}).body
    assert b"NaN" not in bytes(body) and b"Infinity" not in bytes(body)


@pytest.mark.parametrize(("given", "want"), [
    (math.nan, None), (math.inf, None), (1.5, 1.5), ({"a": [math.nan, 2.0]}, {"a": [None, 2.0]}),
    (ScrapeReason.TIMEOUT, "timeout"), ((1, "x"), [1, "x"]),
], ids=["nan", "inf", "float", "nested", "enum", "tuple"])
def test_strict_json(given: object, want: object) -> None:
    assert strict(given) == want
    json.dumps(strict(given), allow_nan=False)


def test_docs_examples_are_valid() -> None:
    """docs/scraping.md: the YAML example validates, and the PromQL example is the integration test's query."""
    import re

    from observer.config.load import parse_config

    doc = (Path(__file__).resolve().parents[2] / "docs" / "scraping.md").read_text()
    yaml_block = re.search(r"```yaml\n(.*?)```", doc, re.S)
    promql = re.search(r"```promql\n(.*?)```", doc, re.S)
    assert yaml_block and promql
    cfg = parse_config(yaml_block.group(1), source="docs/scraping.md", environ={})
    assert cfg.scrape.window_seconds == 300 and cfg.fleet.versions[0].pods[0].pod == "sim-stable-0"
    from tests.integration.test_scrape_prometheus import P95

    assert promql.group(1).strip() == P95.format(w="5m")
    probe = re.findall(r"```yaml\n(.*?)```", doc, re.S)[-1]
    cfg = parse_config(probe, source="docs/scraping.md", environ={})
    assert cfg.probe.enabled and cfg.probe.headers == {"x-canary": "{role}"}
    assert [c.source for c in cfg.slo.client_availability] == ["probe"]
