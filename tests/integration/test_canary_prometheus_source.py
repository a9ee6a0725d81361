"""Fleet mode: the judge reads the observer's exported counters/histograms from a real Prometheus."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from typer.testing import CliRunner

from observer import conventions as names
from observer.analyse.canary.judge import ArmData, judge_metric
from observer.analyse.canary.service import CanaryService
from observer.analyse.canary.sources import PrometheusSource
from observer.cli.main import app
from observer.config import parse_config
from tests.support.canary_streams import TTFT_EDGES
from tests.support.prom import free_port, run_prometheus

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs the prometheus binary")]

CONFIG = """
fleet:
  versions:
    - {name: stable, role: stable, expected_traffic_weight: 0.75}
    - {name: canary, role: canary, expected_traffic_weight: 0.25}
canary:
  source: prometheus
  prometheus_url: %s
  window_seconds: 120
  slice_seconds: 2   # time compressed: one round of traffic per second, scraped every second
"""


class Exporter:
    """What per-pod observers export, for two versions, fed with seeded traffic."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(names.REQUESTS, "requests", [names.VERSION, names.FINISHED_REASON],
                                registry=self.registry)
        self.ttft = Histogram(names.HIST_TTFT, "ttft", [names.VERSION], buckets=TTFT_EDGES,
                              registry=self.registry)
        self.http = Counter(names.HTTP_RESPONSES, "vLLM generation responses", [names.VERSION,
                                                                                names.HTTP_STATUS_CLASS],
                            registry=self.registry)
        self.checks = Counter(names.LIVE_CHECKS, "live checks", [names.VERSION, names.CHECK], registry=self.registry)
        self.check_failures = Counter(names.LIVE_CHECK_FAILURES, "live check failures", [names.VERSION, names.CHECK],
                                      registry=self.registry)
        golden = [names.VERSION, names.GOLDEN_SET]
        self.golden_items = Counter(names.GOLDEN_ITEMS, "golden items", golden, registry=self.registry)
        self.golden_passed = Counter(names.GOLDEN_ITEMS_PASSED, "golden passed", golden, registry=self.registry)
        self.golden_judge_errors = Counter(names.GOLDEN_JUDGE_ERRORS, "golden judge errors", golden,
                                           registry=self.registry)
        self.rng = np.random.default_rng(4)
        for v in ("stable", "canary"):
            for c in (self.golden_items, self.golden_passed, self.golden_judge_errors):
                c.labels(v, "factual").inc(0)
            for r in ("stop", "error"):
                self.requests.labels(v, r).inc(0)
            self.checks.labels(v, "refusal").inc(0)
            self.check_failures.labels(v, "refusal").inc(0)
            for status in ("2xx", "5xx"):
                self.http.labels(v, status).inc(0)
            self.ttft.labels(v)

    def traffic(self, version: str, n: int, *, error_rate: float, ttft_median: float, legacy: bool = False,
                refusal_rate: float = 0.02) -> None:
        """`n` requests (a tenth of them sampled and checked for refusals); with `legacy` (vLLM < 0.13) the
        failures have no `error` finish reason, only a 500."""
        sampled = n // 10
        self.checks.labels(version, "refusal").inc(sampled)
        self.check_failures.labels(version, "refusal").inc(int(self.rng.binomial(sampled, refusal_rate)))
        errors = int(self.rng.binomial(n, error_rate))
        if not legacy:
            self.requests.labels(version, "error").inc(errors)
        self.http.labels(version, "5xx").inc(errors)
        self.http.labels(version, "2xx").inc(n - errors)
        self.requests.labels(version, "stop").inc(n - errors)
        for x in self.rng.lognormal(np.log(ttft_median), 0.5, size=n):
            self.ttft.labels(version).observe(float(x))


@pytest.fixture
def rig() -> Iterator[tuple[Exporter, str]]:
    exp = Exporter()
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=exp.registry)
    try:
        with run_prometheus([f"127.0.0.1:{port}"], scrape_interval="1s") as prom:
            prom.wait_for(f"{names.REQUESTS}_total", min_series=4)
            yield exp, prom.url
    finally:
        server.shutdown()
        thread.join(timeout=5)


