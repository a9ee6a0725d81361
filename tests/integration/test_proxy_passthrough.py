"""The sampling proxy against a scripted upstream: byte-identical passthrough, errors, disconnects, no stuck tasks.

The upstream (tests/support/scripted_openai.py) writes raw HTTP with odd chunk boundaries, SSE comments and
keep-alives; a direct connection to it is the reference every proxied answer is compared with.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from observer.sample.metrics import SamplingMetrics
from observer.sample.pipeline import SamplePipeline, StoreSink
from observer.sample.proxy import ProxyApp, build_client, valid_traceparent
from observer.sample.redact import Redactor
from observer.sample.server import RunningServer, start_server
from observer.store.base import SampleRecord
from observer.store.sqlite import SqliteStore
from tests.support.poll import async_wait_until as wait_until
from tests.support.scripted_openai import ScriptedUpstream, reply_text

pytestmark = pytest.mark.integration

HOP = {"transfer-encoding", "connection", "keep-alive"}


@dataclass
class Rig:
    upstream: ScriptedUpstream
    proxy_url: str
    metrics: SamplingMetrics
    pipeline: SamplePipeline
    store: SqliteStore
    server: RunningServer


async def start_rig(tmp_path: Path, *, fraction: float = 1.0, sink: Any = None, queue_size: int = 1000,
                    upstream_url: str | None = None) -> tuple[Rig, httpx.AsyncClient]:
    up = ScriptedUpstream().start()
    store = SqliteStore(tmp_path / "samples.db")
    metrics = SamplingMetrics()
    pipe = SamplePipeline(sink=sink or StoreSink(store), metrics=metrics, redactor=Redactor.build(),
                          fraction=lambda v: fraction, capacity=1000, window_seconds=0.2, seed=0,
                          queue_size=queue_size)
    await pipe.start()
    client = build_client(connect_timeout=2.0, read_timeout=30.0, max_connections=100)
    app = ProxyApp(version="stable", upstream=upstream_url or up.url, client=client, metrics=metrics,
                   pipeline=pipe, ready_path="/v1/models")
    server = await start_server(app, host="127.0.0.1", port=0)
    return Rig(up, f"http://127.0.0.1:{server.port}", metrics, pipe, store, server), client


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    r, client = await start_rig(tmp_path)
    yield r
    await stop_rig(r, client)


async def stop_rig(r: Rig, client: httpx.AsyncClient) -> None:
    await r.server.stop()
    await r.pipeline.stop()
    await client.aclose()
    r.store.close()
    r.upstream.stop()


async def fetch(url: str, method: str, path: str, *, json_body: Any = None,
                headers: dict[str, str] | None = None) -> tuple[int, list[tuple[str, str]], bytes, list[bytes]]:
    async with httpx.AsyncClient(timeout=10) as c, \
            c.stream(method, url + path, json=json_body, headers=headers) as resp:
        chunks = [chunk async for chunk in resp.aiter_raw()]
        hdrs = [(k.lower(), v) for k, v in resp.headers.multi_items() if k.lower() not in HOP]
        return resp.status_code, hdrs, b"".join(chunks), chunks


async def settle(baseline: int, *, timeout: float = 5.0) -> int:
    """Wait until the loop's task count is back to `baseline`; return the final count."""
    deadline = time.monotonic() + timeout
    while len(asyncio.all_tasks()) > baseline and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return len(asyncio.all_tasks())


CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi, I am jo@example.com"}]}
CASES = [
    ("POST", "/v1/chat/completions", {**CHAT, "stream": True}),
    ("POST", "/v1/completions", {"model": "m", "prompt": "Say hi", "stream": True}),
    ("POST", "/v1/chat/completions", CHAT),
    ("POST", "/v1/completions", {"model": "m", "prompt": "Say hi"}),
    ("POST", "/v1/embeddings", {"model": "m", "input": "embed me"}),
    ("GET", "/v1/models", None),
]


