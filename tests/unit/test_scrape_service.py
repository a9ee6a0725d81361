"""The scrape area inside a real running Service (uvicorn on loopback, scheduler, real HTTP targets):
faults are reported precisely while the observer keeps serving; /readyz, spans, promtool, JSON API."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from observer.config.spec import ObserverConfig
from observer.service import Service
from observer.wiring.scrape import ScrapeComponent
from tests.support.observer_proc import (
    ObserverProcess,
    Route,
    TargetServer,
    run_observer,
    scaled_exposition,
    target_server,
)
from tests.support.prom import free_port

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VLLM_033 = (FIXTURES / "vllm" / "generated_vllm-0.33.0_single-engine.prom").read_text()
DCGM = (FIXTURES / "dcgm" / "SYNTHETIC_dcgm-exporter_4.x_template_H100_k8s_Hostname.prom").read_bytes()
FAULTS = {
    "refused": None,
    "http_5xx": Route(body=b"boom", status=500),
    "timeout": Route(body=VLLM_033.encode(), delay=4.0),
    "truncated": Route(body=VLLM_033.encode(), truncate_at=5000),
    "body_too_large": Route(stream_bytes=50 * 1024 * 1024, declare_length=False),
    "content_type": Route(body=b"<html></html>\n", content_type="text/html; charset=utf-8"),
    "parse_error": Route(body=b"vllm:num_requests_running{model_name=\"m\" 1\n"),
}


class Growing:
    """A vLLM body whose counters grow by the fixture's counts per scrape; `restart()` resets them."""

    def __init__(self) -> None:
        self.k = 0

    def __call__(self) -> bytes:
        self.k += 1
        return scaled_exposition(VLLM_033, self.k).encode()

    def restart(self) -> None:
        self.k = 0


def config(vllm: dict[str, list[str]], *, dcgm: list[str] | None = None, interval: float = 3600.0,
           timeout: float = 1.0) -> ObserverConfig:
    versions = [{"name": name, "vllm": urls, "dcgm": dcgm or [],
                 "pods": [{"namespace": "llm-serving", "pod": "vllm-llama3-8b-stable-7d9f8b6c5-x2k4q"}]}
                for name, urls in vllm.items()]
    return ObserverConfig.model_validate({"fleet": {"versions": versions},
                                          "scrape": {"interval_seconds": interval, "timeout_seconds": timeout}})


def component(proc: ObserverProcess) -> ScrapeComponent:
    return next(c for c in proc.service.components if isinstance(c, ScrapeComponent))


