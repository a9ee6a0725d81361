"""Regression tests for issue #21 (hostile input): the items fixed so far, each failing on the old main."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from observer.collect.scraper import redact_url
from observer.config.spec import ObserverConfig
from observer.errors import StoreError
from observer.export import errors
from observer.sample.capture import Capture
from observer.sample.ingest import ingest_router
from observer.sample.metrics import SamplingMetrics
from observer.sample.pipeline import RemoteSink, SamplePipeline, StoreSink
from observer.sample.redact import Redactor
from observer.store.base import SampleRecord
from observer.store.sqlite import SqliteStore
from observer.wiring.runtime import resolve_auth_token
from tests.support.observer_proc import run_observer


@pytest.mark.parametrize(("url", "shown"), [
    ("https://admin:hunter2@host:8443/metrics?token=abc", "https://***@host:8443/metrics?***"),
    ("http://10.0.0.5:8000/metrics", "http://10.0.0.5:8000/metrics"),
    ("http://user@[::1]:9400/metrics#frag", "http://***@[::1]:9400/metrics"),
    ("http://host/metrics?", "http://host/metrics"),
], ids=["userinfo-and-query", "plain", "ipv6-user-fragment", "empty-query"])
def test_urls_are_redacted_for_display(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_target_credentials_never_reach_metrics_or_the_targets_api() -> None:
    """Item 11: a target URL with credentials appeared verbatim in /metrics labels and /api/v1/targets."""
    secret = "http://admin:hunter2@127.0.0.1:9/metrics?token=t0psecret"
    cfg = ObserverConfig.model_validate({"fleet": {"versions": [{"name": "stable", "vllm": [secret]}]},
                                         "scrape": {"interval_seconds": 3600, "timeout_seconds": 1}})
    with run_observer(cfg, areas=["scrape"]) as proc:
        proc.wait_ready()
        targets = proc.get("/api/v1/targets").text
        metrics = proc.get("/metrics").text
    for text in (targets, metrics):
        assert "127.0.0.1:9/metrics" in text  # the target is still shown
        assert "hunter2" not in text and "t0psecret" not in text and "admin" not in text


def test_a_token_read_with_a_trailing_newline_still_matches() -> None:
    """Item 12 (part): a token from a file or Secret ends in a newline; it used to lock every client out."""
    cfg = ObserverConfig.model_validate({})
    assert resolve_auth_token(cfg, environ={"OBSERVER_AUTH_TOKEN": "s3cret\n"}) == "s3cret"
    assert resolve_auth_token(cfg, environ={"OBSERVER_AUTH_TOKEN": "  \n"}) is None


async def test_deeply_nested_json_is_a_400_not_a_500(tmp_path: Path) -> None:
    """Item 2: JSON nested 3,000 levels deep gave a 500 in the ingest handler."""
    store = SqliteStore(tmp_path / "s.db")
    app = FastAPI()
    errors.install(app)
    app.include_router(ingest_router(store=store, metrics=SamplingMetrics(), redactor=None, versions={"stable"},
                                     guard=lambda: None, max_request_bytes=1 << 20, max_batch_samples=1000,
                                     clock=lambda: 1.0))
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            for depth in (3000, 100_000):
                body = "[" * depth + "]" * depth
                r = await client.post("/api/v1/samples", content=body,
                                      headers={"Content-Type": "application/json"})
                assert r.status_code == 400, (depth, r.status_code, r.text[:200])
                assert "invalid_json" in r.text
    finally:
        store.close()


# --- item 1: unbounded numbers wedged the store -----------------------------------------------------

def _ingest_app(store: SqliteStore, metrics: SamplingMetrics, redactor: Redactor | None = None) -> FastAPI:
    app = FastAPI()
    errors.install(app)
    app.include_router(ingest_router(store=store, metrics=metrics, redactor=redactor, versions={"stable"},
                                     guard=lambda: None, max_request_bytes=1 << 22, max_batch_samples=1000,
                                     clock=lambda: 1_700_000_000.0))
    return app


def _sample(**kw: Any) -> dict[str, Any]:
    return {"version": "stable", "prompt": "q", "output": "a", **kw}


@pytest.mark.parametrize(("field", "value"), [
    ("prompt_tokens", 2**63), ("output_tokens", 10**4000), ("ts", 1e308), ("latency_s", 1e300),
    ("ttft_s", 1e20), ("ts", 1_700_000_000.0 + 7 * 86_400),
], ids=["tokens-2^63", "tokens-10^4000", "ts-1e308", "latency-huge", "ttft-huge", "ts-a-week-ahead"])
async def test_out_of_range_numbers_are_refused_naming_the_field(tmp_path: Path, field: str, value: Any) -> None:
    store = SqliteStore(tmp_path / "s.db")
    metrics = SamplingMetrics()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_ingest_app(store, metrics)),
                                     base_url="http://t") as client:
            body = json.dumps({"samples": [_sample(), _sample(**{field: value})]})
            r = await client.post("/api/v1/samples", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 400, r.text
            assert r.json()["field"] == f"samples.1.{field}"
            # Nothing of the refused batch is stored, nothing is left open, and the next batch from anyone
            # goes through at once.
            ok = await client.post("/api/v1/samples", json={"samples": [_sample(), _sample()]})
            assert ok.status_code == 200, ok.text
            rows = (await client.get("/api/v1/samples", params={"version": "stable"})).json()["samples"]
            assert len(rows) == 2
    finally:
        store.close()


def test_any_exception_inside_a_transaction_rolls_it_back(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        with pytest.raises(StoreError, match="could not store"):
            store.add([SampleRecord(version="stable", prompt="q", output="a", ts=1.0, prompt_tokens=2**63)])
        assert not store._db.in_transaction  # the write lock is free: another writer is not "locked"
        other = sqlite3.connect(tmp_path / "s.db", timeout=0.1)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        finally:
            other.close()
        assert store.add([SampleRecord(version="stable", prompt="q", output="a", ts=1.0)]) != []
        assert store.count() == 1
    finally:
        store.close()


async def test_every_seen_sample_is_stored_or_dropped_when_the_store_breaks(tmp_path: Path) -> None:
    class Broken(SqliteStore):
        def add(self, samples: Any) -> list[int]:
            raise OverflowError("Python int too large to convert to SQLite INTEGER")

    store = Broken(tmp_path / "s.db")
    metrics = SamplingMetrics()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_ingest_app(store, metrics)),
                                     base_url="http://t") as client:
            r = await client.post("/api/v1/samples", json={"samples": [_sample() for _ in range(5)]})
        assert r.status_code == 503, r.text
    finally:
        store.close()
    seen = sum(n for (v, _), n in metrics.seen.items() if v == "stable")
    assert seen == 5 and metrics.dropped[("stable", "store_error")] == 5


# --- item 13: model and tenant_tier were stored unredacted ---------------------------------------------

async def test_model_and_tenant_tier_are_redacted(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        app = _ingest_app(store, SamplingMetrics(), Redactor.build())
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            r = await client.post("/api/v1/samples", json={"samples": [
                _sample(model="jane.doe@example.com", tenant_tier="4111 1111 1111 1111")]})
            assert r.status_code == 200, r.text
        row = store.samples("stable")[0]
        assert "jane.doe" not in (row.model or "") and "4111" not in (row.tenant_tier or "")
        assert row.model == "<EMAIL>"
    finally:
        store.close()


# --- items 3 and 4: one bad sample lost its neighbours -------------------------------------------------

def _capture(i: int, text: str) -> Capture:
    body = json.dumps({"model": "m", "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]}).encode()
    return Capture(version="stable", kind="completion", request=json.dumps({"prompt": f"p{i}"}).encode(),
                   response=body, content_type="application/json", ts=100.0 + i, ttft_s=None, latency_s=0.1)


def _pipeline(sink: Any) -> SamplePipeline:
    return SamplePipeline(sink=sink, metrics=SamplingMetrics(), redactor=None, fraction=lambda v: 1.0,
                          capacity=1000, window_seconds=1.0, seed=0, queue_size=1000, batch_size=100)


def test_a_lone_surrogate_drops_only_its_own_sample(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        p = _pipeline(StoreSink(store))
        batch = [_capture(i, "fine" if i != 7 else "broken \ud83d emoji") for i in range(31)]
        stored, dropped, _ = p._convert_and_write(batch)
        assert len(stored) == 30 and dropped == [("stable", "invalid_text")]
        assert store.count() == 30
    finally:
        store.close()


class _IngestSim:
    """A loopback ingest with a body limit: 413 over it, 400 for a sample whose output is 'poison'."""

    def __init__(self, limit: int) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self
        self.accepted: list[str] = []
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers["Content-Length"])
                body = self.rfile.read(n)
                outer.requests += 1
                samples = json.loads(body)["samples"]
                status = 413 if n > limit else 400 if any(s["output"] == "poison" for s in samples) else 200
                if status == 200:
                    outer.accepted.extend(s["output"] for s in samples)
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def test_sidecar_batches_are_split_to_fit_the_ingest_limit() -> None:
    """Item 4: eight 700 KB replies and 20 small ones made a 5.6 MB batch; the ingest's 413 lost all 28."""
    ingest = _IngestSim(limit=4 * 1024 * 1024)
    sink = RemoteSink(ingest.url, token=None, max_request_bytes=4 * 1024 * 1024)
    try:
        p = _pipeline(sink)
        big = "x" * 700_000
        batch = [_capture(i, big if i < 8 else f"small {i}") for i in range(28)]
        batch.append(_capture(99, "y" * 5_000_000))  # larger than the limit alone
        batch.append(_capture(98, "poison"))  # the ingest refuses this one
        stored, dropped, _ = p._convert_and_write(batch)
        assert len(stored) == 28 and len(ingest.accepted) == 28
        assert sorted(dropped) == [("stable", "rejected"), ("stable", "too_large")]
    finally:
        sink.close()
        ingest.close()


