"""Engine spans end to end, without a GPU or vLLM: requests through the observer's proxy to a scripted upstream,
then their `llm_request` spans sent by the real OpenTelemetry SDK exporter (OTLP/HTTP protobuf, gzip) to the
observer's `/v1/traces`, joined by the trace id the upstream received. tests/real does the same with vLLM
exporting its own spans.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from observer.config import parse_config
from observer.config.spec import ObserverConfig
from observer_dev.sim.fleet import run_fleet
from observer_dev.sim.spans import TraceTarget
from tests.support.observer_proc import run_observer, wait_until
from tests.support.prom import free_port
from tests.support.proxy_proc import run_proxy
from tests.support.scripted_openai import ScriptedUpstream

pytestmark = pytest.mark.integration
TOKEN = "spans-token"


def engine_span(trace_id: str, *, e2e: float, ttft: float) -> ReadableSpan:
    ctx = SpanContext(trace_id=int(trace_id, 16), span_id=0x1234, is_remote=False,
                      trace_flags=TraceFlags(TraceFlags.SAMPLED))
    now = time.time_ns()
    return ReadableSpan(name="llm_request", context=ctx, kind=SpanKind.SERVER, resource=Resource.create({}),
                        start_time=now - int(e2e * 1e9), end_time=now,
                        attributes={"gen_ai.latency.e2e": e2e, "gen_ai.latency.time_to_first_token": ttft,
                                    "gen_ai.latency.time_in_queue": 0.001, "gen_ai.usage.prompt_tokens": 3,
                                    "gen_ai.usage.completion_tokens": 5})


def value(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {line_start} in\n" + "\n".join(
        ln for ln in text.splitlines() if "engine" in ln or "otlp" in ln))


def proxied_config(version: str, *, proxy_port: int, tmp: Path, wait_seconds: float) -> ObserverConfig:
    """An observer whose in-process proxy for `stable` (`version`: its fleet entry, YAML flow style) listens
    on `proxy_port`, samples nothing and joins engine spans."""
    return parse_config(f"""
fleet:
  versions: [{version}]
server: {{auth_token: {TOKEN}}}
sampling:
  fraction: 0.0
  versions:
    stable: {{listen: "127.0.0.1:{proxy_port}"}}
  store: {{path: "{tmp / 's.db'}"}}
  engine_spans: {{enabled: true, wait_seconds: {wait_seconds}}}
""", environ={})


def test_spans_from_the_sdk_exporter_join_the_proxied_requests(tmp_path: Path) -> None:
    port = free_port()
    with ScriptedUpstream() as upstream:
        cfg = proxied_config(f'{{name: stable, openai: "{upstream.url}/v1"}}', proxy_port=port, tmp=tmp_path,
                             wait_seconds=1.0)
        with run_observer(cfg, areas=["sample"]) as observer:
            proxy = f"http://127.0.0.1:{port}"
            given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            for i, stream in enumerate((False, True, True)):
                headers = {"traceparent": given} if i == 0 else {}
                r = httpx.post(proxy + "/v1/completions", headers=headers, timeout=10,
                               json={"model": "m", "prompt": f"hello {i}", "max_tokens": 4, "stream": stream})
                assert r.status_code == 200
            traces = [s.headers["traceparent"].split("-")[1] for s in upstream.requests]
            assert traces[0] == "4bf92f3577b34da6a3ce929d0e0e4736" and len(set(traces)) == 3
            exporter = OTLPSpanExporter(endpoint=observer.url + "/v1/traces", compression=Compression.Gzip,
                                        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
            # The first two now; the third never: it must count missing after the wait.
            assert exporter.export([engine_span(t, e2e=1e-4, ttft=1e-5) for t in traces[:2]]) == \
                SpanExportResult.SUCCESS
            assert exporter.export([engine_span("ab" * 16, e2e=0.1, ttft=0.01)]) == SpanExportResult.SUCCESS
            exporter.shutdown()

            def joined() -> float:
                return value(observer.get("/metrics").text,
                             'observer_engine_span_requests_total{outcome="joined",version="stable"}')
            wait_until(lambda: joined() == 2, timeout=10, message="two requests joined to their spans")
            wait_until(lambda: value(observer.get("/metrics").text,
                                     'observer_engine_span_requests_total{outcome="missing",version="stable"}')
                       == 1, timeout=10, message="the third request counted missing")
            text = observer.get("/metrics").text
            assert value(text, 'observer_otlp_spans_total{outcome="unmatched"}') == 1  # nobody sent ab…ab
            assert value(text, 'observer_otlp_exports_total{code="200"}') == 2
            assert value(text, 'observer_outside_engine_seconds_count{part="e2e",version="stable"}') == 2
            assert value(text, 'observer_outside_engine_seconds_count{part="ttft",version="stable"}') == 1
            assert value(text, 'observer_outside_engine_seconds_sum{part="e2e",version="stable"}') > 0

            # Hostile senders: no token, garbage, JSON that is no export. Each gets its answer and a count.
            url = observer.url + "/v1/traces"
            assert httpx.post(url, content=b"x", headers={"content-type": "application/x-protobuf"}
                              ).status_code == 401
            auth = {"Authorization": f"Bearer {TOKEN}"}
            bad = httpx.post(url, content=b"\xff\xff\xff", headers={**auth, "content-type": "application/x-protobuf"})
            assert bad.status_code == 400 and b"not an OTLP protobuf" in bad.content
            bad = httpx.post(url, content=b'{"resourceSpans": 1}', headers={**auth, "content-type": "application/json"})
            assert bad.status_code == 400 and "resourceSpans must be a list" in json.loads(bad.content)["message"]
            ok = httpx.post(url, content=b"{}", headers={**auth, "content-type": "application/json"})
            assert ok.status_code == 200 and ok.json() == {}
            text = observer.get("/metrics").text
            assert value(text, 'observer_otlp_exports_total{code="400"}') == 2


def test_a_standalone_proxy_takes_the_spans_of_the_vllm_behind_it(tmp_path: Path) -> None:
    """In a pod, vLLM sends its spans to the `observer proxy` sidecar in front of it (localhost); the proxy
    answers `/v1/traces` itself and exports the join on its own /observer/metrics."""
    with ScriptedUpstream() as upstream:
        config = tmp_path / "proxy.yaml"
        config.write_text(f"""
