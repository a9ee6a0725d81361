"""Profiles move the simulated metrics the way they claim, measured from the simulator's own
histograms and counters over many seeded simulated requests."""

from __future__ import annotations

import time

import numpy as np
import pytest

from observer.analyse.histogram import quantile
from observer.collect.model import Histogram
from observer.errors import ConfigError
from observer_dev.sim import vllm_families as fam
from observer_dev.sim.answers import AnswerBook
from observer_dev.sim.engine import SimEngine, draw_requests
from observer_dev.sim.profile import PRESETS, Profile, build_profile, parse_profile_args
from observer_dev.sim.replica import SimVersion


def _engine(spec: str | dict[str, object], seed: int = 11) -> SimEngine:
    return SimEngine(model="m", profile=build_profile(spec), seed=seed)


def _run(engine: SimEngine, seconds: float, step: float = 1.0) -> None:
    for _ in range(int(seconds / step)):
        engine.tick(step)


def _hist(engine: SimEngine, name: str) -> Histogram:
    cumulative, total = engine.snapshot().histograms[name]
    bounds = fam.BY_NAME[name].buckets
    return Histogram(bounds=bounds, cumulative=cumulative, sum=total, count=cumulative[-1],
                     le_labels=(*tuple(repr(float(b)) for b in bounds), "+Inf"))


def test_slow_preset_makes_ttft_p95_about_one_and_a_half_times_healthy() -> None:
    healthy, slow = _engine("healthy"), _engine("slow")
    _run(healthy, 1000)
    _run(slow, 1000)
    p95_h = quantile(0.95, _hist(healthy, "time_to_first_token_seconds"))
    p95_s = quantile(0.95, _hist(slow, "time_to_first_token_seconds"))
    assert _hist(healthy, "time_to_first_token_seconds").count > 3000
    assert 1.3 < p95_s / p95_h < 1.7, (p95_h, p95_s)
    # Only TTFT moves: inter-token latency stays put.
    itl_ratio = quantile(0.5, _hist(slow, "inter_token_latency_seconds")) / quantile(
        0.5, _hist(healthy, "inter_token_latency_seconds"))
    assert 0.9 < itl_ratio < 1.1


def test_flaky_preset_fails_about_three_percent_of_requests() -> None:
    engine = _engine("flaky")
    _run(engine, 2000)
    reasons = engine.snapshot().labelled["request_success"]
    total = sum(reasons.values())
    assert total > 6000
    assert 0.025 < reasons["error"] / total < 0.035
    healthy = _engine("healthy")
    _run(healthy, 500)
    assert healthy.snapshot().labelled["request_success"]["error"] == 0


def test_finish_reasons_follow_max_tokens_and_abort_rate() -> None:
    engine = _engine({"max_tokens": 100, "output_tokens_median": 150, "abort_rate": 0.1})
    _run(engine, 500)
    r = engine.snapshot().labelled["request_success"]
    total = sum(r.values())
    assert r["length"] / total > 0.5  # most drawn outputs exceed 100 tokens
    assert 0.08 < r["abort"] / total < 0.12
    gen = _hist(engine, "request_generation_tokens")
    assert gen.cumulative[fam.TOKEN_BUCKETS.index(100.0)] == gen.count  # nobody generates past max_tokens


def test_idle_preset_serves_nothing_and_gauges_rest() -> None:
    engine = _engine("idle")
    _run(engine, 100)
    s = engine.snapshot()
    assert sum(s.labelled["request_success"].values()) == 0
    assert s.gauges == {"num_requests_running": 0.0, "num_requests_waiting": 0.0, "kv_cache_usage_perc": 0.0}


def test_gauges_and_token_counters_follow_load() -> None:
    light, heavy = _engine({"load_rps": 1}), _engine({"load_rps": 20})
    running = {"light": [], "heavy": []}
    for _ in range(200):
        light.tick(1.0)
        heavy.tick(1.0)
        running["light"].append(light.snapshot().gauges["num_requests_running"])
        running["heavy"].append(heavy.snapshot().gauges["num_requests_running"])
    assert np.mean(running["heavy"]) > 10 * np.mean(running["light"]) > 0
    s = heavy.snapshot()
    assert s.gauges["kv_cache_usage_perc"] > light.snapshot().gauges["kv_cache_usage_perc"]
    assert s.counters["prefix_cache_hits"] == pytest.approx(0.3 * s.counters["prefix_cache_queries"], rel=0.02)
    assert s.counters["generation_tokens"] == _hist(heavy, "request_generation_tokens").sum


