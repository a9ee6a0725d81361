"""Every dashboard query returns data for both versions against the real stack.

A simulated stable + canary fleet (observer_dev.sim, the project's simulator) feeds a real observer Service with
scraping, sampling, quality (golden sets scored by assertions and by the scripted judge of
tests/support/judge_server.py), drift (against a baseline pinned with the real `observer baseline pin`
command) and canary analysis. A real Prometheus (Debian package) scrapes the observer every second with the
alert renderer's recording rules loaded. Mirrored samples reach the observer through its real ingest API,
posted by a background thread as a mirroring proxy would.

Each panel query, with Grafana's variables substituted ("All", and concrete values), must return a finite
value — for per-version panels, one for each of stable and canary. A query that returns nothing fails the
test, naming the panel.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from observer import conventions as names
from observer.analyse.canary.judge import bad_and_total
from observer.analyse.canary.sources import PrometheusSource
from observer.cli.main import app
from observer.config import parse_config
from observer.config.canary import CanaryMetricSpec, MetricKind
from observer.config.spec import ObserverConfig
from observer.conventions.fingerprint import sampling_hash, template_hash
from observer.conventions.ratios import RatioCounts
from observer.export.report.model import metric_query
from observer.render import alerts as alert_render
from observer.render.dashboards import render
from observer.render.dashboards.lint import PanelQuery, queries, substitute
from observer_dev.kubeapi import ScriptedKubeApi, pending, pod
from observer_dev.sim.fleet import run_fleet
from observer_dev.sim.spans import TraceTarget
from tests.support.embeddings_server import run_embeddings_server
from tests.support.judge_server import run_judge_server
from tests.support.observer_proc import run_observer
from tests.support.prom import Prometheus, free_port, run_prometheus

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = {"stable", "canary"}
RATE_INTERVAL = "30s"  # many Prometheus scrape intervals of the observer (1 s): robust to a slow moment
DEADLINE_S = 60.0
TOKEN = "dashboards-test"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

# What feeds each dashboard: the area and a series prefix it exports once it runs.
FEEDS = {"fleet": ("scrape runtime", "observer_ttft"), "gpu": ("scrape runtime", "observer_gpu"),
         "canary": ("canary judge", "observer_canary"), "quality": ("quality runner and drift", "observer_drift_p"),
         "cost": ("cost meter", "observer_cost_per")}


TEMPLATE = template_hash(["You answer questions about topics."])
SAMPLING = sampling_hash({"temperature": 0.3})


TENANTS = ("acme", "bigco")  # allow-listed: each its own label


def _response_id(version: str, i: int, ts: float | None = None) -> str:
    return f"resp-{version}-{i}-{'now' if ts is None else int(ts)}"


def _feedback(version: str, i: int) -> dict[str, Any]:
    """A user's thumbs on the live answer `i` (one in three down)."""
    return {"id": f"fb-{version}-{i}", "response_id": _response_id(version, i), "kind": "thumbs",
            "value": 0 if i % 3 == 0 else 1}


def _sample(version: str, i: int, ts: float | None = None) -> dict[str, Any]:
    refusal = i % 10 == 0
    out = {"version": version, "prompt": f"Question {i} on topic {i % 7}?",
           "output": "I'm sorry, I can't help with that." if refusal else f"Answer {i} about topic {i % 7}.",
           "finish_reason": "stop", "prompt_tokens": 6, "output_tokens": 8, "latency_s": 0.5, "ttft_s": 0.1,
           "template_hash": TEMPLATE, "sampling_hash": SAMPLING,  # what the proxy computes from each request
           # a user of its own, keyed as a sidecar keys it: drift's unit
           "conversation_key": hashlib.sha256(f"{version}:{i}:{ts}".encode()).hexdigest()[:32],
           "response_id": _response_id(version, i, ts), "tenant": TENANTS[i % len(TENANTS)]}
    if i % 11 == 0:  # a failed request now and then: the tenants' server-error series (its text kept: the live
        out["finish_reason"] = "error"  # checks' ratios, compared with the judge's reads, stay as they were)
    if ts is not None:
        out["ts"] = ts
    return out


@dataclass
class Stack:
    config: ObserverConfig
    prom: Prometheus
    errors: list[str]  # failures of the background traffic, shown when a query check fails