@pytest.mark.parametrize(("method", "path", "body"), CASES,
                         ids=["chat-stream", "completion-stream", "chat-json", "completion-json", "embeddings",
                              "models"])
async def test_passthrough_is_byte_identical(rig: Rig, method: str, path: str, body: Any) -> None:
    direct = await fetch(rig.upstream.url, method, path, json_body=body)
    proxied = await fetch(rig.proxy_url, method, path, json_body=body)
    assert proxied[0] == direct[0] == 200
    assert proxied[1] == direct[1]  # same headers, same order, hop-by-hop aside
    assert proxied[2] == direct[2]  # same bytes
    if body and body.get("stream"):
        assert b": keep-alive" in proxied[2] and b"\r\n\r\n" in proxied[2]  # comments and CRLF survived


async def test_stream_chunks_are_not_buffered(rig: Rig) -> None:
    async with httpx.AsyncClient(timeout=10) as c, c.stream(
            "POST", rig.proxy_url + "/v1/chat/completions", json={**CHAT, "stream": True},
            headers={"x-script": "gated"}) as resp:
        chunks = resp.aiter_raw()
        first = await asyncio.wait_for(chunks.__anext__(), timeout=5)  # arrives while the upstream waits
        assert b"data:" in first
        rig.upstream.release()
        rest = b"".join([c async for c in chunks])
    assert rest.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("code", [400, 404, 429, 500, 503])
async def test_upstream_errors_pass_through_unchanged(rig: Rig, code: int) -> None:
    headers = {"x-script": f"status:{code}"}
    direct = await fetch(rig.upstream.url, "POST", "/v1/completions", json_body={"prompt": "x"}, headers=headers)
    proxied = await fetch(rig.proxy_url, "POST", "/v1/completions", json_body={"prompt": "x"}, headers=headers)
    assert proxied[:3] == direct[:3] and proxied[0] == code
    await wait_until(lambda: rig.metrics.dropped[("stable", "upstream_status")] >= 1)
    assert rig.metrics.requests[("stable", str(code))] == 1


async def read_until_error(url: str) -> tuple[bytes, type[BaseException] | None]:
    got = b""
    async with httpx.AsyncClient(timeout=10) as c:
        try:
            async with c.stream("POST", url + "/v1/completions", json={"prompt": "x", "stream": True},
                                headers={"x-script": "abort"}) as resp:
                async for chunk in resp.aiter_raw():
                    got += chunk
        except httpx.HTTPError as e:
            return got, type(e)
    return got, None


async def test_upstream_disconnect_mid_stream_reaches_the_client_the_same_way(rig: Rig) -> None:
    baseline = len(asyncio.all_tasks())
    direct_bytes, direct_error = await read_until_error(rig.upstream.url)
    proxied_bytes, proxied_error = await read_until_error(rig.proxy_url)
    assert direct_error is httpx.RemoteProtocolError
    assert proxied_error is direct_error  # an incomplete chunked body, not a clean end of stream
    assert proxied_bytes == direct_bytes and proxied_bytes
    assert await settle(baseline) <= baseline
    await wait_until(lambda: rig.metrics.dropped[("stable", "incomplete")] == 1)


async def test_client_disconnect_cancels_the_upstream_request(rig: Rig) -> None:
    baseline = len(asyncio.all_tasks())
    async with httpx.AsyncClient(timeout=10) as c, c.stream(
            "POST", rig.proxy_url + "/v1/chat/completions", json={**CHAT, "stream": True},
            headers={"x-script": "slow"}) as resp:
        seen = 0
        async for _ in resp.aiter_raw():
            seen += 1
            if seen == 3:
                break  # leaving the block closes the connection mid-stream
    await wait_until(lambda: rig.upstream.disconnects == 1)
    assert rig.upstream.completed == 0
    assert await settle(baseline) <= baseline
    await wait_until(lambda: rig.metrics.dropped[("stable", "incomplete")] == 1)


