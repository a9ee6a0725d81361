"""An OTLP/HTTP logs receiver on a loopback port (POST /v1/logs, protobuf), in a thread: what a collector, Langfuse
or Phoenix would receive. It decodes each export with opentelemetry-proto and keeps the records; `delay` makes
it slow and `status` makes it refuse."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from tests.support.prom import free_port


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)


@dataclass
class Received:
    """One log record as exported: its event name, attributes, trace and span ids (hex, "" when none)."""

    event_name: str
    attributes: dict[str, Any]
    trace_id: str
    span_id: str
    resource: dict[str, Any]


@dataclass
class Receiver:
    url: str
    records: list[Received] = field(default_factory=list)
    requests: int = 0
    delay: float = 0.0
    status: int = 200
    headers: list[dict[str, str]] = field(default_factory=list)

    def wait(self, n: int, timeout: float = 10.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.records) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.records)


@contextmanager
def otlp_logs_receiver() -> Iterator[Receiver]:
    port = free_port()
    receiver = Receiver(url=f"http://127.0.0.1:{port}/v1/logs")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            receiver.requests += 1
            receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
            if receiver.delay:
                time.sleep(receiver.delay)
            if receiver.status == 200:
                req = ExportLogsServiceRequest()
                req.ParseFromString(body)
                for rl in req.resource_logs:
                    resource = {a.key: _value(a.value) for a in rl.resource.attributes}
                    for sl in rl.scope_logs:
                        for r in sl.log_records:
                            receiver.records.append(Received(
                                event_name=r.event_name, attributes={a.key: _value(a.value) for a in r.attributes},
                                trace_id=r.trace_id.hex(), span_id=r.span_id.hex(), resource=resource))
            self.send_response(receiver.status)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