def _config_text(tmp: Path, *, judge_url: str, embed_url: str, ports: dict[str, int], kubeconfig: Path) -> str:
    stable, canary, dcgm, router = ports["stable"], ports["canary"], free_port(), free_port()
    proxies = {v: free_port() for v in sorted(VERSIONS)}
    return f"""
fleet:
  versions:
    - name: stable
      role: stable
      vllm: [http://127.0.0.1:{stable}/metrics]
      openai: http://127.0.0.1:{stable}/v1
      dcgm: [http://127.0.0.1:{dcgm}/metrics]
      pods: [{{namespace: llm-serving, pod: sim-stable-0}}]
      expected_traffic_weight: 0.9
      prompt_template_hash: {TEMPLATE}
      router: {{kind: llm-d-epp, urls: [http://127.0.0.1:{router}/metrics], model: sim-stable}}
    - name: canary
      role: canary
      vllm: [http://127.0.0.1:{canary}/metrics]
      openai: http://127.0.0.1:{canary}/v1
      dcgm: [http://127.0.0.1:{dcgm}/metrics]
      pods: [{{namespace: llm-serving, pod: sim-canary-0}}]
      expected_traffic_weight: 0.1
      prompt_template_hash: {TEMPLATE}
      router: {{kind: llm-d-epp, urls: [http://127.0.0.1:{router}/metrics], model: sim-canary}}
# The same pods as the scripted Kubernetes API lists them (one more canary pod the scheduler cannot place): the
# discovered versions are shadowed by the configured ones, and discovery's pod states feed their panels.
discovery:
  kubernetes:
    namespace: llm-serving
    kubeconfig: {kubeconfig}
    backoff_seconds: 0.1
    max_backoff_seconds: 0.5
    models: [{{name: llm, selector: {{app: llm}}, port: http}}]
probe: {{enabled: true, interval_seconds: 1, timeout_seconds: 1}}
scrape: {{interval_seconds: 1, timeout_seconds: 1, window_seconds: 30}}
server: {{auth_token: {TOKEN}}}
sampling:
  store: {{path: {tmp}/samples.db}}
  tenants: {{allow: [{", ".join(TENANTS)}]}}
  fingerprint: {{interval_seconds: 1}}
  versions:  # proxies that only forward (their samples would blur the mirrored ones) and join engine spans
    stable: {{listen: "127.0.0.1:{proxies['stable']}", fraction: 0.0}}
    canary: {{listen: "127.0.0.1:{proxies['canary']}", fraction: 0.0}}
  engine_spans: {{enabled: true, wait_seconds: 5}}
quality:
  golden_dirs: [{tmp}/golden]
  interval_seconds: 3
  judge: {{url: "{judge_url}", model: scripted-judge}}
  live: {{interval_seconds: 1, window_seconds: 60}}
drift:
  interval_seconds: 10
  min_samples: 10
  permutations: 99
  feature_alpha: 0.1
  baseline_dir: {tmp}/baselines
  models: {{stable: shared, canary: shared}}
  embedder: {{kind: remote, url: "{embed_url}", model: hashing, dim: 64, cache_dir: null}}
canary: {{interval_seconds: 1, window_seconds: 60}}
cost: {{gpu_hour_prices: {{"NVIDIA H100 80GB HBM3": 4.0}}, window_seconds: 60, budget_per_million_tokens: 5.0}}
slo:
  goodput: [{{name: goodput, ttft_threshold_seconds: 2.5, tpot_threshold_seconds: 0.1, objective: 0.95}}]
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("dash")
    (tmp / "golden").mkdir()
    shutil.copy(ROOT / "golden_sets" / "factual.yaml", tmp / "golden" / "factual.yaml")
    (tmp / "golden" / "judged.yaml").write_text(yaml.safe_dump({"description": "judged by the scripted judge",
        "items": [{"id": "j1", "prompt": "What is the capital of France? Answer with the city name only.",
                   "reference": "Paris", "rubric": "correctness", "assertions": [{"type": "judge"}]}]}))
    stop = threading.Event()
    api = ScriptedKubeApi()
    ports = {v: free_port() for v in sorted(VERSIONS)}
    try:
        with run_judge_server() as judge, run_embeddings_server() as embed_url, api.running():
            kubeconfig = tmp / "kubeconfig"
            kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()))
            for v in sorted(VERSIONS):
                api.put("llm-serving/pods", pod(f"sim-{v}-0", labels={"app": "llm", "rollouts-pod-template-hash": v},
                                                port=ports[v]))
            api.put("llm-serving/pods", pending("sim-canary-1", port=ports["canary"],
                                                labels={"app": "llm", "rollouts-pod-template-hash": "canary"}))
            text = _config_text(tmp, judge_url=judge.url, embed_url=embed_url, ports=ports, kubeconfig=kubeconfig)
            (tmp / "observer.yaml").write_text(text)
            config = parse_config(text, environ={})
            rules = tmp / "rules.yaml"
            rules.write_text(alert_render.render(config)[alert_render.RULES_FILE])
            port = free_port()  # the simulated engines export their OTLP spans to the observer's /v1/traces
            traces = TraceTarget(f"http://127.0.0.1:{port}/v1/traces", token=TOKEN)
            proxies = {v: f"http://{config.sampling.versions[v].listen}" for v in sorted(VERSIONS)}
            # Both arms speculate and check logits for NaNs: the ratio metrics that count draft tokens and corrupted
            # requests have series to be shown.
            engines = {v: {"spec_decode_acceptance": 0.7, "corrupted_rate": 0.02} for v in VERSIONS}
            with (run_fleet(config, engines, seed=7, answer_dir=ROOT / "golden_sets", total_rps=40.0, traces=traces),
                  run_observer(config, port=port) as obs):
                obs.wait_ready(timeout=30)
                # The hour before (the fingerprints' reference window), then now.
                first = [_sample(v, i, ts=time.time() - 1800 + i) for v in sorted(VERSIONS) for i in range(40)]
                first += [_sample(v, i) for v in sorted(VERSIONS) for i in range(40)]
                assert httpx.post(f"{obs.url}/api/v1/samples", json={"samples": first}, timeout=10,
                                  headers=AUTH).status_code == 200
                pinned = CliRunner().invoke(app, ["baseline", "pin", "--version", "stable", "--promote",
                                                  "--config", str(tmp / "observer.yaml")])
                assert pinned.exit_code == 0, pinned.output

                canary = obs.service.services.canary
                errors: list[str] = []

                def mirror() -> None:  # live traffic keeps arriving, as from a mirroring proxy
                    i = 40
                    while not stop.wait(0.5):
                        batch = [_sample(v, i) for v in sorted(VERSIONS)]
                        i += 1
                        try:  # a slow moment on a loaded machine must not end the traffic for good
                            httpx.post(f"{obs.url}/api/v1/samples", json={"samples": batch}, timeout=10, headers=AUTH)
                            # the users' thumbs on the answers before these, stored by now
                            given = httpx.post(f"{obs.url}/api/v1/feedback", timeout=10, headers=AUTH, json={
                                "events": [_feedback(v, i - 1) for v in sorted(VERSIONS)]})
                            if given.status_code != 200:
                                errors.append(f"feedback: HTTP {given.status_code}: {given.text[:200]}")
                        except httpx.HTTPError as e:
                            errors.append(f"ingest: {e!r}")
                        for v, proxy in proxies.items():  # live requests through the proxies: engine spans
                            try:
                                httpx.post(f"{proxy}/v1/completions", timeout=10, json={
                                    "prompt": f"{v} question {i}", "max_tokens": 4, "stream": i % 2 == 0})
                                if i % 5 == 0:  # a refused one now and then: the 4xx the rejections ratio counts
                                    httpx.post(f"{proxy}/v1/completions", timeout=10, json={"prompt": 1})
                            except httpx.HTTPError as e:
                                errors.append(f"proxy {v}: {e!r}")
                        # Run the real judge pass more often than its schedule, so the canary gauges
                        # appear within the test's deadline.
                        if canary is not None:
                            try:
                                obs.call(canary.run_once(), timeout=10)
                            except Exception as e:  # recorded, and shown if a query check then fails
                                errors.append(f"canary judge: {e!r}")

                mirroring = threading.Thread(target=mirror, daemon=True)
                mirroring.start()
                try:
                    with run_prometheus([obs.url.removeprefix("http://")], scrape_interval="1s",
                                        rule_files=[rules]) as prom:
                        prom.wait_for(f"count by (version) ({names.HIST_TTFT}_count)", min_series=2, timeout=30)
                        yield Stack(config, prom, errors)
                finally:
                    stop.set()
                    mirroring.join(timeout=10)
    finally:
        stop.set()


def _dashboards(config: ObserverConfig) -> dict[str, dict[str, Any]]:
    return {Path(p).stem: json.loads(t) for p, t in render(config).items() if p.endswith(".json")}


def _values(prom: Prometheus, selection: str) -> dict[str, str]:
    if selection == "all":  # what Grafana sends for "All" on a multi-value variable
        return {"datasource": "prometheus", "namespace": ".*", "model": ".*", "version": ".*"}
    # Each simulated version serves its own model name: select them all by value, as Grafana formats it.
    models = httpx.get(f"{prom.url}/api/v1/label/model/values", timeout=10).json()["data"]
    picked = "(" + "|".join(sorted(m for m in models if m.startswith("sim-"))) + ")"
    return {"datasource": "prometheus", "namespace": ".*", "model": picked, "version": "(stable|canary)"}


def _label(q: PanelQuery) -> str | None:
    for label in ("version", "canary"):
        if "{{" + label + "}}" in q.legend:
            return label
    return None


def _missing(prom: Prometheus, q: PanelQuery, values: dict[str, str]) -> str | None:
    """Why `q` does not show finite data for both versions, or None when it does."""
    expr = substitute(q.expr, values, rate_interval=RATE_INTERVAL, range_="5m")
    result = prom.query(expr)  # raises with Prometheus' parse error if the query does not parse
    finite = [r for r in result if math.isfinite(float(r["value"][1]))]
    if not finite:
        return f"{q.title} [{q.ref_id}]: {'only NaN' if result else 'no data'} for {expr}"
    label = _label(q)
    if label is None:
        return None
    want = VERSIONS if label == "version" else {"canary"}
    got = {r["metric"].get(label, "") for r in finite}
    if not want <= got:
        return f"{q.title} [{q.ref_id}]: finite {label}s {sorted(got)}, wanted {sorted(want)} from {expr}"
    return None


def _wait_all(prom: Prometheus, qs: list[PanelQuery], values: dict[str, str]) -> list[str]:
    deadline = time.monotonic() + DEADLINE_S
    pending, problems = list(qs), []
    while pending:
        problems = []
        still = []
        for q in pending:
            why = _missing(prom, q, values)
            if why:
                problems.append(why)
                still.append(q)
        pending = still
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    return problems


def _feeding(prom: Prometheus, prefix: str, *, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if prom.query(f'count({{__name__=~"{prefix}.*"}})'):
            return True
        time.sleep(0.5)
    return False


@pytest.mark.parametrize("selection", ["all", "one"])
@pytest.mark.parametrize("slug", ["fleet", "gpu", "quality", "canary", "cost"])
def test_every_query_returns_data_for_both_versions(stack: Stack, slug: str, selection: str) -> None:
    feed, prefix = FEEDS[slug]
    if slug != "canary":
        assert _feeding(stack.prom, prefix), f"{feed} exports no {prefix}* series"
    elif not _feeding(stack.prom, prefix):
        # Honest skip, not a pass: the area that feeds these panels exports nothing in this environment yet.
        pytest.skip(f"{feed} exports no {prefix}* series here yet; its panels are unproven")
    qs = queries(_dashboards(stack.config)[slug])
    assert qs
    problems = _wait_all(stack.prom, qs, _values(stack.prom, selection))
    assert not problems, (f"{slug} ({feed}): {len(problems)} of {len(qs)} queries failed:\n" + "\n".join(problems)
                          + f"\nbackground errors: {stack.errors[-5:]}")


def test_canary_side_by_side_panels_return_data(stack: Stack) -> None:
    # The canary dashboard's comparison panels read the scrape runtime's series: proven whatever the judge does.
    qs = [q for q in queries(_dashboards(stack.config)["canary"]) if _label(q) == "version"]
    assert len(qs) >= 5
    problems = _wait_all(stack.prom, qs, _values(stack.prom, "one"))
    assert not problems, "\n".join(problems)


def test_an_empty_or_one_sided_query_is_reported(stack: Stack) -> None:
    # The checks above must be able to fail: a query nobody answers, or one only one version answers.
    ghost = PanelQuery(dashboard="x", panel_id=1, title="Ghost", ref_id="A", legend="{{version}}", instant=False,
                       expr='sum by (version) (rate(observer_no_such_series_total{version=~"$version"}[5m]))')
    assert "Ghost [A]: no data" in (_missing(stack.prom, ghost, {"version": ".*"}) or "")
    one = PanelQuery(dashboard="x", panel_id=2, title="One", ref_id="A", legend="{{version}}", instant=False,
                     expr=f'sum by (version) ({names.HIST_TTFT}_count{{version=~"$version"}})')
    assert "wanted ['canary', 'stable']" in (_missing(stack.prom, one, {"version": "stable"}) or "")
    nan = PanelQuery(dashboard="x", panel_id=3, title="Nan", ref_id="A", legend="", instant=False, expr="vector(0) / 0")
    assert "only NaN" in (_missing(stack.prom, nan, {}) or "")


def test_variable_queries_offer_both_versions_and_the_served_models(stack: Stack) -> None:
    variables = {v["name"]: v for v in _dashboards(stack.config)["fleet"]["templating"]["list"]}
    offered: dict[str, set[str]] = {}
    for name in ("namespace", "model", "version"):
        query = substitute(str(variables[name]["query"]), {"namespace": ".*"})
        selector, label = query.removeprefix("label_values(").removesuffix(")").rsplit(", ", 1)
        r = httpx.get(f"{stack.prom.url}/api/v1/series", params={"match[]": selector}, timeout=10).json()
        assert r["status"] == "success", r
        offered[name] = {s.get(label, "") for s in r["data"]} - {""}
    assert offered["version"] == VERSIONS
    assert offered["model"] == {"sim-stable", "sim-canary"}
    assert offered["namespace"] == set()  # a static scrape adds none; "All" (.*) and "" both match then


RATIO_EXAMPLES = {  # one canary metric of each kind a ratio can count (conventions/ratios.py)
    RatioCounts.FINISHED_REASONS: CanaryMetricSpec(name="finishes", kind=MetricKind.RATIO,
                                                   finished_reasons=["stop", "length"]),
    RatioCounts.HTTP_4XX: CanaryMetricSpec(name="rejections", kind=MetricKind.RATIO, http_4xx=True),
    RatioCounts.LIVE_CHECK: CanaryMetricSpec(name="refusals", kind=MetricKind.RATIO, live_check="empty"),
    RatioCounts.SPEC_DECODE: CanaryMetricSpec(name="draft_rejections", kind=MetricKind.RATIO, spec_decode=True),
    RatioCounts.CORRUPTED: CanaryMetricSpec(name="nan_logits", kind=MetricKind.RATIO, corrupted=True),
}
assert set(RATIO_EXAMPLES) == set(RatioCounts)


@pytest.mark.parametrize("counts", list(RatioCounts))
def test_the_reports_query_of_each_ratio_kind_shows_what_the_judge_read(stack: Stack, counts: RatioCounts) -> None:
    """The report links each ratio metric to the PromQL of its evidence: for both arms it must select series, and
    give the bad share the judge computes from what the Prometheus source read over the same window."""
    m = RATIO_EXAMPLES[counts]
    window = 20.0
    query = metric_query(m, "unused", "canary", "stable", window)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        at = time.time() - 2.0  # a scrape Prometheus surely has
        got = {r["metric"].get("version"): float(r["value"][1]) for r in stack.prom.query(query, at=at)}
        if set(got) == set(VERSIONS) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert set(got) == set(VERSIONS), f"{counts}: {query} gave {got}; background errors: {stack.errors[-5:]}"

    async def judged(version: str) -> float:
        async with httpx.AsyncClient() as http:
            # the report's window is at least 60 s: read the judge's counts over the same range
            source = PrometheusSource(url=stack.prom.url, http=http, slice_seconds=60.0)
            arm = await source.arm(version, [m], since=at - max(60.0, window), now=at, with_drift=False)
        if counts is RatioCounts.LIVE_CHECK:
            failures, total = arm.live_checks[m.live_check or ""]
            return failures / total
        bad, total = bad_and_total(m, arm)
        return bad / total

    for version in sorted(VERSIONS):
        assert got[version] == pytest.approx(asyncio.run(judged(version)), rel=1e-6), (counts, version, query)
