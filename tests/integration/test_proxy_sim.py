"""The sampling proxy in front of the project's simulator (tests/support/sim.py, real HTTP on loopback).

The simulator's replies carry fresh ids and timings, so two calls never match byte for byte. A recording
TCP tap between proxy and simulator therefore captures exactly what the simulator sent on the wire for
each proxied request; what the client receives through the proxy must equal it byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from observer.sample.metrics import SamplingMetrics
from observer.sample.pipeline import SamplePipeline, StoreSink
from observer.sample.proxy import HOP_BY_HOP, ProxyApp, build_client
from observer.sample.redact import Redactor
from observer.sample.server import start_server
from observer.store.sqlite import SqliteStore
from observer_dev.relay import Relay
from tests.support.sim import running_fleet

pytestmark = pytest.mark.integration


def parse_response(raw: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, end-to-end headers and de-chunked body of one HTTP/1.1 response on the wire."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = [(k.strip().lower(), v.strip()) for k, v in (ln.split(":", 1) for ln in lines[1:])]
    if ("transfer-encoding", "chunked") in headers:
        body = bytearray()
        while True:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            body += rest[:size]
            rest = rest[size + 2:]
        return status, headers, bytes(body)
    length = int(dict(headers).get("content-length", "0"))
    return status, headers, rest[:length]


def end_to_end(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if k.encode() not in HOP_BY_HOP]


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[int, str]]:
    with running_fleet(profiles={"stable": "idle", "canary": "idle"}, seed=3) as (handle, _config):
        url = handle.openai_url("stable")
        port = int(url.split(":")[2].split("/")[0])
        yield port, url


def deadline_wait(cond: object, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > end:
            raise TimeoutError("condition not met")
        time.sleep(0.02)


BODIES = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me about call "
                                                                                        "555-123-4567"}],
                              "stream": True, "max_tokens": 24}),
    ("/v1/completions", {"prompt": "Once upon a time", "stream": True, "max_tokens": 16}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}],
                              "max_tokens": 16}),
]


async def _sampling(tmp_path: Path) -> tuple[SqliteStore, SamplingMetrics, SamplePipeline, httpx.AsyncClient]:
    """A started pipeline sampling everything into a fresh store, and the proxy's upstream client."""
    store = SqliteStore(tmp_path / "s.db")
    metrics = SamplingMetrics()
    pipe = SamplePipeline(sink=StoreSink(store), metrics=metrics, redactor=Redactor.build(),
                          fraction=lambda v: 1.0, capacity=100, window_seconds=0.2)
    await pipe.start()
    return store, metrics, pipe, build_client(connect_timeout=2, read_timeout=30, max_connections=10)


async def test_proxy_matches_the_simulator_byte_for_byte(fleet: tuple[int, str], tmp_path: Path) -> None:
    sim_port, sim_url = fleet
    tap = Relay("127.0.0.1", sim_port, record=True)  # records every byte the upstream sends back
    store, metrics, pipe, client = await _sampling(tmp_path)
    app = ProxyApp(version="stable", upstream=f"http://127.0.0.1:{tap.port}", client=client, metrics=metrics,
                   pipeline=pipe)
    server = await start_server(app, host="127.0.0.1", port=0)
    baseline = len(asyncio.all_tasks())
    try:
        async with httpx.AsyncClient(timeout=30) as c:
            # GET /v1/models is deterministic: compare with a direct call too.
            direct = await c.get(sim_url + "/models")
            via = await c.get(f"http://127.0.0.1:{server.port}/v1/models")
            assert via.status_code == direct.status_code == 200 and via.content == direct.content
            tap.take()
            for path, body in BODIES:
                async with c.stream("POST", f"http://127.0.0.1:{server.port}{path}", json=body) as resp:
                    chunks = [chunk async for chunk in resp.aiter_raw()]
                    got_headers = end_to_end([(k.lower(), v) for k, v in resp.headers.multi_items()])
                status, sent_headers, sent_body = parse_response(tap.take())
                assert resp.status_code == status == 200
                assert b"".join(chunks) == sent_body and sent_body
                assert got_headers == end_to_end(sent_headers)
                if body.get("stream"):
                    assert len(chunks) > 1  # streamed through, not collected into one body
        await asyncio.to_thread(deadline_wait, lambda: metrics.stored["stable"] == len(BODIES))
        prompts = {s.prompt for s in store.samples("stable")}
        assert "Tell me about call <PHONE>" in prompts and "Once upon a time" in prompts
        assert all(s.output for s in store.samples("stable"))
    finally:
        await server.stop()
        await pipe.stop()
        await client.aclose()
        store.close()
        tap.close()
    deadline = time.monotonic() + 5
    while len(asyncio.all_tasks()) > baseline and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert len(asyncio.all_tasks()) <= baseline