def test_an_ingest_outage_fails_the_batch_once_not_per_sample() -> None:
    waits: list[float] = []
    sink = RemoteSink("http://127.0.0.1:9", token=None, timeout_seconds=1.0, sleep=waits.append)
    try:
        p = _pipeline(sink)
        stored, dropped, _ = p._convert_and_write([_capture(i, "fine") for i in range(50)])
        assert stored == [] and dropped == [("stable", "store_error")] * 50
        assert waits == [0.5, 1.0, 2.0]  # retried 3 times with back-off before giving up
    finally:
        sink.close()


def test_a_retry_after_a_lost_answer_is_stored_once() -> None:
    """The ingest commits the batch, but its answer is lost (here: a 503 after the commit, as when the
    connection drops on the way back). The sidecar retries with the same Idempotency-Key and the ingest
    answers the stored ids instead of storing the batch again."""

    committed: dict[str, list[int]] = {}
    keys: list[str] = []
    rows: list[bytes] = []

    def ingest(request: httpx.Request) -> httpx.Response:
        key = request.headers["idempotency-key"]
        keys.append(key)
        if key in committed:
            return httpx.Response(200, json={"accepted": len(committed[key]), "ids": committed[key]})
        n = len(json.loads(request.content)["samples"])
        committed[key] = list(range(len(rows), len(rows) + n))
        rows.extend([request.content] * n)
        return httpx.Response(503, headers={"Retry-After": "2"}, json={"detail": "answer lost"})

    waits: list[float] = []
    sink = RemoteSink("http://ingest.test", token=None, sleep=waits.append, transport=httpx.MockTransport(ingest))
    try:
        stored, dropped, _ = _pipeline(sink)._convert_and_write([_capture(i, "fine") for i in range(5)])
        assert len(stored) == 5 and dropped == []
        assert len(rows) == 5 and len(keys) == 2 and keys[0] == keys[1]
        assert waits == [2.0]  # the answer's Retry-After
    finally:
        sink.close()