fleet:
  versions: [{{name: stable, openai: "{upstream.url}/v1"}}]
sampling:
  fraction: 0.0
  store: {{path: "{tmp_path / 's.db'}"}}
  engine_spans: {{enabled: true, wait_seconds: 30}}
""")
        with run_proxy(config, "--version", "stable") as proc:
            proxy = proc.url
            r = httpx.post(proxy + "/v1/chat/completions", timeout=10, json={
                "model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})
            assert r.status_code == 200
            [seen] = upstream.requests
            exporter = OTLPSpanExporter(endpoint=proxy + "/v1/traces", timeout=5)
            assert exporter.export([engine_span(seen.headers["traceparent"].split("-")[1], e2e=1e-4, ttft=1e-5)]) \
                == SpanExportResult.SUCCESS
            exporter.shutdown()
            assert len(upstream.requests) == 1  # the export was answered by the proxy, never forwarded
            bad = httpx.post(proxy + "/v1/traces", content=b"\xff", headers={"content-type": "application/x-protobuf"})
            assert bad.status_code == 400
            text = httpx.get(proxy + "/observer/metrics").text
            assert value(text, 'observer_engine_span_requests_total{outcome="joined",version="stable"}') == 1
            assert value(text, 'observer_outside_engine_seconds_count{part="ttft",version="stable"}') == 1
            assert value(text, 'observer_otlp_exports_total{code="400"}') == 1
        assert "Traceback" not in proc.output, proc.output


def test_the_simulator_exports_spans_the_way_vllm_does(tmp_path: Path) -> None:
    """observer_dev.sim with a trace target stands in for vLLM's `--otlp-traces-endpoint`: the SDK's batch
    exporter sends one llm_request span per request, under the proxy's trace id, with real-second latencies,
    so what is left outside the engine is the proxy and the loopback (≥ 0, well under a second)."""
    port, proxy_port, upstream = free_port(), free_port(), free_port()
    sim = f"http://127.0.0.1:{upstream}"  # the simulated vLLM (run_fleet serves the version's vllm URL)
    cfg = proxied_config(f'{{name: stable, vllm: ["{sim}/metrics"], openai: "{sim}/v1"}}', proxy_port=proxy_port,
                         tmp=tmp_path, wait_seconds=10)
    target = TraceTarget(f"http://127.0.0.1:{port}/v1/traces", token=TOKEN)
    with run_fleet(cfg, profiles={"stable": {"load_rps": 0, "time_scale": 0.01}}, seed=3, traces=target), \
            run_observer(cfg, areas=["sample"], port=port) as observer:
        proxy = f"http://127.0.0.1:{proxy_port}"
        for i in range(6):
            r = httpx.post(proxy + "/v1/completions", timeout=10,
                           json={"prompt": f"hello {i}", "max_tokens": 8, "stream": i % 2 == 0})
            assert r.status_code == 200, r.text

        def count(outcome: str) -> float:
            return value(observer.get("/metrics").text,
                         f'observer_engine_span_requests_total{{outcome="{outcome}",version="stable"}}')
        wait_until(lambda: count("joined") == 6, timeout=15, message="six requests joined to the simulator's spans")
        text = observer.get("/metrics").text
        assert value(text, 'observer_outside_engine_seconds_count{part="ttft",version="stable"}') == 3
        e2e = value(text, 'observer_outside_engine_seconds_sum{part="e2e",version="stable"}')
        assert 0 <= e2e < 6 * 0.5, e2e  # real seconds on both sides: only the proxy and loopback are left
        assert value(text, 'observer_otlp_spans_total{outcome="unmatched"}') == 0
