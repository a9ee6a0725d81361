"""Issue #21 items 6–8: what an unauthenticated client can hold before any route runs, on real servers.

The observer (uvicorn + its guarded protocol) and the in-process sampling proxy in front of a scripted
upstream, on loopback, probed with raw sockets: oversized heads get 431 and are never forwarded, slow
heads (slowloris) are cut at the deadline with 408, connections over the cap get 503, and a declared
body over the proxy's limit is refused (413) before a byte of it is read. Each refusal is counted.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from observer.config import parse_config
from tests.support.observer_proc import ObserverProcess, run_observer
from tests.support.prom import free_port
from tests.support.scripted_openai import ScriptedUpstream


def _addr(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    return host, int(port)


def _send(url: str, data: bytes, *, timeout: float = 5.0) -> bytes:
    with socket.create_connection(_addr(url), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return out


def _refused(proc: ObserverProcess, server: str, reason: str) -> float:
    for line in proc.get("/metrics").text.splitlines():
        if line.startswith("observer_http_refused_total{") and f'reason="{reason}"' in line \
                and f'server="{server}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no observer_http_refused_total for {server}/{reason}")


@pytest.fixture()
def observer() -> Iterator[ObserverProcess]:
    cfg = parse_config("server: {max_connections: 8, header_timeout_seconds: 0.5, max_header_bytes: 8192, "
                       "max_headers: 20}\n", environ={})
    with run_observer(cfg, areas=[]) as proc:
        yield proc


def test_an_oversized_head_is_431_before_auth(observer: ObserverProcess) -> None:
    big = b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 20_000 + b"\r\n\r\n"
    assert _send(observer.url, big).startswith(b"HTTP/1.1 431")
    many = b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + b"".join(b"x-%d: 1\r\n" % i for i in range(50)) + b"\r\n"
    assert _send(observer.url, many).startswith(b"HTTP/1.1 431")
    assert _refused(observer, "observer", "header_too_large") >= 1
    assert _refused(observer, "observer", "too_many_headers") >= 1
    assert observer.get("/healthz").status_code == 200  # an honest client still gets through


def test_slowloris_connections_are_cut_at_the_head_deadline(observer: ObserverProcess) -> None:
    socks = []
    try:
        for _ in range(5):
            s = socket.create_connection(_addr(observer.url), timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")  # ... and never the rest
            socks.append(s)
        t0 = time.monotonic()
        answers = [s.recv(1024) for s in socks]
        waited = time.monotonic() - t0
    finally:
        for s in socks:
            s.close()
    assert all(a.startswith(b"HTTP/1.1 408") for a in answers), answers
    assert waited < 4.0
    assert _refused(observer, "observer", "header_timeout") >= 5


def test_connections_over_the_cap_get_503(observer: ObserverProcess) -> None:
    socks = [socket.create_connection(_addr(observer.url), timeout=5) for _ in range(8)]
    try:
        extra = socket.create_connection(_addr(observer.url), timeout=5)
        with extra:
            assert extra.recv(1024).startswith(b"HTTP/1.1 503")
    finally:
        for s in socks:
            s.close()
    assert _refused(observer, "observer", "too_many_connections") >= 1


@contextmanager
def _proxy(tmp_path: Path) -> Iterator[tuple[ObserverProcess, ScriptedUpstream, str]]:
    port = free_port()
    with ScriptedUpstream() as upstream:
        cfg = parse_config(f"""
fleet:
  versions: [{{name: stable, openai: "{upstream.url}/v1"}}]
sampling:
  store: {{path: "{tmp_path / 's.db'}"}}
  proxy: {{max_request_bytes: 65536, max_header_bytes: 8192, header_timeout_seconds: 0.5}}
  versions: {{stable: {{listen: "127.0.0.1:{port}"}}}}
""", environ={})
        with run_observer(cfg, areas=["sample"]) as proc:
            yield proc, upstream, f"http://127.0.0.1:{port}"


def test_the_proxy_refuses_big_heads_and_bodies_without_forwarding(tmp_path: Path) -> None:
    with _proxy(tmp_path) as (proc, upstream, url):
        head = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 20_000 + b"\r\n" \
               b"content-length: 2\r\n\r\n{}"
        assert _send(url, head).startswith(b"HTTP/1.1 431")
        # A declared 60 MiB body: refused from Content-Length, before the proxy reads (or buffers) it.
        with socket.create_connection(_addr(url), timeout=5) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                      b"content-length: 62914560\r\n\r\n")
            assert s.recv(1024).startswith(b"HTTP/1.1 413")
        big = httpx.post(url + "/v1/completions", content=b"x" * 100_000, timeout=10)
        assert big.status_code == 413
        ok = httpx.post(url + "/v1/completions", json={"prompt": "hi"}, timeout=10)
        assert ok.status_code == 200
        assert len(upstream.requests) == 1  # only the honest request reached the upstream
        assert _refused(proc, "proxy-stable", "header_too_large") >= 1