# --- item 12: private routes served to anyone when no token was set -----------------------------------

@pytest.mark.parametrize(("server", "status"), [({}, 503), ({"auth": {"mode": "none"}}, 200),
                                                ({"auth_token": "t"}, 401)],
                         ids=["no-token-fails-closed", "explicit-mode-none", "token-required"])
def test_private_routes_fail_closed_without_a_token(tmp_path: Path, server: dict[str, Any], status: int,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("OBSERVER_AUTH_TOKEN", raising=False)
    cfg = ObserverConfig.model_validate({"fleet": {"versions": [{"name": "stable"}]}, "server": server,
                                         "sampling": {"store": {"path": str(tmp_path / "s.db")}}})
    with caplog.at_level("WARNING", logger="observer"), run_observer(cfg, areas=["sample"]) as proc:
        r = proc.get("/api/v1/samples", params={"version": "stable"})
        assert r.status_code == status, r.text
        if status == 503:
            assert "OBSERVER_AUTH_TOKEN" in r.json()["detail"]
        assert proc.get("/metrics").status_code == 200  # /metrics and the probes stay open
    logged = " ".join(rec.getMessage() for rec in caplog.records)
    if server.get("auth"):
        assert "WITHOUT authentication" in logged
    elif not server:
        assert "no bearer token configured" in logged


# --- smaller: a keep-alive connection the target closes as it is reused ---------------------------------

async def test_a_scrape_on_a_connection_the_peer_just_closed_is_retried_once() -> None:
    """The simulator's DCGM endpoint (like some exporters) closes idle keep-alive connections at exactly
    the scrape interval; the reused connection then fails with no answer. One retry on a fresh one."""
    import asyncio

    from observer.collect.dcgm import parse_dcgm
    from observer.collect.scraper import Scraper, Target, TargetKind
    from observer.collect.vllm import parse_vllm

    fixture = (Path(__file__).resolve().parents[1] / "fixtures" / "vllm" /
               "generated_vllm-0.33.0_single-engine.prom").read_bytes()
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        served = 0
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            if served == 1:  # the second request on this connection: hang up without answering
                break
            served += 1
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: "
                         + str(len(fixture)).encode() + b"\r\n\r\n" + fixture)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient() as client:
            scraper = Scraper(client=client, parse_vllm=parse_vllm, parse_dcgm=parse_dcgm, timeout_seconds=5)
            target = Target(TargetKind.VLLM, f"http://127.0.0.1:{port}/metrics")
            results = [await scraper.scrape(target) for _ in range(3)]
    finally:
        server.close()
        await server.wait_closed()
    assert [r.reason for r in results] == [None, None, None], [r.message for r in results]
    assert connections >= 2


