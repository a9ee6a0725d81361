"""Requests with NaNs in their logits as an optional canary metric: vLLM's corrupted_requests counter (counted with
VLLM_COMPUTE_NANS_IN_LOGITS=1) over finished requests, judged on slices like errors. A broken quantisation or
kernel answers garbage that finishes like any other request: no error count sees it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from observer.analyse.canary.judge import Outcome
from observer.collect.vllm import parse_vllm
from observer.conventions import vllm
from observer_dev.sim.engine import SimEngine
from observer_dev.sim.profile import build_profile
from observer_dev.sim.vllm_exposition import VllmCollector
from tests.support.canary_streams import judged_step
from tests.support.corrupted_streams import CORRUPTED_SPEC, corrupted_arm, corrupted_outcome


def _exposition(rate: float | None) -> str:
    engine = SimEngine(model="m", profile=build_profile({"load_rps": 20, "corrupted_rate": rate}), seed=1)
    engine.tick(120.0)
    registry = CollectorRegistry()
    registry.register(VllmCollector(engine.snapshot))
    return generate_latest(registry).decode()


def test_the_parser_reads_corrupted_requests_only_where_vllm_checks() -> None:
    text = _exposition(0.05)
    assert "vllm:corrupted_requests_total{" in text
    m = parse_vllm(text).models["m"]
    corrupted = m.labelled_counters[vllm.CORRUPTION]["corrupted"]
    finished = sum(m.labelled_counters[vllm.REQUEST_SUCCESS].values())
    assert corrupted == m.counters[vllm.CORRUPTED_REQUESTS] and 0.03 < corrupted / finished < 0.07
    assert vllm.CORRUPTION not in parse_vllm(_exposition(None)).models["m"].labelled_counters  # not checking


def test_a_canary_answering_nans_fails_and_a_clean_one_does_not() -> None:
    """Over seeded trials: a canary with 2% of its requests corrupted where stable has none fails nearly always; a
    clean one, or one as (rarely) corrupted as stable, almost never fails (the critical metric's α is 0.01)."""
    trials = 60
    broken = [corrupted_outcome(seed, 0.02) for seed in range(trials)]
    clean = [corrupted_outcome(seed, 0.0) for seed in range(trials)]
    rare = [corrupted_outcome(seed, 0.002, 0.002) for seed in range(trials)]
    assert sum(o is Outcome.FAIL for o in broken) >= 0.95 * trials, broken
    assert sum(o is Outcome.FAIL for o in clean) == 0, clean
    assert sum(o is Outcome.FAIL for o in rare) <= 2, rare
    assert sum(o is Outcome.PASS for o in clean) >= 0.8 * trials, clean


def test_an_arm_that_does_not_check_is_nodata_not_a_pass() -> None:
    v = judged_step(CORRUPTED_SPEC, 1, lambda c, b, rng: (c, corrupted_arm(b, 0.0, rng)))
    result = v.metric("nan_logits")
    assert result.outcome is Outcome.NODATA and "VLLM_COMPUTE_NANS_IN_LOGITS" in result.detail
    assert v.verdict is not Outcome.PASS