async def _judge(prom_url: str, *, since: float) -> tuple[CanaryService, object]:
    async with httpx.AsyncClient() as http:
        service = CanaryService(parse_config(CONFIG % prom_url, environ={}),
                                PrometheusSource(url=prom_url, http=http, slice_seconds=2.0),
                                clock=time.time)
        v = await service.verdict_for("canary", "stable", since=since, weight=None)
    return service, v


async def _judge_until(url: str, *, since: float, want: str, timeout: float = 20.0) -> Any:
    """Judge until the verdict is `want` or the deadline passes (Prometheus scrapes every second): a poll,
    not a fixed sleep before one judgement."""
    deadline = time.monotonic() + timeout
    while True:
        out = await _judge(url, since=since)
        if out[1].verdict.value == want or time.monotonic() > deadline:
            return out
        await asyncio.sleep(0.5)


async def test_prometheus_source_sees_a_worse_canary(rig: tuple[Exporter, str], tmp_path: Path) -> None:
    exp, url = rig
    since = time.time()
    for _ in range(22):  # ≥ 10 two-second slices: the ratio test's minimum on sliced data
        exp.traffic("stable", 600, error_rate=0.01, ttft_median=0.3)
        exp.traffic("canary", 200, error_rate=0.08, ttft_median=0.3)
        time.sleep(1.0)
    _, v = await _judge_until(url, since=since, want="fail")
    assert v.verdict.value == "fail", v.reason  # type: ignore[attr-defined]
    errors = v.metric("errors")  # type: ignore[attr-defined]
    assert errors.outcome.value == "fail" and errors.n_canary > 1000
    ttft = v.metric("ttft")  # type: ignore[attr-defined]
    assert ttft.outcome.value != "fail" and ttft.n_baseline > 3000  # histogram rebuilt from sum by (le)
    # The CLI judges the same way in fleet mode (`--prometheus`), exit 1 on fail.
    cfg = tmp_path / "observer.yaml"
    cfg.write_text(CONFIG % url)
    res = await asyncio.to_thread(CliRunner().invoke, app, ["canary", "judge", "--config", str(cfg),
                                                           "--prometheus", url, "--json"])
    assert res.exit_code == 1, res.output
    assert json.loads(res.output)["metrics"]["errors"]["result"] == "fail"


async def test_prometheus_source_sees_5xx_where_vllm_has_no_error_reason(rig: tuple[Exporter, str]) -> None:
    """#18 item 3 in fleet mode: vLLM < 0.13 fails requests without an `error` finish reason; the errors
    metric reads observer_http_responses_total's 5xx from Prometheus and fails the canary on them."""
    exp, url = rig
    since = time.time()
    for _ in range(22):
        exp.traffic("stable", 600, error_rate=0.01, ttft_median=0.3, legacy=True)
        exp.traffic("canary", 200, error_rate=0.08, ttft_median=0.3, legacy=True)
        time.sleep(1.0)
    _, v = await _judge_until(url, since=since, want="fail")
    errors = v.metric("errors")  # type: ignore[attr-defined]
    assert errors.outcome.value == "fail" and errors.n_canary > 1000, v.reason  # type: ignore[attr-defined]


async def test_unreachable_prometheus_is_nodata_with_a_counter() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    service, v = await _judge(dead, since=time.time() - 60)
    assert v.verdict.value == "nodata" and "could not query Prometheus" in v.reason  # type: ignore[attr-defined]
    assert service.source_errors[("canary", "stable")] == 1


