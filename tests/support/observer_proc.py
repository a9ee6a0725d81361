"""Run a real observer Service in-process on a free loopback port, and loopback scrape targets for it.

`run_observer(config)` starts the Service (components, scheduler, uvicorn) on its own event loop in a
background thread and yields a handle with `url` and `stop()`. `TargetServer` is a small threaded
HTTP server on 127.0.0.1 whose answer per path is scripted (status, Content-Type, body, delay,
truncation, oversize streaming) — the misbehaving targets of the fault tests. `scaled_exposition`
multiplies every counter and histogram sample of an exposition by `k`, so a fixture body can stand
for a live vLLM whose counters grow (quantiles of the increases stay the fixture's own).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import httpx

from observer.config.spec import ObserverConfig
from observer.service import ThreadedService, start_in_thread
from observer.wiring.root import Area
from tests.support.poll import wait_until as wait_until  # re-exported: tests import it from here
from tests.support.prom import free_port, wait_http

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------------
# the observer


class ObserverProcess(ThreadedService):
    """Handle on an observer running in a background thread, with test helpers."""

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """GET `path` from the observer."""
        return httpx.get(self.url + path, timeout=10.0, **kwargs)

    def samples(self, version: str, token: str) -> list[dict[str, Any]]:
        """The newest (up to 1,000) stored samples of `version`, read back through the admin API."""
        resp = self.get(f"/api/v1/samples?version={version}&limit=1000", headers={"authorization": f"Bearer {token}"})
        assert resp.status_code == 200, resp.text
        return list(resp.json()["samples"])

    def wait_ready(self, *, timeout: float = 20.0) -> None:
        """Poll /readyz until 200 (first scrape cycle done)."""
        wait_http(self.url + "/readyz", timeout=timeout)


@contextmanager
def run_observer(config: ObserverConfig, *, areas: list[Area] | None = None, span_exporter: Any = None,
                 http: httpx.AsyncClient | None = None, port: int | None = None) -> Iterator[ObserverProcess]:
    """Start an observer Service for `config` on `port` or a free one (config's port ignored); stop it on exit."""
    cfg = config.model_copy(update={"server": config.server.model_copy(
        update={"host": "127.0.0.1", "port": port or free_port()})})
    t = start_in_thread(cfg, areas=areas, span_exporter=span_exporter, http=http)
    proc = ObserverProcess(url=t.url, service=t.service, loop=t.loop, server=t.server, thread=t.thread)
    try:
        yield proc
    finally:
        proc.stop()


# ---------------------------------------------------------------------------------------------------
# scripted targets


@dataclass
class Route:
    """How a TargetServer answers one path. `body` may be a callable (called per request)."""

    body: bytes | Callable[[], bytes] = b""
    status: int = 200
    content_type: str | None = "text/plain; version=0.0.4; charset=utf-8"
    delay: float = 0.0
    truncate_at: int | None = None
    """Declare the full Content-Length but send only this many bytes, then close."""
    stream_bytes: int | None = None
    """Ignore `body`: stream this many bytes of valid-looking lines without a Content-Length."""
    declare_length: bool = True
    chunk_delay: float = 0.0
    """Send the body in 1 kB chunks with this pause between them (a slow drip after prompt headers)."""
    hits: int = 0


@dataclass
class TargetServer:
    """Threaded HTTP server on 127.0.0.1 answering each path as its Route says."""

    routes: dict[str, Route] = field(default_factory=dict)
    port: int = 0
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        """Absolute URL of `path`."""
        return f"http://127.0.0.1:{self.port}{path}"

    def set(self, path: str, route: Route) -> str:
        """Install (or replace) the route at `path`; return its URL."""
        self.routes[path] = route
        return self.url(path)

    def start(self) -> TargetServer:
        """Listen on a free loopback port in a background thread."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                route = owner.routes.get(self.path.split("?", 1)[0])
                if route is None:
                    self.send_error(404)
                    return
                route.hits += 1
                if route.delay and owner._stopping.wait(route.delay):
                    return
                try:
                    owner._answer(self, route)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="target-server", daemon=True)
        self._thread.start()
        return self

    def _answer(self, h: BaseHTTPRequestHandler, route: Route) -> None:
        if route.stream_bytes is not None:
            h.send_response(route.status)
            if route.content_type:
                h.send_header("Content-Type", route.content_type)
            if route.declare_length:
                h.send_header("Content-Length", str(route.stream_bytes))
            h.send_header("Connection", "close")
            h.end_headers()
            line = b'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n'
            chunk = line * (65536 // len(line))
            sent = 0
            while sent < route.stream_bytes and not self._stopping.is_set():
                h.wfile.write(chunk)
                sent += len(chunk)
            h.close_connection = True
            return
        body = route.body() if callable(route.body) else route.body
        h.send_response(route.status)
        if route.content_type:
            h.send_header("Content-Type", route.content_type)
        h.send_header("Content-Length", str(len(body)))
        if route.truncate_at is not None:
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(body[: route.truncate_at])
            h.wfile.flush()
            h.close_connection = True
            return
        h.end_headers()
        if route.chunk_delay:
            for i in range(0, len(body), 1024):
                if self._stopping.wait(route.chunk_delay):
                    return
                h.wfile.write(body[i:i + 1024])
                h.wfile.flush()
            return
        h.wfile.write(body)

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)


@contextmanager
def target_server() -> Iterator[TargetServer]:
    """A started TargetServer, stopped on exit."""
    server = TargetServer().start()
    try:
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------------
# expositions

_TYPE = re.compile(r"^# TYPE (\S+) (\S+)")


def scaled_exposition(text: str, k: float) -> str:
    """`text` with every counter and histogram sample multiplied by `k` (gauges and `_created` kept)."""
    kinds: dict[str, str] = {}
    out = []
    for line in text.splitlines():
        m = _TYPE.match(line)
        if m:
            kinds[m.group(1)] = m.group(2)
            out.append(line)
            continue
        if not line or line.startswith("#"):
            out.append(line)
            continue
        name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=len(line))
        name = line[:name_end]
        family = next((f for f in (name, *(name[: -len(s)] for s in ("_total", "_bucket", "_sum", "_count")
                                          if name.endswith(s))) if f in kinds), None)
        if family is None or kinds[family] not in ("counter", "histogram") or name.endswith("_created"):
            out.append(line)
            continue
        head, _, value = line.rpartition(" ")
        out.append(f"{head} {float(value) * k!r}")
    return "\n".join(out) + "\n"