async def test_client_disconnect_before_the_reply_cancels_upstream(rig: Rig) -> None:
    baseline = len(asyncio.all_tasks())
    async with httpx.AsyncClient(timeout=0.3) as c:
        with pytest.raises(httpx.ReadTimeout):
            await c.post(rig.proxy_url + "/v1/completions", json={"prompt": "x"}, headers={"x-script": "hang"})
    await wait_until(lambda: rig.upstream.disconnects == 1)
    assert await settle(baseline) <= baseline
    await wait_until(lambda: rig.metrics.requests[("stable", "499")] == 1)


async def test_traceparent_is_propagated_or_created(rig: Rig) -> None:
    incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    await fetch(rig.proxy_url, "POST", "/v1/completions", json_body={"prompt": "a"},
                headers={"traceparent": incoming, "tracestate": "k=v"})
    await fetch(rig.proxy_url, "POST", "/v1/completions", json_body={"prompt": "b"})
    await fetch(rig.proxy_url, "POST", "/v1/completions", json_body={"prompt": "c"},
                headers={"traceparent": "garbage", "tracestate": "k=v"})
    first, second, third = rig.upstream.requests[-3:]
    assert first.headers["traceparent"] == incoming and first.headers["tracestate"] == "k=v"
    assert valid_traceparent(second.headers["traceparent"])
    assert valid_traceparent(third.headers["traceparent"]) and "tracestate" not in third.headers
    assert second.headers["traceparent"].split("-")[1] != third.headers["traceparent"].split("-")[1]
    # each sample keeps the context that went upstream, so its scores can be linked to the request's trace
    await wait_until(lambda: rig.metrics.stored["stable"] == 3)
    stored = {s.prompt: s.traceparent for s in rig.store.samples("stable")}
    assert stored == {"a": incoming, "b": second.headers["traceparent"], "c": third.headers["traceparent"]}


async def test_request_headers_pass_except_hop_by_hop(rig: Rig) -> None:
    await fetch(rig.proxy_url, "POST", "/v1/completions", json_body={"prompt": "h"},
                headers={"Authorization": "Bearer user-key", "X-Custom": "1", "Connection": "x-private",
                         "X-Private": "secret", "TE": "trailers", "Proxy-Authorization": "Basic x"})
    seen = rig.upstream.requests[-1].headers
    assert seen["authorization"] == "Bearer user-key" and seen["x-custom"] == "1"
    assert "x-private" not in seen and "te" not in seen and "proxy-authorization" not in seen
    assert "python-httpx" in seen["user-agent"]  # the caller's own agent (also httpx here), not a second one
    assert list(seen).count("user-agent") == 1


async def test_sampled_replies_are_stored_redacted(rig: Rig) -> None:
    await fetch(rig.proxy_url, "POST", "/v1/chat/completions", json_body={**CHAT, "stream": True})
    await fetch(rig.proxy_url, "POST", "/v1/completions", json_body={"model": "m", "prompt": "Say hi"})
    await fetch(rig.proxy_url, "POST", "/v1/embeddings", json_body={"model": "m", "input": "e"})
    await wait_until(lambda: rig.metrics.stored["stable"] == 2)  # counted after the commit returns
    by_prompt = {s.prompt: s for s in rig.store.samples("stable")}
    chat = by_prompt["Hi, I am <EMAIL>"]
    assert chat.output == reply_text("Hi, I am jo@example.com") and chat.source == "proxy"
    assert chat.finish_reason == "stop" and chat.ttft_s is not None and chat.latency_s is not None
    assert chat.latency_s >= chat.ttft_s
    assert by_prompt["Say hi"].output == reply_text("Say hi")
    assert rig.metrics.seen[("stable", "proxy")] == 2  # embeddings are forwarded, not sampled
    assert rig.metrics.redactions["email"] == 1


class BrokenSink:
    def write(self, records: Sequence[SampleRecord]) -> None:
        raise OSError("disk full")