async def test_two_observer_replicas_are_counted_once_with_replica_labels() -> None:
    """Two central observers scrape the same fleet and export the same counters: summed, every count doubles
    (and the judge is twice as sure as it may be); with `replica_labels: [instance]` one replica's counts."""
    from observer.collect.promql import PromQLClient
    from observer.config.canary import default_metrics
    from observer.config.prometheus import PrometheusClientSpec

    replicas = [Exporter(), Exporter()]  # same seed: the same traffic seen twice
    servers = []
    ports = [free_port(), free_port()]
    try:
        for exp, port in zip(replicas, ports, strict=True):
            servers.append(start_http_server(port, addr="127.0.0.1", registry=exp.registry))
        with run_prometheus([f"127.0.0.1:{p}" for p in ports], scrape_interval="1s") as prom:
            prom.wait_for(f"{names.REQUESTS}_total", min_series=8)
            since = time.time()
            for _ in range(6):
                for exp in replicas:
                    exp.traffic("canary", 100, error_rate=0.05, ttft_median=0.3)
                time.sleep(1.0)
            time.sleep(2.5)
            now = time.time()
            async with httpx.AsyncClient() as http:
                totals = {}
                for labels in ([], ["instance"]):
                    client = PromQLClient(prom.url, PrometheusClientSpec(replica_labels=labels), http=http)
                    src = PrometheusSource(url=prom.url, http=http, slice_seconds=2.0, client=client)
                    arm = await src.arm("canary", default_metrics(), since=since, now=now, with_drift=False)
                    totals[len(labels)] = arm.total_requests
    finally:
        for server, thread in servers:
            server.shutdown()
            thread.join(timeout=5)
    assert totals[0] is not None and totals[1] is not None
    # Each replica's increase() is extrapolated from its own scrape times, so the sum is about twice one.
    assert 1.7 * totals[1] <= totals[0] <= 2.05 * totals[1]
    assert 450 <= totals[1] <= 800  # 600 requests seen, increase() extrapolated over the window


async def test_live_checks_are_read_per_slice(rig: tuple[Exporter, str]) -> None:
    """The live checks come per slice too (the test is cluster-robust on them), and the slices add up to the
    window; a canary refusing 5× as often fails `refusals` on its slices."""
    exp, url = rig
    since = time.time()
    # 28 two-second slices: the slice t-test takes runs of slices as one unit unless they are shown
    # uncorrelated, so it needs more slices than the 10 a pass needs.
    for _ in range(56):
        exp.traffic("stable", 600, error_rate=0.01, ttft_median=0.3)
        exp.traffic("canary", 200, error_rate=0.01, ttft_median=0.3, refusal_rate=0.25)
        time.sleep(1.0)
    service, v = await _judge_until(url, since=since, want="fail")
    refusals = v.metric("refusals")  # type: ignore[attr-defined]
    assert refusals.outcome.value == "fail" and refusals.slices is not None and refusals.slices >= 10, refusals
    assert "slices" in refusals.detail
    async with httpx.AsyncClient() as http:
        src = PrometheusSource(url=url, http=http, slice_seconds=2.0)
        now = time.time()
        arm = await src.arm("canary", service.spec.metrics, since=since, now=now, with_drift=False)
    per_slice = [s.live_checks.get("refusal", (0, 0)) for s in arm.slices]
    assert sum(t for _, t in per_slice) > 0.8 * arm.live_checks["refusal"][1]
    assert all(0 <= f <= t for f, t in per_slice)