def test_serve_states_a_build_time_config_error_in_one_line(tmp_path: Path) -> None:
    """`serve` printed a Python traceback for a config error that `check-config` states in one line."""
    from typer.testing import CliRunner

    from observer.cli.main import app

    cfg = tmp_path / "observer.yaml"
    cfg.write_text("fleet: {versions: [{name: stable, openai: 'http://127.0.0.1:9/v1'}]}\n"
                   f"sampling: {{store: {{path: '{tmp_path / 's.db'}'}}}}\n"
                   "quality: {golden_sets: [no-such-set]}\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(cfg)])
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert "no-such-set" in out and "Traceback" not in result.output


async def test_the_ingest_answers_a_repeated_idempotency_key_with_the_stored_ids(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        app = _ingest_app(store, SamplingMetrics())
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            body = {"samples": [_sample(), _sample(output="b")]}
            first = await client.post("/api/v1/samples", json=body, headers={"Idempotency-Key": "abc"})
            again = await client.post("/api/v1/samples", json=body, headers={"Idempotency-Key": "abc"})
            assert first.status_code == again.status_code == 200
            assert again.json()["ids"] == first.json()["ids"] and store.count() == 2
            plain = await client.post("/api/v1/samples", json=body)  # no key: a new batch each time
            assert plain.status_code == 200 and store.count() == 4
            bad = await client.post("/api/v1/samples", json=body, headers={"Idempotency-Key": "a b"})
            assert bad.status_code == 400 and "Idempotency-Key" in bad.text and store.count() == 4
    finally:
        store.close()
