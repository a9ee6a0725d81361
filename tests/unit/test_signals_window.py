"""Window maths: running totals with counter resets (Prometheus rate() semantics), bounded history,
and per-version signals computed from the vLLM fixtures scaled over time."""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

import pytest

from observer.analyse import histogram as hmath
from observer.analyse.signals import SignalStore
from observer.analyse.window import History, TargetTotals, Totals, increase
from observer.collect.dcgm import parse_dcgm
from observer.collect.model import DcgmScrape, GpuMetrics, VllmScrape
from observer.collect.scraper import ScrapeReason, ScrapeResult, Target, TargetKind
from observer.collect.vllm import parse_vllm
from observer.config.fleet import PodRef, VersionSpec
from tests.support.observer_proc import scaled_exposition

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
V033 = "generated_vllm-0.33.0_single-engine"
V011 = "generated_vllm-0.11.0_single-engine"


@cache
def fixture(name: str) -> str:
    return (FIXTURES / "vllm" / f"{name}.prom").read_text()


@cache
def oracle(name: str) -> dict[str, dict[str, float]]:
    data = json.loads((FIXTURES / "vllm" / f"{name}.expected.json").read_text())
    out = {}
    for fam, per in data["histograms"].items():
        key = next(k for k in per if k.endswith("engine=*"))
        out[fam.removeprefix("vllm:")] = per[key]
    return out


@cache
def scrape(name: str, k: float) -> VllmScrape:
    return parse_vllm(scaled_exposition(fixture(name), k))


def vllm_result(url: str, ts: float, payload: VllmScrape | None) -> ScrapeResult:
    target = Target(TargetKind.VLLM, url)
    if payload is None:
        return ScrapeResult(target, ts, 0.01, ScrapeReason.REFUSED, f"{url}: connection refused")
    return ScrapeResult(target, ts, 0.01, vllm=payload)


def store_for(*versions: VersionSpec, window: float = 300.0) -> SignalStore:
    return SignalStore(list(versions), window_seconds=window, stale_after_seconds=60.0)


def feed(store: SignalStore, ts: float, **payloads: VllmScrape | None) -> None:
    results = {}
    for url, p in payloads.items():
        r = vllm_result(f"http://{url}/metrics", ts, p)
        results[r.target] = r
    store.record(results, ts=ts)