async def test_golden_judge_errors_are_read_from_prometheus(rig: tuple[Exporter, str]) -> None:
    """The judge failing on golden items mid-step reaches the judge through Prometheus: golden cannot pass."""
    exp, url = rig
    since = time.time()
    time.sleep(2.0)
    for v, errors in (("stable", 0), ("canary", 40)):
        exp.golden_items.labels(v, "factual").inc(100)
        exp.golden_passed.labels(v, "factual").inc(90)
        exp.golden_judge_errors.labels(v, "factual").inc(errors)
    deadline = time.monotonic() + 20
    async with httpx.AsyncClient() as http:
        src = PrometheusSource(url=url, http=http, slice_seconds=2.0)
        spec = parse_config(CONFIG % url, environ={}).canary
        while True:
            now = time.time()
            arm = await src.arm("canary", spec.metrics, since=since, now=now, with_drift=False)
            base = await src.arm("stable", spec.metrics, since=since, now=now, with_drift=False)
            if arm.golden_judge_errors.get("", 0) >= 40 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
    # increase() extrapolates over the range: the counts are the increments scaled alike, not exact.
    passed, scored = arm.golden[""]
    assert abs(passed / scored - 0.9) < 0.02, arm.golden
    errors = arm.golden_judge_errors[""]
    assert scored >= 100 and abs(errors / scored - 0.4) < 0.02 and base.golden_judge_errors[""] == 0, arm
    golden = next(m for m in spec.metrics if m.name == "golden")
    r = judge_metric(golden, arm, base, alpha=0.01, power=0.8)
    assert r.outcome.value != "pass" and "the judge failed on" in r.detail, r


