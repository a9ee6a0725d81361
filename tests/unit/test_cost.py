"""Cost and energy per version (#17): the exported totals and ratios equal an independent computation from
the raw expositions (regexes over the vLLM and DCGM text, not the observer's parsers), within 1e-9.

Three scrape cycles of one version (one vLLM engine, two DCGM GPUs: one with a total-energy counter,
one with power only) at t = 0, 15, 45 s."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from observer import conventions as names
from observer.analyse.cost import CostMeter
from observer.analyse.signals import SignalStore
from observer.collect.dcgm import parse_dcgm
from observer.collect.scraper import ScrapeResult, Target, TargetHealth, TargetKind
from observer.collect.vllm import parse_vllm
from observer.config.cost import CostSpec
from observer.config.fleet import VersionSpec
from observer.export.collector import ScrapeCollector
from tests.support.observer_proc import scaled_exposition

FIXTURE = (Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "generated_vllm-0.33.0_single-engine.prom"
           ).read_text()
H100 = "NVIDIA H100 80GB HBM3"
VLLM, DCGM = "http://pod/metrics", "http://dcgm/metrics"
TIMES = (0.0, 15.0, 45.0)
SCALES = (1.0, 2.0, 4.0)


def dcgm_text(power: tuple[float, float], energy_mj: float | None, model: str = H100) -> str:
    lines = ["# TYPE DCGM_FI_DEV_POWER_USAGE gauge"]
    for i, p in enumerate(power):
        lines.append(f'DCGM_FI_DEV_POWER_USAGE{{gpu="{i}",UUID="GPU-{i}",modelName="{model}",Hostname="n"}} {p}')
    if energy_mj is not None:
        lines += ["# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
                  f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",UUID="GPU-0",modelName="{model}",Hostname="n"}} '
                  f"{energy_mj}"]
    return "\n".join(lines) + "\n"


POWER = ((300.0, 200.0), (350.0, 250.0), (400.0, 260.0))
ENERGY = (1.0e9, 1.0e9 + 4.5e6, 1.0e9 + 16.5e6)  # mJ: +4.5 kJ, then +12 kJ


def raw_counter(text: str, name: str, having: str = "") -> float:
    return sum(float(m.group(2)) for m in re.finditer(rf"^{re.escape(name)}\{{([^}}]*)\}} (\S+)$", text, re.M)
               if having in m.group(1))


def run(spec: CostSpec, *, dcgm: bool = True, model: str = H100, energy: bool = True,
        scales: tuple[float, ...] = SCALES) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], float], list[str]]:
    store = SignalStore([VersionSpec(name="stable", vllm=[VLLM], dcgm=[DCGM] if dcgm else [])],
                        window_seconds=300.0, stale_after_seconds=60.0, cost=CostMeter(spec, max_gap_seconds=60.0))
    health = TargetHealth(store.bindings())
    registry = CollectorRegistry()
    registry.register(ScrapeCollector(store, health))
    texts = []
    for ts, k, power, mj in zip(TIMES, scales, POWER, ENERGY, strict=True):
        text = scaled_exposition(FIXTURE, k)
        texts.append(text)
        v, d = Target(TargetKind.VLLM, VLLM), Target(TargetKind.DCGM, DCGM)
        results = {v: ScrapeResult(v, ts, 0.01, vllm=parse_vllm(text))}
        if dcgm:
            results[d] = ScrapeResult(d, ts, 0.01, dcgm=parse_dcgm(dcgm_text(power, mj if energy else None, model)))
        health.record(results)
        store.record(results, ts=ts)
    out = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in text_string_to_metric_families(generate_latest(registry).decode()) for s in fam.samples}
    return out, texts


def get(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float | None:
    hits = [v for (n, ls), v in m.items() if n == name and all((k, x) in ls for k, x in labels.items())]
    assert len(hits) <= 1, (name, labels, hits)
    return hits[0] if hits else None


def close(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_cost_and_energy_equal_an_independent_computation() -> None:
    m, texts = run(CostSpec(gpu_hour_prices={H100: 4.0}))
    seconds = TIMES[-1] - TIMES[0]
    cost = 2 * seconds * 4.0 / 3600  # two GPUs held for 45 s at 4.0 per GPU-hour
    # GPU 0 has the energy counter (mJ); GPU 1 only power: its reading × the seconds since the last cycle
    joules = (ENERGY[-1] - ENERGY[0]) / 1000 + POWER[1][1] * 15 + POWER[2][1] * 30
    gen = raw_counter(texts[-1], "vllm:generation_tokens_total") - raw_counter(texts[0], "vllm:generation_tokens_total")
    prompt = raw_counter(texts[-1], "vllm:prompt_tokens_total") - raw_counter(texts[0], "vllm:prompt_tokens_total")
    requests = raw_counter(texts[-1], "vllm:request_success_total") - raw_counter(texts[0],
                                                                                   "vllm:request_success_total")
    by_source = "vllm:prompt_tokens_by_source_total"
    computed = raw_counter(texts[-1], by_source, 'source="local_compute"') - raw_counter(
        texts[0], by_source, 'source="local_compute"')
    assert gen > 0 and prompt > computed > 0 and requests > 0  # the fixture's prefix cache served some prompts
    assert close(get(m, names.COST + "_total", version="stable"), cost)
    assert close(get(m, names.GPU_SECONDS + "_total", version="stable", gpu_model=H100), 2 * seconds)
    assert close(get(m, names.REPLICA_SECONDS + "_total", version="stable"), seconds)
    assert close(get(m, names.ENERGY + "_total", version="stable"), joules)
    assert close(get(m, names.COST_PER_MILLION_TOKENS, version="stable", kind="generation"), cost / gen * 1e6)
    assert close(get(m, names.COST_PER_MILLION_TOKENS, version="stable", kind="prompt"), cost / prompt * 1e6)
    assert close(get(m, names.COST_PER_MILLION_TOKENS, version="stable", kind="total"), cost / (gen + prompt) * 1e6)
    assert close(get(m, names.COST_PER_THOUSAND_REQUESTS, version="stable"), cost / requests * 1e3)
    assert close(get(m, names.ENERGY_PER_TOKEN, version="stable", kind="generation"), joules / gen)
    # the work done: prompt tokens prefilled here (no cache hits, no KV transfers) plus the generated ones
    assert close(get(m, names.COST_PER_MILLION_TOKENS, version="stable", kind="computed"),
                 cost / (computed + gen) * 1e6)
    assert close(get(m, names.ENERGY_PER_TOKEN, version="stable", kind="computed"), joules / (computed + gen))
    assert close(get(m, names.PROMPT_TOKENS_COMPUTED + "_total", version="stable"), computed)  # since first seen
    assert get(m, names.UNPRICED_GPU_SECONDS + "_total", version="stable") == 0.0


def test_a_gpu_model_without_a_price_is_counted_and_the_ratios_are_absent(caplog: pytest.LogCaptureFixture) -> None:
    m, _ = run(CostSpec(gpu_hour_prices={H100: 4.0}), model="NVIDIA B200")
    assert close(get(m, names.UNPRICED_GPU_SECONDS + "_total", version="stable", gpu_model="NVIDIA B200"), 90.0)
    assert get(m, names.COST_PER_MILLION_TOKENS, version="stable", kind="generation") is None
    assert get(m, names.COST + "_total", version="stable") == 0.0
    assert "'NVIDIA B200' (version stable) has no price" in caplog.text


def test_without_dcgm_the_configured_gpus_are_billed_and_energy_is_absent() -> None:
    m, _ = run(CostSpec(gpu_hour_prices={H100: 4.0}, gpus_per_replica=2, gpu_model=H100), dcgm=False)
    cost = 1 * 2 * 45.0 * 4.0 / 3600  # one replica up, two configured GPUs each
    assert close(get(m, names.COST + "_total", version="stable"), cost)
    assert close(get(m, names.GPU_SECONDS + "_total", version="stable", gpu_model=H100), 90.0)
    assert get(m, names.ENERGY + "_total", version="stable") is None
    assert get(m, names.ENERGY_PER_TOKEN, version="stable", kind="generation") is None


def test_no_tokens_in_the_window_means_no_ratio() -> None:
    m, _ = run(CostSpec(gpu_hour_prices={H100: 4.0}), scales=(1.0, 1.0, 1.0))
    assert get(m, names.COST + "_total", version="stable") is not None
    for kind in names.TOKEN_KINDS:
        assert get(m, names.COST_PER_MILLION_TOKENS, version="stable", kind=kind) is None
    assert get(m, names.COST_PER_THOUSAND_REQUESTS, version="stable") is None
    assert all(math.isfinite(v) for v in m.values())


def test_no_prices_at_all_exports_usage_but_no_cost() -> None:
    m, _ = run(CostSpec())
    assert get(m, names.COST + "_total", version="stable") is None
    assert close(get(m, names.GPU_SECONDS + "_total", version="stable", gpu_model=H100), 90.0)


def test_an_energy_counter_that_goes_down_uses_power_for_that_cycle() -> None:
    from observer.collect.model import GpuMetrics

    meter = CostMeter(CostSpec(), max_gap_seconds=60)
    g = GpuMetrics(uuid="GPU-0", gpu="0", model_name=H100, power_w=100.0, energy_mj=5.0e6)
    meter.observe("v", ts=0.0, replicas_up=1, gpus=[g])
    meter.observe("v", ts=10.0, replicas_up=1, gpus=[GpuMetrics(uuid="GPU-0", gpu="0", power_w=100.0,
                                                                energy_mj=6.0e6)])
    reset = meter.observe("v", ts=20.0, replicas_up=1, gpus=[GpuMetrics(uuid="GPU-0", gpu="0", power_w=100.0,
                                                                        energy_mj=10.0)])  # GPU reset
    assert reset.energy_joules == pytest.approx(1000.0 + 100.0 * 10)
    gap = meter.observe("v", ts=500.0, replicas_up=1, gpus=[GpuMetrics(uuid="GPU-0", gpu="0", power_w=100.0)])
    assert gap.replica_seconds == pytest.approx(20 + 60)  # a scrape gap is billed at most max_gap_seconds


def test_a_fallback_gpu_model_without_a_price_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="gpu_model 'A100' has no price in gpu_hour_prices"):
        CostSpec(gpu_hour_prices={H100: 4.0}, gpu_model="A100")


def test_the_cost_metric_compares_the_arms_only_at_equal_per_pod_load() -> None:
    from observer.analyse.canary.fairness import mute_unfair_latency
    from observer.analyse.canary.judge import ArmData, judge_metric
    from observer.config.canary import CanaryMetricSpec, CanarySpec

    m = CanaryMetricSpec(name="cost_per_token", kind="cost", advisory=True, group="cost")
    spec = CanarySpec()
    even_c = ArmData(requests={"stop": 100.0}, replicas=1, cost_per_million_tokens=3.2)
    even_b = ArmData(requests={"stop": 400.0}, replicas=4, cost_per_million_tokens=2.0)
    r = judge_metric(m, even_c, even_b, alpha=0.05, power=0.8)
    assert r.outcome == "fail" and r.ratio == pytest.approx(1.6)  # 1.6× per token at the same load per pod
    assert mute_unfair_latency(spec, [r], even_c, even_b)[0].outcome == "fail"
    # one canary pod at a fifth of the baseline's per-pod load: dearer per token whatever the build
    idle_c = ArmData(requests={"stop": 20.0}, replicas=1, cost_per_million_tokens=10.0)
    muted = mute_unfair_latency(spec, [judge_metric(m, idle_c, even_b, alpha=0.05, power=0.8)], idle_c, even_b)[0]
    assert muted.outcome == "inconclusive" and "per-pod load" in muted.detail
    none = judge_metric(m, ArmData(), even_b, alpha=0.05, power=0.8)
    assert none.outcome == "nodata"


def test_the_simulators_gpu_spends_idle_power_plus_its_energy_per_token() -> None:
    """The simulator's power model (#17): idle watts × time + joules per token × tokens, split over the
    replica's GPUs; what DCGM's total-energy counter then shows, and the cost meter reads."""
    from observer_dev.sim.dcgm_exposition import GpuIdentity, SimGpu
    from observer_dev.sim.engine import EngineSnapshot
    from observer_dev.sim.profile import Profile

    now = [0.0]
    tokens = [0.0]
    profile = Profile(gpu_idle_watts=50.0, gpu_joules_per_token=0.5, gpus_per_replica=2)

    def snap() -> EngineSnapshot:
        return EngineSnapshot(model="m", created=0.0, counters={"prompt_tokens": tokens[0] * 0.7,
                                                                "generation_tokens": tokens[0] * 0.3},
                              labelled={}, histograms={}, gauges={"num_requests_running": 4.0}, profile=profile)

    gpu = SimGpu(GpuIdentity.make(0, key="v/0"), snap, clock=lambda: now[0])
    start = gpu.readings()["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    now[0], tokens[0] = 10.0, 1000.0
    r = gpu.readings()
    assert r["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] - start == pytest.approx((50.0 * 10 + 0.5 * 1000 / 2) * 1000)
    assert r["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(75.0)  # (500 J + 250 J) / 10 s


def test_a_release_without_prompt_tokens_by_source_has_no_computed_ratio() -> None:
    """vLLM before the family (or a fleet mixing releases): the work done is not known, so no figure is made
    from the prompt tokens instead."""
    global FIXTURE
    kept = FIXTURE
    FIXTURE = "\n".join(line for line in kept.splitlines() if "prompt_tokens_by_source" not in line) + "\n"
    try:
        m, _ = run(CostSpec(gpu_hour_prices={H100: 4.0}))
    finally:
        FIXTURE = kept
    assert get(m, names.COST_PER_MILLION_TOKENS, version="stable", kind="total") is not None
    assert get(m, names.COST_PER_MILLION_TOKENS, version="stable", kind="computed") is None
    assert get(m, names.ENERGY_PER_TOKEN, version="stable", kind="computed") is None
    assert get(m, names.PROMPT_TOKENS_COMPUTED + "_total", version="stable") is None


def test_a_fleet_mixing_releases_has_no_computed_figure() -> None:
    """One replica on a vLLM that reports prompt_tokens_by_source, one on a release that does not: summing the
    one that reports would undercount the work, and the cost per computed token would look better than it is."""
    old = "\n".join(line for line in FIXTURE.splitlines() if "prompt_tokens_by_source" not in line) + "\n"
    urls = ("http://new/metrics", "http://old/metrics")
    store = SignalStore([VersionSpec(name="stable", vllm=list(urls))], window_seconds=300.0, stale_after_seconds=60.0,
                        cost=CostMeter(CostSpec(gpu_hour_prices={H100: 4.0}, gpu_model=H100), max_gap_seconds=60.0))
    for ts, k in zip(TIMES, SCALES, strict=True):
        new_t, old_t = (Target(TargetKind.VLLM, u) for u in urls)
        store.record({new_t: ScrapeResult(new_t, ts, 0.01, vllm=parse_vllm(scaled_exposition(FIXTURE, k))),
                      old_t: ScrapeResult(old_t, ts, 0.01, vllm=parse_vllm(scaled_exposition(old, k)))}, ts=ts)
    export = store.snapshot.versions["stable"]
    assert export.prompt_tokens_computed is None
    assert export.cost_window is not None and export.cost_window.per_million_tokens("total") is not None
    assert export.cost_window.per_million_tokens("computed") is None