def rel(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_increase_counts_a_reset_from_zero() -> None:
    assert increase(15.0, 10.0) == 5.0
    assert increase(3.0, 10.0) == 3.0  # pod restarted; 3 since the restart
    assert increase(10.0, 10.0) == 0.0


def test_target_totals_baseline_increase_and_reset() -> None:
    tt = TargetTotals()
    tt.observe(scrape(V033, 1))  # baseline: nothing counted
    m = tt.models["demo-model-v2"]
    assert m.counters["prompt_tokens"] == 0.0 and m.histograms["time_to_first_token_seconds"].count == 0.0
    tt.observe(scrape(V033, 4))
    tt.observe(scrape(V033, 1))  # reset: counts 1x from zero
    tt.observe(scrape(V033, 2))
    base = scrape(V033, 1).models["demo-model-v2"]
    assert rel(m.counters["prompt_tokens"], 5 * base.counters["prompt_tokens"])
    assert rel(m.labelled["request_success"]["stop"], 5 * base.labelled_counters["request_success"]["stop"])
    h, b = m.histograms["time_to_first_token_seconds"], base.histograms["time_to_first_token_seconds"]
    assert h.cumulative == tuple(5 * c for c in b.cumulative) and rel(h.sum, 5 * b.sum)
    assert tt.resets == 1


def test_target_totals_ignore_nan_and_count_new_label_values() -> None:
    text = ('# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{engine="0",model_name="m"} 10\n'
            '# TYPE vllm:request_success_total counter\n'
            'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 4\n')
    tt = TargetTotals()
    tt.observe(parse_vllm(text))
    tt.observe(parse_vllm(text.replace(" 10\n", " NaN\n") + 'vllm:request_success_total{engine="0",'
                                                                'finished_reason="abort",model_name="m"} 2\n'))
    tt.observe(parse_vllm(text.replace(" 10\n", " 17\n")))
    m = tt.models["m"]
    assert m.counters["prompt_tokens"] == 0.0  # the NaN sample made the next one a new baseline
    assert m.labelled["request_success"] == {"stop": 0.0, "abort": 2.0}


def test_model_cap_bounds_memory() -> None:
    tt = TargetTotals(max_models=2)
    text = "# TYPE vllm:prompt_tokens_total counter\n" + "".join(
        f'vllm:prompt_tokens_total{{model_name="m{i}"}} 1\n' for i in range(5))
    tt.observe(parse_vllm(text))
    assert len(tt.models) == 2 and tt.models_dropped == 3


def test_history_is_bounded_and_thinned() -> None:
    h: History[int] = History(fine_seconds=60, retention_seconds=600, coarse_step_seconds=60)
    for i in range(100_000):
        h.append(float(i), i)
    assert len(h) <= 60 + 1 + 600 // 60 + 2
    assert h.latest() == (99_999.0, 99_999)
    ts, _ = h.at(99_999 - 30.5) or (None, None)
    assert ts == 99_999 - 31
    old = h.at(99_999 - 300)
    assert old is not None and 99_999 - 360 <= old[0] <= 99_999 - 300
    assert h.at(0)[0] >= 99_999 - 600  # type: ignore[index]


def test_totals_pack_round_trip_shares_schema() -> None:
    m = scrape(V033, 3).models["demo-model-v2"]
    a = Totals.pack(m.histograms, m.counters, m.labelled_counters)
    b = Totals.pack(m.histograms, m.counters, m.labelled_counters, previous=a)
    assert b.schema is a.schema
    assert a.histogram("time_to_first_token_seconds") == m.histograms["time_to_first_token_seconds"]
    assert a.counter("prompt_tokens") == m.counters["prompt_tokens"]
    assert a.labelled("request_success") == m.labelled_counters["request_success"]
    assert a.histogram("nope") is None and a.counter("nope") is None and a.labelled("nope") is None


@pytest.mark.parametrize("name", [V033, V011], ids=["vllm-0.33", "vllm-0.11"])
def test_window_quantiles_match_the_oracle(name: str) -> None:
    """Counters grow by 2x the fixture within the window: quantiles of the increase equal the fixture's."""
    store = store_for(VersionSpec(name="stable", vllm=["http://a/metrics"]))
    feed(store, 1000.0, a=scrape(name, 1))
    feed(store, 1015.0, a=scrape(name, 3))
    s = store.latest("stable")
    assert s is not None
    want = oracle(name)
    for attr, fam in (("ttft", "time_to_first_token_seconds"), ("itl", "inter_token_latency_seconds"),
                      ("e2e", "e2e_request_latency_seconds"), ("queue", "request_queue_time_seconds")):
        q = getattr(s, attr)
        assert rel(q.p50, want[fam]["p50"]) and rel(q.p95, want[fam]["p95"]) and rel(q.p99, want[fam]["p99"]), attr
        assert rel(q.count, 2 * want[fam]["count"])
    base = scrape(name, 1).models[next(iter(scrape(name, 1).models))]
    finished = base.labelled_counters["request_success"]
    total = sum(finished.values())
    assert rel(s.requests, 2 * total) and rel(s.request_rate, 2 * total / 15.0)
    assert rel(s.prompt_token_rate, 2 * base.counters["prompt_tokens"] / 15.0)
    assert rel(s.generation_token_rate, 2 * base.counters["generation_tokens"] / 15.0)
    for reason, n in finished.items():
        if n:
            assert rel(s.finished_ratio[reason], n / total)
    assert rel(s.prefix_cache_hit_ratio, base.counters["prefix_cache_hits"] / base.counters["prefix_cache_queries"])
    assert rel(s.kv_cache_mean, base.gauges["kv_cache_usage_perc"])
    assert s.window_seconds == 15.0 and s.replicas_up == 1 and s.model == base.model


def test_counter_reset_mid_window_is_counted_like_prometheus() -> None:
    store = store_for(VersionSpec(name="stable", vllm=["http://a/metrics"]))
    for ts, k in ((0.0, 1), (15.0, 4), (30.0, 1), (45.0, 2)):  # pod restart between 15 s and 30 s
        feed(store, ts, a=scrape(V033, k))
    s = store.latest("stable")
    assert s is not None
    per = sum(scrape(V033, 1).models["demo-model-v2"].labelled_counters["request_success"].values())
    assert rel(s.requests, (3 + 1 + 1) * per)  # never negative, never the raw drop
    assert rel(s.request_rate, 5 * per / 45.0)
    assert rel(s.ttft.p95 if s.ttft else None, oracle(V033)["time_to_first_token_seconds"]["p95"])


def test_window_slides_and_contract_deltas() -> None:
    store = store_for(VersionSpec(name="stable", vllm=["http://a/metrics"]), window=60.0)
    for i in range(21):  # 0..300 s, the fixture's counts added once per 15 s
        feed(store, 15.0 * i, a=scrape(V033, i + 1))
    per = scrape(V033, 1).models["demo-model-v2"]
    s = store.latest("stable")
    assert s is not None and s.window_seconds == 60.0
    assert rel(s.requests, 4 * sum(per.labelled_counters["request_success"].values()))
    h = store.histogram_delta("stable", "time_to_first_token_seconds", since=150.0)
    ttft = per.histograms["time_to_first_token_seconds"]
    assert h is not None and h.cumulative == tuple(10 * c for c in ttft.cumulative)
    assert rel(store.counter_delta("stable", "prompt_tokens", since=0.0), 20 * per.counters["prompt_tokens"])
    lab = store.labelled_counter_delta("stable", "request_success", since=285.0)
    assert lab == {k: v for k, v in per.labelled_counters["request_success"].items()}
    assert store.histogram_delta("stable", "no_such_family", since=0) is None
    # beyond the fine part, the newest coarse snapshot at or before `since` answers
    coarse = SignalStore([VersionSpec(name="c", vllm=["http://a/metrics"])], window_seconds=60.0,
                         stale_after_seconds=60.0, fine_seconds=60.0, coarse_step_seconds=60.0)
    for i in range(21):
        feed(coarse, 15.0 * i, a=scrape(V033, i + 1))
    c = coarse.counter_delta("c", "prompt_tokens", since=150.0)
    assert rel(c, 12 * per.counters["prompt_tokens"])  # from the snapshot at 120 s
    assert store.histogram_delta("nope", "time_to_first_token_seconds", since=0) is None
    assert store.versions() == ["stable"] and store.last_cycle_ts == 300.0
    assert "demo-model-v2" in store.served_models("stable")


def test_down_replica_keeps_its_totals_and_counts_down() -> None:
    store = store_for(VersionSpec(name="stable", vllm=["http://a/metrics", "http://b/metrics"]))
    feed(store, 0.0, a=scrape(V033, 1), b=scrape(V033, 1))
    feed(store, 15.0, a=scrape(V033, 2), b=scrape(V033, 3))
    before = store.snapshot.versions["stable"].totals
    feed(store, 30.0, a=scrape(V033, 3), b=None)  # b is down
    s = store.latest("stable")
    after = store.snapshot.versions["stable"].totals
    assert s is not None and s.replicas_up == 1 and s.replicas_total == 2
    assert before is not None and after is not None
    for fam in ("prompt_tokens", "generation_tokens"):
        assert (after.counter(fam) or 0) >= (before.counter(fam) or 0)
    per = scrape(V033, 1).models["demo-model-v2"].counters["prompt_tokens"]
    assert rel(after.counter("prompt_tokens"), (2 + 2) * per)


def test_model_filter_and_before_first_cycle(caplog: pytest.LogCaptureFixture) -> None:
    store = store_for(VersionSpec(name="stable", model="other-model", vllm=["http://a/metrics"]))
    assert store.latest("stable") is None and store.last_cycle_ts is None
    feed(store, 0.0, a=scrape(V033, 1))
    feed(store, 15.0, a=scrape(V033, 2))
    s = store.latest("stable")
    assert s is not None and s.ttft is None and s.requests is None and s.model == "other-model"
    warned = [r.getMessage() for r in caplog.records if "demo-model-v2" in r.getMessage()]
    assert len(warned) == 1 and "http://a/metrics" in warned[0] and "other-model" in warned[0]


def _gpu(uuid: str, pod: str, xid: float, **kw: float) -> GpuMetrics:
    return GpuMetrics(uuid=uuid, gpu=uuid[-1], namespace="ns", pod=pod, xid=xid, **kw)


def test_dcgm_join_on_pods_and_xid_transitions() -> None:
    stable = VersionSpec(name="stable", dcgm=["http://d/metrics"], pods=[PodRef(namespace="ns", pod="s-0")])
    canary = VersionSpec(name="canary", dcgm=["http://d/metrics"], pods=[PodRef(namespace="ns", pod="c-0")])
    allgpus = VersionSpec(name="all", dcgm=["http://d/metrics"])
    store = store_for(stable, canary, allgpus)
    target = Target(TargetKind.DCGM, "http://d/metrics")

    def cycle(ts: float, xid_canary: float) -> None:
        gpus = (_gpu("g0", "s-0", 0.0, gpu_util_percent=50.0, fb_used_mib=60.0, fb_free_mib=30.0, fb_reserved_mib=10.0,
                     temperature_c=40.0, power_w=300.0),
                _gpu("g1", "c-0", xid_canary, gpu_util_percent=90.0, fb_used_mib=10.0, fb_free_mib=10.0,
                     temperature_c=70.0, power_w=500.0))
        store.record({target: ScrapeResult(target, ts, 0.01, dcgm=DcgmScrape(gpus=gpus))}, ts=ts)

    cycle(0.0, 13.0)  # a stale XID from before the observer started: a baseline, not news
    cycle(15.0, 13.0)
    cycle(30.0, 48.0)  # a new XID
    cycle(45.0, 0.0)
    cycle(60.0, 48.0)  # again
    s, c, a = store.latest("stable"), store.latest("canary"), store.latest("all")
    assert s and s.gpu and c and c.gpu and a and a.gpu
    assert s.gpu.gpus == 1 and rel(s.gpu.utilization_mean, 0.5) and rel(s.gpu.framebuffer_used_mean, 0.6)
    assert c.gpu.gpus == 1 and rel(c.gpu.framebuffer_used_max, 0.5) and c.gpu.temperature_celsius_max == 70.0
    assert c.gpu.xid_errors_seen == 2 and c.gpu.gpus_with_xid == 1 and s.gpu.xid_errors_seen == 0
    assert a.gpu.gpus == 2 and rel(a.gpu.utilization_max, 0.9) and rel(a.gpu.power_watts_mean, 400.0)


def test_dcgm_fixture_joins_real_pods() -> None:
    dcgm = parse_dcgm((FIXTURES / "dcgm" / "SYNTHETIC_dcgm-exporter_4.x_template_H100_k8s_Hostname.prom").read_text())
    pod = next(g.pod for g in dcgm.gpus if g.pod and "canary" in g.pod)
    assert pod is not None
    store = store_for(VersionSpec(name="canary", dcgm=["http://d/metrics"], pods=[PodRef(namespace="llm-serving",
                                                                                          pod=pod)]))
    t = Target(TargetKind.DCGM, "http://d/metrics")
    store.record({t: ScrapeResult(t, 0.0, 0.01, dcgm=dcgm)}, ts=0.0)
    s = store.latest("canary")
    g = next(x for x in dcgm.gpus if x.pod == pod)
    assert s and s.gpu and s.gpu.gpus == 1
    assert g.fb_used_mib is not None and g.fb_free_mib is not None and g.gpu_util_percent is not None
    assert rel(s.gpu.framebuffer_used_mean, g.fb_used_mib / (g.fb_used_mib + g.fb_free_mib + (g.fb_reserved_mib or 0)))
    assert rel(s.gpu.utilization_mean, g.gpu_util_percent / 100)


def test_no_new_requests_means_no_quantile_not_a_stale_one() -> None:
    """The window quantile is taken over the bucket increase: an idle window has none (None, never
    the quantile of the lifetime totals and never NaN)."""
    store = store_for(VersionSpec(name="v", vllm=["http://a/metrics"]))
    feed(store, 0.0, a=scrape(V033, 1))
    feed(store, 15.0, a=scrape(V033, 3))
    feed(store, 30.0, a=scrape(V033, 3))  # idle since 15 s
    h = store.histogram_delta("v", "time_to_first_token_seconds", since=15.0)
    assert h is not None and h.count == 0 and math.isnan(hmath.quantile(0.95, h))
    narrow = SignalStore([VersionSpec(name="v", vllm=["http://a/metrics"])], window_seconds=15.0,
                         stale_after_seconds=60.0)
    for ts, k in ((0.0, 1), (15.0, 3), (30.0, 3)):
        feed(narrow, ts, a=scrape(V033, k))
    s = narrow.latest("v")
    assert s is not None and s.ttft is not None and s.ttft.p95 is None and s.ttft.count == 0
    assert s.request_rate == 0.0 and s.finished_ratio == {}


def test_cold_start_is_pod_start_to_first_good_scrape_of_pods_started_while_watching() -> None:
    """#18 item 2: a pod that started while the observer watched reports pod start → first good scrape; one
    that was already up when the observer started is not a cold start it saw."""
    from observer.collect.vllm import parse_vllm

    old = PodRef(namespace="llm", pod="stable-old", started_at=10.0)
    new = PodRef(namespace="llm", pod="stable-new", started_at=1_010.0)
    v = VersionSpec(name="stable", role="stable", vllm=["http://a/metrics", "http://b/metrics"], pods=[old, new])
    store = store_for(v)
    payload = parse_vllm(fixture(V033))
    feed(store, 1_000.0, a=payload, b=None)  # the new pod is still loading its model
    feed(store, 1_030.0, a=payload, b=None)
    feed(store, 1_085.0, a=payload, b=payload)
    cold = store.snapshot.versions["stable"].cold_starts
    assert cold is not None and (cold.n, cold.last) == (1, 75.0)
    assert cold.counts[4] == 0 and cold.counts[5] == 1  # 75 s: above the 60 s edge, within 120 s
    feed(store, 1_100.0, a=payload, b=payload)
    assert store.snapshot.versions["stable"].cold_starts.n == 1  # counted once per pod