async def test_each_pods_latency_is_read_by_its_target_label(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sidecar mode: one observer per vLLM pod, each its own target. The judge reads each pod's TTFT slices by
    the label naming the pod (`pod_label`, here the target's `instance`), for the pods-as-units pass; the
    pods' slices add up to the arm's. Where that label tells observer replicas apart instead, no pod is read.
    An arm with more pods than the bound is counted first and none of its pods is read (the canary's one is)."""
    from observer.analyse.canary.sources import prometheus as prom_source
    from observer.collect.promql import PromQLClient
    from observer.config.canary import default_metrics
    from observer.config.prometheus import PrometheusClientSpec

    fleet = [("canary", Exporter())] + [("stable", Exporter()) for _ in range(5)]
    ports = [free_port() for _ in fleet]
    servers = []
    try:
        for (_, exp), port in zip(fleet, ports, strict=True):
            servers.append(start_http_server(port, addr="127.0.0.1", registry=exp.registry))
        with run_prometheus([f"127.0.0.1:{p}" for p in ports], scrape_interval="1s") as prom:
            prom.wait_for(f"{names.REQUESTS}_total", min_series=4 * len(fleet))
            since = time.time()
            for _ in range(8):
                for version, exp in fleet:
                    exp.traffic(version, 50, error_rate=0.01, ttft_median=0.3)
                time.sleep(1.0)
            time.sleep(2.5)
            now = time.time()
            arms = {}
            async with httpx.AsyncClient() as http:
                replicas = PrometheusClientSpec(pod_label="instance", replica_labels=["instance"])
                for key, spec in (("pods", PrometheusClientSpec(pod_label="instance")), ("replicas", replicas)):
                    src = PrometheusSource(url=prom.url, http=http, slice_seconds=2.0,
                                           client=PromQLClient(prom.url, spec, http=http))
                    arms[key] = {v: await src.arm(v, default_metrics(), since=since, now=now, with_drift=False)
                                 for v in ("canary", "stable")}
                monkeypatch.setattr(prom_source, "MAX_PODS", 3)
                client = PromQLClient(prom.url, PrometheusClientSpec(pod_label="instance"), http=http)
                ranged: list[str] = []
                real_range = client.query_range

                async def counted(promql: str, **kw: float) -> list[dict[str, object]]:
                    ranged.append(promql)
                    return await real_range(promql, **kw)

                monkeypatch.setattr(client, "query_range", counted)
                src = PrometheusSource(url=prom.url, http=http, slice_seconds=2.0, client=client)
                arms["bounded"] = {v: await src.arm(v, default_metrics(), since=since, now=now, with_drift=False)
                                   for v in ("canary", "stable")}
    finally:
        for server, thread in servers:
            server.shutdown()
            thread.join(timeout=5)
    canary, stable = arms["pods"]["canary"], arms["pods"]["stable"]
    assert set(canary.pods) == {f"127.0.0.1:{ports[0]}"}
    assert set(stable.pods) == {f"127.0.0.1:{p}" for p in ports[1:]}

    def count(a: ArmData) -> float:
        h = a.histograms.get("ttft")
        return 0.0 if h is None else h.count

    for arm in (canary, stable):
        for j, whole in enumerate(arm.slices):
            assert sum(count(p.slices[j]) for p in arm.pods.values()) == pytest.approx(count(whole))
    # 400 observations a pod; the slices hold those inside the window
    assert sum(count(s) for p in stable.pods.values() for s in p.slices) >= 5 * 300
    assert arms["replicas"]["canary"].pods == {} and arms["replicas"]["stable"].pods == {}
    assert set(arms["bounded"]["canary"].pods) == set(canary.pods), ranged
    assert arms["bounded"]["stable"].pods == {}
    per_pod = [q for q in ranged if q.startswith("sum by (instance, le)")]
    assert per_pod and all('version="canary"' in q for q in per_pod), per_pod  # the stable pods never read


async def test_histogram_slices_summed_first_match_the_per_series_read_across_restarts_and_joins() -> None:
    """A version's bucket changes are summed over its series first and then differenced where the same series
    stand at both ends of a slice with no reset near it (cheap at fleet size); a pod that restarts (its counters
    start again from 0) or joins mid-window sends its slices to the per-series read. Either way every slice is
    the per-series read's."""
    steady, restarting, late = Exporter(), Exporter(), Exporter()

    class Restartable:  # what one port serves: the pod's process of the moment
        def __init__(self, exp: Exporter) -> None:
            self.exp = exp

        def collect(self) -> Any:
            return self.exp.registry.collect()

    pod = Restartable(restarting)
    ports = [free_port() for _ in range(3)]
    servers = {0: start_http_server(ports[0], addr="127.0.0.1", registry=steady.registry),
               1: start_http_server(ports[1], addr="127.0.0.1", registry=pod)}  # type: ignore[arg-type]
    try:
        with run_prometheus([f"127.0.0.1:{p}" for p in ports], scrape_interval="1s") as prom:
            prom.wait_for(f"{names.REQUESTS}_total", min_series=8)
            since = time.time()
            for second in range(24):
                if second == 8:  # the pod restarts: a new process, its counters from 0
                    restarting = pod.exp = Exporter()
                if second == 14:  # a pod joins
                    servers[2] = start_http_server(ports[2], addr="127.0.0.1", registry=late.registry)
                for exp in (steady, restarting, *((late,) if second >= 14 else ())):
                    exp.traffic("stable", 40, error_rate=0.0, ttft_median=0.3)
                time.sleep(1.0)
            time.sleep(2.5)
            now = time.time()
            async with httpx.AsyncClient() as http:
                src = PrometheusSource(url=prom.url, http=http, slice_seconds=2.0)
                instant: list[float] = []
                real_query = src.query

                async def counted(promql: str, *, at: float) -> list[dict[str, Any]]:
                    instant.append(at)
                    return await real_query(promql, at=at)

                src.query = counted  # type: ignore[method-assign]
                step, ends = src._slice_ends(since, now)
                v = '{version="stable"}'
                got = await src._bucket_slices(names.HIST_TTFT, v, ends[0], ends[-1], step)
                exact = await src.query_range(f"sum by (le) ({src._delta(f'{names.HIST_TTFT}_bucket{v}', '2s')})",
                                              start=ends[0], end=ends[-1], step=step)
    finally:
        for server, thread in servers.values():
            server.shutdown()
            thread.join(timeout=5)
    want: dict[int, dict[str, float]] = {}
    for series in exact:
        for ts, value in series["values"]:
            want.setdefault(round((float(ts) - ends[0]) / step), {})[series["metric"]["le"]] = float(value)
    have = {i: {s["metric"]["le"]: float(s["value"][1]) for s in vector} for i, vector in got.items()}
    assert have == want
    # The restart and the join each sent a few slices to the per-series read; the rest were summed first.
    assert 2 <= len(instant) <= len(ends) // 2, (len(instant), len(ends))
    assert sum(v["+Inf"] for v in have.values()) >= 40 * 2 * 18  # the traffic of the window is there