@pytest.mark.parametrize("failure", ["sink", "queue"])
async def test_sampling_failures_never_touch_the_request(tmp_path: Path, failure: str) -> None:
    r, client = await start_rig(tmp_path, sink=BrokenSink() if failure == "sink" else None,
                                queue_size=1 if failure == "queue" else 1000)
    try:
        if failure == "queue":
            await r.pipeline.stop()  # no writer any more ...
            r.pipeline.queue.put_nowait(None)  # ... and the queue (size 1) is full
        body = {**CHAT, "stream": True}
        direct = await fetch(r.upstream.url, "POST", "/v1/chat/completions", json_body=body)
        for _ in range(5):
            proxied = await fetch(r.proxy_url, "POST", "/v1/chat/completions", json_body=body)
            assert proxied[:3] == direct[:3]
            await asyncio.sleep(0.1)  # let windows close
        if failure == "sink":
            await wait_until(lambda: r.metrics.dropped[("stable", "store_error")] >= 4, message=lambda: repr(r.metrics))
            assert r.metrics.stored["stable"] == 0
        else:
            await r.pipeline.stop(drain_seconds=0)  # flushes the open windows into the full queue
            assert r.metrics.dropped[("stable", "queue_full")] == 5
            assert r.metrics.stored["stable"] == 0
    finally:
        await stop_rig(r, client)


async def test_fraction_zero_captures_nothing(tmp_path: Path) -> None:
    r, client = await start_rig(tmp_path, fraction=0.0)
    try:
        for _ in range(5):
            await fetch(r.proxy_url, "POST", "/v1/completions", json_body={"prompt": "x"})
        assert r.metrics.seen[("stable", "proxy")] == 5 and not r.metrics.sampled
    finally:
        await stop_rig(r, client)


async def test_unreachable_upstream_is_a_502_and_health_endpoints(tmp_path: Path) -> None:
    from tests.support.prom import free_port

    r, client = await start_rig(tmp_path, upstream_url=f"http://127.0.0.1:{free_port()}")
    try:
        status, _, body, _ = await fetch(r.proxy_url, "POST", "/v1/completions", json_body={"prompt": "x"})
        assert status == 502 and b"upstream unreachable" in body
        assert (await fetch(r.proxy_url, "GET", "/healthz"))[0] == 200
        assert (await fetch(r.proxy_url, "GET", "/readyz"))[0] == 503
    finally:
        await stop_rig(r, client)
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    r, client = await start_rig(healthy)
    try:
        assert (await fetch(r.proxy_url, "GET", "/readyz"))[0] == 200
    finally:
        await stop_rig(r, client)


async def test_shadow_replays_pass_through_but_stay_out_of_the_serving_slis(rig: Rig) -> None:
    """X-Observer-Shadow (the observer's own shadow replays, #16): forwarded unchanged, never sampled, and
    counted only in observer_proxy_shadow_requests, never in the request counts or latency histograms."""
    body = {**CHAT, "stream": True}
    direct = await fetch(rig.upstream.url, "POST", "/v1/chat/completions", json_body=body)
    for _ in range(3):
        shadowed = await fetch(rig.proxy_url, "POST", "/v1/chat/completions", json_body=body,
                               headers={"X-Observer-Shadow": "1"})
        assert shadowed[2] == direct[2]
    assert rig.upstream.requests[-1].headers.get("x-observer-shadow") == "1"  # the tag reaches the upstream
    await asyncio.sleep(0.5)
    assert rig.metrics.shadow[("stable", "200")] == 3
    assert sum(rig.metrics.requests.values()) == 0
    assert not rig.metrics.ttft and not rig.metrics.e2e and not rig.metrics.added
    assert rig.store.count("stable") == 0
    await fetch(rig.proxy_url, "POST", "/v1/chat/completions", json_body=body)  # a user request still counts
    await wait_until(lambda: rig.store.count("stable") == 1, timeout=5)
    assert rig.metrics.requests[("stable", "200")] == 1