def samples(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def find(values: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> list[float]:
    return [v for (n, ls), v in values.items() if n == name and all((k, x) in ls for k, x in labels.items())]


@pytest.fixture(scope="module")
def server() -> Iterator[TargetServer]:
    with target_server() as s:
        yield s


def test_faults_reported_precisely_while_serving(server: TargetServer, caplog: pytest.LogCaptureFixture) -> None:
    growing = Growing()
    good = server.set("/svc/good", Route(body=growing))
    urls = {reason: (server.set(f"/svc/{reason}", route) if route else f"http://127.0.0.1:{free_port()}/metrics")
            for reason, route in FAULTS.items()}
    # 2.5 s per target: generous enough that a loaded CI machine does not turn a truncated body into a
    # timeout, still well under the 4 s the `timeout` fault waits.
    cfg = config({"stable": [good], "canary": list(urls.values())}, timeout=2.5)
    caplog.set_level(logging.INFO, logger="observer")
    with run_observer(cfg, areas=["scrape"]) as proc:
        proc.wait_ready(timeout=15)
        comp = component(proc)
        assert proc.get("/healthz").status_code == 200
        for _ in range(2):
            proc.call(comp.cycle())
        values = samples(proc.get("/metrics").text)
        assert find(values, "observer_target_up", version="stable", target=good) == [1.0]
        for reason, url in urls.items():
            assert find(values, "observer_target_up", version="canary", target=url) == [0.0], reason
            errors = find(values, "observer_scrape_errors_total", target=url, reason=reason)
            assert errors == [3.0], (reason, errors)  # the start-up cycle and two more
            logged = [r.getMessage() for r in caplog.records if url in r.getMessage() and reason in r.getMessage()]
            assert len(logged) == 1, (reason, logged)  # logged when it went down, not on every cycle
        assert find(values, "observer_last_successful_scrape_timestamp_seconds", target=good)
        # counter reset mid-window: the exported running total never goes down
        before = find(values, "observer_requests_total", version="stable", finished_reason="stop")[0]
        growing.restart()
        proc.call(comp.cycle())
        after = samples(proc.get("/metrics").text)
        total = find(after, "observer_requests_total", version="stable", finished_reason="stop")[0]
        assert total == before + 80.0  # 80 `stop` requests in the fixture, counted from zero after the restart
        sig = proc.get("/api/v1/signals").json()["versions"]
        assert sig["stable"]["ttft"]["p95"] == pytest.approx(0.3125, rel=1e-9)
        assert sig["canary"]["replicas_up"] == 0 and sig["canary"]["ttft"] is None
        targets = proc.get("/api/v1/targets").json()["targets"]
        by_url = {t["url"]: t for t in targets}
        assert by_url[urls["timeout"]]["last_reason"] == "timeout" and by_url[good]["up"] is True
        assert proc.get("/healthz").status_code == 200


def test_readyz_waits_for_the_first_cycle(server: TargetServer) -> None:
    url = server.set("/ready/good", Route(body=VLLM_033.encode()))
    service = Service.build(config({"stable": [url]}), areas=["scrape"])
    comp = next(c for c in service.components if isinstance(c, ScrapeComponent))
    with TestClient(service.app) as http:
        assert http.get("/healthz").status_code == 200
        assert http.get("/readyz").status_code == 503
        http.portal.call(comp.cycle)  # type: ignore[union-attr]
        assert http.get("/readyz").json() == {"status": "ready"}
        paths = http.get("/openapi.json").json()["paths"]
        assert {"/api/v1/signals", "/api/v1/targets", "/healthz", "/readyz"} <= set(paths)
    empty = Service.build(ObserverConfig(), areas=["scrape"])  # no versions: ready after one cycle
    comp = next(c for c in empty.components if isinstance(c, ScrapeComponent))
    with TestClient(empty.app) as http:
        assert http.get("/readyz").status_code == 503
        http.portal.call(comp.cycle)  # type: ignore[union-attr]
        assert http.get("/readyz").status_code == 200
        assert http.get("/api/v1/signals").json()["versions"] == {}


def test_every_cycle_is_a_span(server: TargetServer) -> None:
    url = server.set("/span/good", Route(body=VLLM_033.encode()))
    exporter = InMemorySpanExporter()
    with run_observer(config({"stable": [url]}), areas=["scrape"], span_exporter=exporter) as proc:
        proc.wait_ready()
        proc.call(proc.service.run_job(next(j for j in proc.service.jobs() if j.name == "scrape")))
    spans = [s for s in exporter.get_finished_spans() if s.name == "job scrape"]
    assert len(spans) >= 2 and all(s.status.is_ok for s in spans)


def test_metrics_pass_promtool_and_json_is_strict(server: TargetServer) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus): run `make setup`")
    growing = Growing()
    cfg = config({"stable": [server.set("/lint/vllm", Route(body=growing))],
                  "canary": [f"http://127.0.0.1:{free_port()}/metrics"]},
                 dcgm=[server.set("/lint/dcgm", Route(body=DCGM))])
    with run_observer(cfg, areas=["scrape"]) as proc:
        proc.wait_ready()
        proc.call(component(proc).cycle())
        body = proc.get("/metrics").text
        raw = proc.get("/api/v1/signals").text
    for family in ("observer_ttft_seconds_bucket", "observer_window_ttft_seconds", "observer_gpu_utilization_ratio",
                   "observer_target_up", "observer_scrape_errors_total", "observer_build_info",
                   "observer_gpu_xid_errors_total", "observer_kv_cache_usage_ratio"):
        assert family in body, family
    assert "NaN" not in body
    check = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0 and check.stdout.strip() == "" and check.stderr.strip() == "", check

    def no_constants(c: str) -> Any:
        raise AssertionError(f"non-strict JSON constant {c}")

    doc = json.loads(raw, parse_constant=no_constants)
    assert set(doc["versions"]) == {"stable", "canary"}
    gpu = doc["versions"]["stable"]["gpu"]
    assert gpu["gpus"] == 1 and 0 < gpu["framebuffer_used_mean"] < 1
