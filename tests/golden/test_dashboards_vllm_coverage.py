"""Every signal vLLM's own example dashboard shows is on ours, split by version, and the docs table says so.

The example is vllm-project/vllm examples/observability/prometheus_grafana/grafana.json (a copy in
tests/fixtures/dashboards/). Its queries read `vllm:*` series directly, with no version label; ours read the
observer's per-version accumulations of the same vLLM families.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from observer import conventions as names
from observer.config import load_config
from observer.render.dashboards import render
from observer.render.dashboards.lint import panels, queries

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "fixtures" / "dashboards" / "vllm-example-grafana.json"
DOC = ROOT / "docs" / "dashboards.md"

# vLLM family in the example → (our dashboard, our panel title, the observer series that carries it).
COVERAGE: dict[str, tuple[str, str, str]] = {
    "vllm:time_to_first_token_seconds": ("fleet", "Time to first token", names.HIST_TTFT),
    "vllm:inter_token_latency_seconds": ("fleet", "Inter-token latency", names.HIST_ITL),
    "vllm:e2e_request_latency_seconds": ("fleet", "End-to-end latency", names.HIST_E2E),
    "vllm:request_queue_time_seconds": ("fleet", "Queue time", names.HIST_QUEUE),
    "vllm:prompt_tokens_total": ("fleet", "Tokens per second (in / out)", names.PROMPT_TOKENS),
    "vllm:generation_tokens_total": ("fleet", "Tokens per second (in / out)", names.GENERATION_TOKENS),
    "vllm:num_requests_running": ("fleet", "Running requests", names.RUNNING_REQUESTS),
    "vllm:num_requests_waiting": ("fleet", "Queue depth per replica", names.QUEUE_DEPTH_PER_REPLICA),
    "vllm:kv_cache_usage_perc": ("fleet", "KV-cache usage", names.KV_CACHE_USAGE),
    "vllm:request_success_total": ("fleet", "Finish reasons", names.REQUESTS),
    "vllm:request_prompt_tokens": ("fleet", "Prompt length", names.HIST_PROMPT_LENGTH),
    "vllm:request_generation_tokens": ("fleet", "Generation length", names.HIST_GENERATION_LENGTH),
    "vllm:request_prefill_time_seconds": ("fleet", "Prefill and decode time", names.HIST_PREFILL),
    "vllm:request_decode_time_seconds": ("fleet", "Prefill and decode time", names.HIST_DECODE),
    "vllm:request_max_num_generation_tokens": ("fleet", "Requested max tokens", names.HIST_MAX_GENERATION_TOKENS),
}


def _example_families() -> set[str]:
    d = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    found = set()
    for q in queries(d):
        for m in re.findall(r"(vllm:[a-z0-9_]+)", q.expr):
            found.add(re.sub(r"_(bucket|sum|count)$", "", m))
    return found


@pytest.fixture(scope="module")
def ours() -> dict[str, dict[str, Any]]:
    return {Path(p).stem: json.loads(t) for p, t in render(load_config(ROOT / "deploy/observer.yaml")).items()
            if p.endswith(".json")}


def test_mapping_lists_exactly_the_signals_of_the_example() -> None:
    assert _example_families() == set(COVERAGE)


@pytest.mark.parametrize("family", sorted(COVERAGE))
def test_signal_is_on_our_dashboard_split_by_version(ours: dict[str, dict[str, Any]], family: str) -> None:
    slug, title, series = COVERAGE[family]
    panel = next((p for p in panels(ours[slug]) if p.get("title") == title), None)
    assert panel is not None, f"{family}: no panel {title!r} on {slug}"
    exprs = [(t["expr"], t.get("legendFormat", "")) for t in panel["targets"]]
    pattern = re.compile(rf"\b{re.escape(series)}(_bucket|_sum|_count|_total)?(:rate\w+)?\{{")  # raw or recorded
    using = [(e, legend) for e, legend in exprs if pattern.search(e)]
    assert using, f"{family}: panel {title!r} does not query {series}"
    assert all("{{version}}" in legend and "by (version" in e for e, legend in using)


def test_docs_table_has_a_row_per_signal() -> None:
    doc = DOC.read_text(encoding="utf-8")
    for family, (_, title, series) in COVERAGE.items():
        row = next((line for line in doc.splitlines() if line.startswith("|") and f"`{family}`" in line), None)
        assert row is not None, f"docs/dashboards.md has no coverage row for {family}"
        assert title in row and f"`{series}`" in row
