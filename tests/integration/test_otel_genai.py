"""Applications' OpenTelemetry GenAI spans as samples: a real `openai` client instrumented by the official
`opentelemetry-instrumentation-openai-v2` (its own process, `tests/support/genai_app.py`) asks the simulator's
stable and canary, and exports its spans over OTLP/HTTP to a real observer. Every answered call lands as a
sample of its version, redacted; content capture off, an unconfigured model, unreadable messages and an
oversized export are counted, never stored, and never become a label."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from observer.config import parse_config
from tests.support.observer_proc import ObserverProcess, run_observer, wait_until
from tests.support.prom import metric
from tests.support.sim import running_fleet, sim_config

pytest.importorskip("opentelemetry.instrumentation.openai_v2")

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "otel-token"
IDLE = {"preset": "idle", "time_scale": 0.0}


@pytest.fixture
def fleet() -> Iterator[dict[str, str]]:
    with running_fleet(sim_config(), profiles={"stable": IDLE, "canary": IDLE}, total_rps=0.0) as (_, cfg):
        yield {v.name: str(v.openai) for v in cfg.fleet.versions}


@pytest.fixture
def observer(tmp_path: Path) -> Iterator[ObserverProcess]:
    config = parse_config(f"""
fleet:
  versions:
    - {{name: stable, openai: "http://127.0.0.1:9/v1"}}
    - {{name: canary, openai: "http://127.0.0.1:9/v1"}}
server: {{auth_token: {TOKEN}, max_request_bytes: 200000}}
sampling:
  fraction: 1.0
  store: {{path: "{tmp_path / 'samples.db'}"}}
  otel_genai:
    enabled: true
    models: {{sim-stable: stable, sim-canary: canary}}
""", environ={})
    with run_observer(config, areas=["sample"]) as obs:
        yield obs


def run_app(obs: ObserverProcess, fleet: dict[str, str], *, n: int, content: str = "span_only",
            models: tuple[str, ...] = ("stable", "canary")) -> int:
    args = [sys.executable, "-m", "tests.support.genai_app", "--otlp", obs.url + "/v1/traces", "--token", TOKEN,
            "--n", str(n), "--content", content]
    for version in models:
        args += ["--base-url", fleet[version], "--model", f"sim-{version}"]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


def stored(obs: ObserverProcess, version: str) -> list[dict[str, Any]]:
    return obs.samples(version, TOKEN)


def outcome(obs: ObserverProcess, name: str) -> float:
    return metric(obs.url, "observer_otel_genai_spans_total", outcome=name)


def test_instrumented_calls_land_as_samples_of_their_version(observer: ObserverProcess,
                                                             fleet: dict[str, str]) -> None:
    answered = run_app(observer, fleet, n=15)
    assert answered == 30
    wait_until(lambda: len(stored(observer, "stable")) + len(stored(observer, "canary")) == 30, timeout=20)
    assert outcome(observer, "stored") == 30  # otel_genai_samples_landed_ratio = 30 / 30
    samples = stored(observer, "stable") + stored(observer, "canary")
    assert {s["source"] for s in samples} == {"otel"}
    for s in samples:
        assert "@example.com" not in s["prompt"] and "<EMAIL>" in s["prompt"]
        assert s["prompt"].startswith("system: You answer support questions briefly.")
        assert s["output"] and s["latency_s"] is not None and s["template_hash"] and s["sampling_hash"]
    plain = [s for s in samples if s["output_tokens"] is not None]
    assert len(plain) >= 20 and all(s["finish_reason"] for s in plain)  # streamed spans carry no usage


def test_what_cannot_be_a_sample_is_counted_and_never_a_label(observer: ObserverProcess,
                                                              fleet: dict[str, str]) -> None:
    assert run_app(observer, fleet, n=3, content="false") == 6  # content capture off: spans without messages
    wait_until(lambda: outcome(observer, "no_content") == 6, timeout=20)

    def span(model: str, **attrs: Any) -> dict[str, Any]:
        base = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model, "x.unknown.attribute": "kept out",
                "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant",
                                                       "parts": [{"type": "text", "content": "hello"}]}])}
        base.update(attrs)
        return {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "name": f"chat {model}",
                "startTimeUnixNano": str(time.time_ns() - 10**9), "endTimeUnixNano": str(time.time_ns()),
                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in base.items()]}

    export = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [
        span("sim-never-configured"), span("sim-stable", **{"gen_ai.output.messages": "{not json"}),
        span("sim-stable")]}]}]}
    resp = httpx.post(observer.url + "/v1/traces", json=export, timeout=10,
                      headers={"authorization": f"Bearer {TOKEN}"})
    assert resp.status_code == 200
    assert (outcome(observer, "unknown_version"), outcome(observer, "unreadable"), outcome(observer, "stored")) \
        == (1, 1, 1)
    huge = httpx.post(observer.url + "/v1/traces", content=b"x" * 300_000, timeout=10,
                      headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/x-protobuf"})
    assert huge.status_code == 413
    assert "sim-never-configured" not in observer.get("/metrics").text
    assert [s["output"] for s in stored(observer, "stable")] == ["hello"]
