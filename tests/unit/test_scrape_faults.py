"""Scraper fault handling against real loopback HTTP servers: each failure gets its precise reason,
and a dead or slow target never delays the healthy ones."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from observer.collect.dcgm import parse_dcgm
from observer.collect.scraper import Scraper, ScrapeReason, Target, TargetKind
from observer.collect.vllm import parse_vllm
from tests.support.observer_proc import Route, TargetServer, target_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VLLM_033 = (FIXTURES / "vllm" / "generated_vllm-0.33.0_single-engine.prom").read_bytes()
DCGM = (FIXTURES / "dcgm" / "SYNTHETIC_dcgm-exporter_4.x_template_H100_k8s_Hostname.prom").read_bytes()
OPENMETRICS = (
    b"# HELP vllm:num_requests_running demo\n# TYPE vllm:num_requests_running gauge\n"
    b'vllm_num_requests_running{engine="0",model_name="m"} 2.0\n# EOF\n'
)


@pytest.fixture(scope="module")
def server() -> Iterator[TargetServer]:
    with target_server() as s:
        yield s


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


def make(client: httpx.AsyncClient, **kw: float) -> Scraper:
    return Scraper(client=client, parse_vllm=parse_vllm, parse_dcgm=parse_dcgm,
                   timeout_seconds=kw.get("timeout", 1.0), max_body_bytes=int(kw.get("max_body", 16 * 1024 * 1024)))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


CASES = [
    pytest.param(Route(body=VLLM_033), None, id="ok-text-0.0.4"),
    pytest.param(Route(body=VLLM_033, content_type="text/plain; version=1.0.0; charset=utf-8"), None,
                 id="ok-text-1.0.0"),
    pytest.param(Route(body=OPENMETRICS, content_type="application/openmetrics-text; version=1.0.0; charset=utf-8"),
                 None, id="ok-openmetrics"),
    pytest.param(Route(body=VLLM_033, content_type=None), None, id="ok-no-content-type"),
    pytest.param(Route(body=b"oops", status=500), ScrapeReason.HTTP_5XX, id="http-500"),
    pytest.param(Route(body=b"nope", status=404), ScrapeReason.HTTP_4XX, id="http-404"),
    pytest.param(Route(body=b"moved", status=302), ScrapeReason.HTTP_OTHER, id="http-302"),
    pytest.param(Route(body=b"<html>hi</html>\n", content_type="text/html"), ScrapeReason.CONTENT_TYPE,
                 id="wrong-content-type"),
    pytest.param(Route(body=VLLM_033, truncate_at=len(VLLM_033) // 2), ScrapeReason.TRUNCATED,
                 id="truncated-connection"),
    pytest.param(Route(body=VLLM_033[: len(VLLM_033) // 2 + 7]), ScrapeReason.TRUNCATED, id="truncated-mid-line"),
    pytest.param(Route(body=OPENMETRICS.replace(b"# EOF\n", b""),
                       content_type="application/openmetrics-text; version=1.0.0"),
                 ScrapeReason.TRUNCATED, id="openmetrics-without-eof"),
    pytest.param(Route(stream_bytes=50 * 1024 * 1024), ScrapeReason.BODY_TOO_LARGE, id="50MB-declared"),
    pytest.param(Route(stream_bytes=50 * 1024 * 1024, declare_length=False), ScrapeReason.BODY_TOO_LARGE,
                 id="50MB-streamed"),
    pytest.param(Route(body=b"this is not prometheus at all\n"), ScrapeReason.PARSE_ERROR, id="garbage"),
    pytest.param(Route(body=b"\xff\xfe\x00garbage\n"), ScrapeReason.ENCODING, id="not-utf8"),
    pytest.param(Route(body=b"# HELP x y\n# TYPE x gauge\nx 1\n"), ScrapeReason.NO_DATA, id="no-vllm-families"),
    pytest.param(Route(body=VLLM_033, delay=3.0), ScrapeReason.TIMEOUT, id="timeout"),
    pytest.param(Route(body=VLLM_033, chunk_delay=0.05), ScrapeReason.TIMEOUT, id="slow-drip-body"),
]


@pytest.mark.parametrize(("route", "reason"), CASES)
async def test_each_failure_has_its_reason(server: TargetServer, client: httpx.AsyncClient, route: Route,
                                           reason: ScrapeReason | None) -> None:
    url = server.set(f"/case/{id(route)}", route)
    # Size limits are checked with a generous deadline and a 1 MiB cap, so a loaded CI machine that
    # streams slowly still fails them for their size, not for time.
    scraper = (make(client, timeout=10.0, max_body=1024 * 1024) if reason is ScrapeReason.BODY_TOO_LARGE
               else make(client))
    result = await scraper.scrape(Target(TargetKind.VLLM, url))
    assert result.reason == reason, result.message
    if reason is None:
        assert result.vllm is not None and result.vllm.models
    else:
        assert url in result.message and result.vllm is None
    if reason is ScrapeReason.TIMEOUT:
        assert 0.9 < result.duration_seconds < 2.0


async def test_connection_refused(client: httpx.AsyncClient) -> None:
    url = f"http://127.0.0.1:{closed_port()}/metrics"
    result = await make(client).scrape(Target(TargetKind.VLLM, url))
    assert result.reason is ScrapeReason.REFUSED
    assert url in result.message


async def test_dcgm_target_and_dcgm_garbage(server: TargetServer, client: httpx.AsyncClient) -> None:
    good = server.set("/dcgm", Route(body=DCGM))
    empty = server.set("/dcgm-empty", Route(body=b"# TYPE foo gauge\nfoo 1\n"))
    scraper = make(client)
    ok = await scraper.scrape(Target(TargetKind.DCGM, good))
    assert ok.ok and ok.dcgm is not None and len(ok.dcgm.gpus) == 2
    bad = await scraper.scrape(Target(TargetKind.DCGM, empty))
    assert bad.reason is ScrapeReason.NO_DATA


async def test_slow_and_dead_targets_do_not_stall_healthy_ones(server: TargetServer,
                                                                client: httpx.AsyncClient) -> None:
    healthy = [server.set(f"/healthy/{i}", Route(body=VLLM_033)) for i in range(5)]
    slow = server.set("/slow", Route(body=VLLM_033, delay=5.0))
    drip = server.set("/huge", Route(stream_bytes=200 * 1024 * 1024, declare_length=False))
    dead = f"http://127.0.0.1:{closed_port()}/metrics"
    targets = [Target(TargetKind.VLLM, u) for u in (*healthy, slow, drip, dead)]
    t0 = time.perf_counter()
    results = await make(client, timeout=1.0, max_body=2 * 1024 * 1024).scrape_all(targets)
    elapsed = time.perf_counter() - t0
    # Not a speed bound: the slow target answers after 5 s, so a cycle that waited for it took ≥ 5 s.
    assert elapsed < 5.0, f"a cycle took {elapsed:.2f}s: the slow target stalled the others"
    for u in healthy:
        assert results[Target(TargetKind.VLLM, u)].ok
    assert results[Target(TargetKind.VLLM, slow)].reason is ScrapeReason.TIMEOUT
    assert results[Target(TargetKind.VLLM, drip)].reason is ScrapeReason.BODY_TOO_LARGE
    assert results[Target(TargetKind.VLLM, dead)].reason is ScrapeReason.REFUSED
    # healthy targets finished long before the slow one's deadline
    assert max(results[Target(TargetKind.VLLM, u)].duration_seconds for u in healthy) < 0.9


async def test_shared_target_is_scraped_once(server: TargetServer, client: httpx.AsyncClient) -> None:
    route = Route(body=DCGM)
    url = server.set("/shared-dcgm", route)
    results = await make(client).scrape_all([Target(TargetKind.DCGM, url), Target(TargetKind.DCGM, url)])
    assert len(results) == 1 and route.hits == 1