def test_restart_resets_every_counter_and_histogram() -> None:
    engine = _engine("healthy")
    _run(engine, 50)
    before = engine.snapshot()
    assert before.counters["prompt_tokens"] > 0
    engine.restart()
    after = engine.snapshot()
    assert after.created >= before.created
    assert all(v == 0 for v in after.counters.values())
    assert all(v == 0 for d in after.labelled.values() for v in d.values())
    assert all(cum[-1] == 0 and total == 0 for cum, total in after.histograms.values())
    engine.tick(5.0)
    assert engine.snapshot().counters["prompt_tokens"] > 0


def test_the_same_seed_gives_the_same_metrics() -> None:
    a, b, c = _engine("healthy", seed=5), _engine("healthy", seed=5), _engine("healthy", seed=6)
    for e in (a, b, c):
        _run(e, 30)
    assert a.snapshot().histograms == b.snapshot().histograms
    assert a.snapshot().histograms != c.snapshot().histograms


def test_drifted_load_sends_about_ten_percent_other_domain_prompts_that_are_longer() -> None:
    version = SimVersion.create("canary", model="m", profile=build_profile("drifted"), replicas=1, seed=2,
                                book=AnswerBook())
    baseline = SimVersion.create("stable", model="m", profile=build_profile("healthy"), replicas=1, seed=2,
                                 book=AnswerBook())
    for _ in range(100):
        version.tick(2.0)
        baseline.tick(2.0)
    samples = version.recent.latest(1000)
    other = [s for s in samples if s.domain == "other"]
    assert len(samples) >= 700
    assert 0.06 < len(other) / len(samples) < 0.14
    assert all(s.domain == "home" for s in baseline.recent.latest(1000))
    home_tokens = np.median([s.prompt_tokens for s in samples if s.domain == "home"])
    assert np.median([s.prompt_tokens for s in other]) > 1.2 * home_tokens


def test_load_is_cheap_arithmetic() -> None:
    engine = _engine({"load_rps": 10})
    t0 = time.process_time()
    _run(engine, 300, step=0.2)  # 1,500 ticks = 5 minutes of 10 req/s
    cpu = time.process_time() - t0
    assert sum(engine.snapshot().labelled["request_success"].values()) > 2500
    assert cpu < 3.0, f"{cpu:.2f} CPU s for 1,500 ticks"


def test_draw_requests_keeps_given_api_values() -> None:
    rng = np.random.default_rng(0)
    r = draw_requests(build_profile("healthy"), 1, rng, prompt_tokens=[42], gen_tokens=[7], reasons=[1])
    assert (int(r.prompt_tokens[0]), int(r.gen_tokens[0]), fam.FINISHED_REASONS[int(r.reasons[0])]) == \
        (42, 7, "length")
    assert r.itl.shape == (6,) and r.decode[0] == pytest.approx(r.itl.sum())
    assert r.e2e[0] == pytest.approx(r.queue[0] + r.prefill[0] + r.decode[0])


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_a_valid_profile(name: str) -> None:
    assert isinstance(build_profile(name), Profile)


def test_profile_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match="unknown profile key 'ttft_scal'"):
        build_profile({"ttft_scal": 2})
    with pytest.raises(ConfigError, match="error_rate"):
        build_profile({"error_rate": 1.5})
    with pytest.raises(ConfigError, match="unknown simulator preset 'fast'"):
        build_profile("fast")


def test_a_preset_on_a_running_profile_keeps_its_traffic_volume() -> None:
    running = build_profile({"load_rps": 0.7, "time_scale": 0.01})
    flaky = build_profile("flaky", base=running)
    assert (flaky.load_rps, flaky.time_scale, flaky.error_rate) == (0.7, 0.01, 0.03)
    assert build_profile("idle", base=running).load_rps == 0.0


def test_cli_profile_arguments() -> None:
    profiles = parse_profile_args(["canary=slow", "stable=healthy,error_rate=0.05,load_rps=2"])
    assert profiles["canary"].ttft_scale == 1.5
    assert (profiles["stable"].error_rate, profiles["stable"].load_rps) == (0.05, 2)
    with pytest.raises(ConfigError, match="expected VERSION=PRESET"):
        parse_profile_args(["canary"])
    with pytest.raises(ConfigError, match="is not key=value"):
        parse_profile_args(["canary=slow,oops"])