@contextlib.asynccontextmanager
async def plain_proxy(sim_url: str) -> AsyncIterator[tuple[SamplingMetrics, str]]:
    """A proxy of version `stable` in front of the simulator, sampling nothing: its metrics and its /v1 URL."""
    metrics = SamplingMetrics()
    client = build_client(connect_timeout=2, read_timeout=30, max_connections=10)
    app = ProxyApp(version="stable", upstream=sim_url.removesuffix("/v1"), client=client, metrics=metrics,
                   pipeline=None)
    server = await start_server(app, host="127.0.0.1", port=0)
    try:
        yield metrics, f"http://127.0.0.1:{server.port}/v1"
    finally:
        await server.stop()
        await client.aclose()


async def test_simulator_errors_pass_through(fleet: tuple[int, str], tmp_path: Path) -> None:
    _sim_port, sim_url = fleet
    async with plain_proxy(sim_url) as (_, base), httpx.AsyncClient(timeout=30) as c:
        bad = {"messages": "not a list"}
        direct = await c.post(sim_url + "/chat/completions", json=bad)
        via = await c.post(base + "/chat/completions", json=bad)
        assert via.status_code == direct.status_code and 400 <= via.status_code < 500
        assert via.json()["error"]["type"] == direct.json()["error"]["type"]


async def test_a_proxy_on_shared_pods_gives_each_adapters_requests_to_its_version(tmp_path: Path) -> None:
    # Two versions on the same pods that differ by model name (a LoRA adapter beside the base model): the proxy
    # of the pods attributes each request to the version whose model name it asks for, in its counters and its
    # samples; a name no version has stays the proxy's own.
    with running_fleet(profiles={"stable": "idle", "canary": "idle"}, seed=3) as (handle, _config):
        handle.serve_adapter("stable", "support-lora-v2", "canary")
        base = handle.version("stable").model
        store, metrics, pipe, client = await _sampling(tmp_path)
        app = ProxyApp(version="stable", upstream=handle.url("stable"), client=client, metrics=metrics,
                       pipeline=pipe, by_model={"support-lora-v2": "canary"})
        server = await start_server(app, host="127.0.0.1", port=0)
        try:
            async with httpx.AsyncClient(timeout=30) as c:
                url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
                for model in ("support-lora-v2", base, "support-lora-v2"):
                    r = await c.post(url, json={"model": model, "max_tokens": 8,
                                                "messages": [{"role": "user", "content": "Hello"}]})
                    assert r.status_code == 200 and r.json()["model"] == model
                r = await c.post(url, content=b"not json")  # the upstream refuses it; the proxy's own version
                assert r.status_code == 400
            await asyncio.to_thread(deadline_wait, lambda: metrics.stored["canary"] == 2 and
                                    metrics.stored["stable"] == 1)
            assert metrics.requests[("canary", "200")] == 2 and metrics.requests[("stable", "200")] == 1
            assert metrics.requests[("stable", "400")] == 1
            assert len(store.samples("canary")) == 2 and len(store.samples("stable")) == 1
        finally:
            await server.stop()
            await pipe.stop()
            await client.aclose()
            store.close()


async def test_generation_requests_without_max_tokens_are_counted(fleet: tuple[int, str]) -> None:
    _sim_port, sim_url = fleet
    async with plain_proxy(sim_url) as (metrics, base), httpx.AsyncClient(timeout=30) as c:
        hello = [{"role": "user", "content": "Hello"}]
        for body in ({"messages": hello}, {"messages": hello, "max_tokens": 8},
                     {"messages": hello, "max_completion_tokens": 8}, {"messages": hello, "stream": True}):
            assert (await c.post(base + "/chat/completions", json=body)).status_code == 200
        assert (await c.post(base + "/completions", json={"prompt": "Once"})).status_code == 200
        assert (await c.get(base + "/models")).status_code == 200  # not a generation: never counted
    assert metrics.uncapped == {"stable": 3}
