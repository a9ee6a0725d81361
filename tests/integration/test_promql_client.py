"""The PromQL client against a scripted Mimir-like API on loopback (a stand-in, not Mimir): tenant header,
rotated bearer token, retries on 503, warnings (Thanos' partial response) as errors, timeouts, split ranges;
and through the canary judge, a partial answer is *nodata with the reason*, never data."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from observer.collect.promql import PromQLClient, PromQLError
from observer.config.prometheus import PrometheusClientSpec
from tests.support.prom import free_port

pytestmark = pytest.mark.integration


@dataclass
class FakeMimir:
    """Answers /api/v1/query(_range) for tenant `team-a` with bearer `token`; faults are scripted."""

    token: str = "t1"
    fail_next: int = 0          # answer 503 this many times first
    warnings: list[str] = field(default_factory=list)
    delay: float = 0.0
    requests: list[dict[str, str]] = field(default_factory=list)
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, h: BaseHTTPRequestHandler) -> tuple[int, dict[str, Any] | str]:
        u = urlsplit(h.path)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        self.requests.append({**q, "tenant": h.headers.get("X-Scope-OrgID", ""),
                              "auth": h.headers.get("Authorization", "")})
        if self.delay:
            time.sleep(self.delay)
        if h.headers.get("X-Scope-OrgID") != "team-a":
            return 401, "no org id\n"
        if h.headers.get("Authorization") != f"Bearer {self.token}":
            return 401, "authentication failed\n"
        if self.fail_next:
            self.fail_next -= 1
            return 503, {"status": "error", "error": "ingesters unavailable"}
        body: dict[str, Any] = {"status": "success"}
        if self.warnings:
            body["warnings"] = self.warnings
        if u.path.endswith("/query_range"):
            start, end, step = float(q["start"]), float(q["end"]), float(q["step"])
            n = round((end - start) / step) + 1
            values = [[start + i * step, str(start + i * step)] for i in range(n)]
            body["data"] = {"resultType": "matrix", "result": [{"metric": {"v": "a"}, "values": values}]}
        else:
            body["data"] = {"resultType": "vector", "result": [{"metric": {}, "value": [q["time"], "1"]}]}
        return 200, body

    @contextmanager
    def running(self) -> Iterator[FakeMimir]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code, body = api.answer(self)
                data = (json.dumps(body) if isinstance(body, dict) else body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        t.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()


async def _noop(_: float) -> None:
    return None


def _client(api: FakeMimir, tmp: Path, **spec: Any) -> tuple[PromQLClient, Path]:
    token = tmp / "token"
    token.write_text(api.token + "\n")
    s = PrometheusClientSpec(headers={"X-Scope-OrgID": "team-a"}, bearer_token_file=str(token), **spec)
    return PromQLClient(api.url, s, http=httpx.AsyncClient(), sleep=_noop), token


async def test_tenant_and_token_are_sent_and_a_rotated_token_is_picked_up(tmp_path: Path) -> None:
    with FakeMimir().running() as api:
        client, token = _client(api, tmp_path)
        assert await client.query("up", at=1.0) == [{"metric": {}, "value": ["1.000", "1"]}]
        api.token = "t2"
        token.write_text("t2")
        assert await client.query("up", at=2.0)
        assert api.requests[-1]["auth"] == "Bearer t2" and api.requests[-1]["partial_response"] == "false"


async def test_a_missing_tenant_and_bad_credentials_are_named(tmp_path: Path) -> None:
    with FakeMimir().running() as api:
        s = PrometheusClientSpec(retries=0)
        with pytest.raises(PromQLError) as e:
            await PromQLClient(api.url, s, http=httpx.AsyncClient()).query("up", at=1.0)
        assert e.value.reason == "tenant" and "X-Scope-OrgID" in str(e.value)
        client, token = _client(api, tmp_path)
        token.write_text("wrong")
        with pytest.raises(PromQLError) as e:
            await client.query("up", at=1.0)
        assert e.value.reason == "unauthorized" and "bearer_token_file" in str(e.value)


async def test_503_is_retried_with_back_off_and_then_given_up(tmp_path: Path) -> None:
    with FakeMimir(fail_next=2).running() as api:
        client, _ = _client(api, tmp_path, retries=2)
        assert await client.query("up", at=1.0)
        assert client.retried == 2
        api.fail_next = 5
        with pytest.raises(PromQLError, match=r"answered 503 \(ingesters unavailable\) after 3 attempt"):
            await client.query("up", at=1.0)


async def test_warnings_are_an_error_not_data(tmp_path: Path) -> None:
    with FakeMimir(warnings=["partial response: store gateway 10.0.0.3 unavailable"]).running() as api:
        client, _ = _client(api, tmp_path)
        with pytest.raises(PromQLError) as e:
            await client.query("up", at=1.0)
        assert e.value.reason == "warnings" and "store gateway 10.0.0.3 unavailable" in str(e.value)


async def test_a_slow_answer_times_out_with_the_knob_to_turn(tmp_path: Path) -> None:
    with FakeMimir(delay=0.5).running() as api:
        client, _ = _client(api, tmp_path, timeout_seconds=0.1, retries=1)
        with pytest.raises(PromQLError) as e:
            await client.query("up", at=1.0)
        assert e.value.reason == "timeout" and "canary.prometheus.timeout_seconds" in str(e.value)


async def test_a_long_range_is_split_and_joined_without_gaps_or_overlaps(tmp_path: Path) -> None:
    with FakeMimir().running() as api:
        client, _ = _client(api, tmp_path, max_points_per_series=100)
        (series,) = await client.query_range("x", start=1000.0, end=1000.0 + 60 * 999, step=60)
        stamps = [v[0] for v in series["values"]]
        assert stamps == [1000.0 + 60 * i for i in range(1000)]
        assert len(api.requests) == 10


async def test_the_canary_judge_says_nodata_with_the_warning_when_the_answer_is_partial(tmp_path: Path) -> None:
    from observer.analyse.canary.service import CanaryService
    from observer.analyse.canary.sources import PrometheusSource
    from observer.config import parse_config

    with FakeMimir(warnings=["partial response"]).running() as api:
        client, _ = _client(api, tmp_path)
        cfg = parse_config(f"""
fleet: {{versions: [{{name: stable, role: stable}}, {{name: canary, role: canary}}]}}
canary: {{source: prometheus, prometheus_url: "{api.url}"}}
""", environ={})
        service = CanaryService(cfg, PrometheusSource(url=api.url, http=client.http, client=client),
                                clock=time.time)
        v = await service.evaluate("canary", "stable", since=time.time() - 600)
        assert v.verdict.value == "nodata" and "warnings" in v.reason, v.reason
