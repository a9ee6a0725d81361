"""Shadow replay end to end on the simulator (#16): stable's stored prompts are replayed to shadow replicas of
both versions, judged in pairs by the (scripted) pairwise judge, stored, and read back by the canary judge;
the replays never reach the serving pods, so the serving SLIs (the observer's request counters of stable and
canary) do not move while the shadow replicas serve every replay.

The canary's profile refuses half of its answers; the scripted judge prefers a real answer to a refusal, so
the paired metric must fail, with the evidence (losses, wins, ties) in the verdict JSON."""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from observer.config import parse_config
from observer.store.base import SampleRecord
from tests.support.judge_server import run_judge_server
from tests.support.observer_proc import run_observer
from tests.support.poll import wait_until
from tests.support.sim import config_yaml, fleet_dict, running_fleet

pytestmark = pytest.mark.integration
REQUESTS = r"^vllm:request_success_total\{[^}]*\} (\S+)$"


def _raw(url: str) -> float:
    text = httpx.get(url, timeout=10).text
    return sum(float(m.group(1)) for m in re.finditer(REQUESTS, text, re.M))


def _counters(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_shadow_pairs_fail_a_refusing_canary_and_never_touch_the_serving_slis() -> None:
    data, ports = fleet_dict(("stable", "canary", "stable-shadow", "canary-shadow"), weights=[0.9, 0.1, 0.0, 0.0])
    url = {v: f"http://127.0.0.1:{p}" for v, p in ports.vllm.items()}
    with run_judge_server() as judge:
        data["quality"] = {
            "golden_dirs": [], "judge": {"url": judge.url, "model": "scripted", "max_retries": 0},
            "live": {"enabled": False},
            "shadow": {"enabled": True, "interval_seconds": 1.0, "rate_per_second": 50, "concurrency": 4,
                       "daily_budget": 40, "targets": {"stable": url["stable-shadow"] + "/v1",
                                                       "canary": url["canary-shadow"] + "/v1"}}}
        data["canary"] = {"interval_seconds": 1.0, "slice_seconds": 1.0, "metrics": [
            {"name": "paired_judge", "kind": "paired", "paired_check": "judge", "critical": True,
             "group": "quality"},
            {"name": "paired_refusal", "kind": "paired", "paired_check": "refusal", "group": "quality"}]}
        data["drift"] = {"enabled": False}
        cfg = parse_config(config_yaml(data), source="test", environ={})
        idle = {"load_rps": 0.0, "refusal_rate": 0.0}
        worse = {"load_rps": 0.0, "refusal_rate": 0.5}
        profiles = {"stable": idle, "stable-shadow": idle, "canary": worse, "canary-shadow": worse}
        with running_fleet(cfg, profiles=profiles, total_rps=0.0) as (fleet, _), \
                run_observer(cfg, areas=["scrape", "sample", "quality", "canary"]) as obs:
            obs.wait_ready(timeout=30)
            store = obs.service.services.store
            assert store is not None
            now = time.time()
            prompts = [f"Explain step {i} of rolling out a model safely." for i in range(60)]
            store.add([SampleRecord(version="stable", prompt=p, output="An answer.", ts=now - 60 + i, source="proxy",
                                    finish_reason="stop") for i, p in enumerate(prompts)]
                      + [SampleRecord(version="stable", prompt="tool: {\"rows\": 3}", output="ok", ts=now,
                                      source="proxy"),
                         SampleRecord(version="stable", prompt="x" * 9000, output="ok", ts=now, source="proxy")])
            serving0 = (_raw(url["stable"] + "/metrics"), _raw(url["canary"] + "/metrics"))

            def pairs() -> float:
                c = _counters(obs.get("/metrics").text)
                return sum(v for (n, ls), v in c.items() if n == "observer_shadow_pairs_total"
                           and ("version", "canary") in ls)

            wait_until(lambda: pairs() >= 40, timeout=60, message="40 shadow pairs (the daily budget)")
            time.sleep(2.5)  # the budget is spent: no more replays; a canary look after the last pair
            metrics = _counters(obs.get("/metrics").text)
            verdict = obs.get("/api/v1/canary/verdict?canary=canary&baseline=stable&weight=any").json()
            serving1 = (_raw(url["stable"] + "/metrics"), _raw(url["canary"] + "/metrics"))
            shadow = (_raw(url["stable-shadow"] + "/metrics"), _raw(url["canary-shadow"] + "/metrics"))
            stored = asyncio.run(asyncio.to_thread(store.pairs, "canary", since=0.0, limit=1000))
            del fleet

    def one(name: str, **labels: str) -> float:
        hits = [v for (n, ls), v in metrics.items() if n == name and all((k, x) in ls for k, x in labels.items())]
        assert len(hits) == 1, (name, labels, hits)
        return hits[0]

    # The serving pods saw nothing; the shadow replicas served every replay (one per arm per pair).
    assert serving1 == serving0 == (0.0, 0.0)
    assert shadow == (40.0, 40.0)
    assert one("observer_shadow_replays_total", version="canary", outcome="ok") == 40
    assert one("observer_shadow_replays_total", version="stable", outcome="ok") == 40
    assert one("observer_shadow_replays_total", version="canary", outcome="error") == 0
    for v in ("stable", "canary"):  # the observer's own serving counters of both versions stay at zero
        assert sum(x for (n, ls), x in metrics.items() if n == "observer_requests_total" and ("version", v) in ls) == 0
    # Budget, replay-safety and the stored pairs.
    assert len(stored) == 40 and len({p.sample_id for p in stored}) == 40
    assert one("observer_shadow_budget_remaining", version="canary") == 0
    assert one("observer_shadow_skipped_total", version="canary", reason="not_replay_safe") >= 1
    assert one("observer_shadow_skipped_total", version="canary", reason="too_long") >= 1
    assert one("observer_shadow_skipped_total", version="canary", reason="budget") >= 1
    # The paired metric fails the refusing canary, with its evidence and the judge's identity.
    pj = verdict["metrics"]["paired_judge"]
    assert pj["result"] == "fail", verdict
    ev = pj["evidence"]
    assert ev["losses"] > 3 * max(ev["wins"], 1) and sum(ev.values()) == 40
    assert verdict["metrics"]["paired_refusal"]["evidence"]["losses"] >= 10
    assert verdict["judge"]["judge_model"] == "scripted" and verdict["judge"]["prompt_hash"].startswith("sha256:")
