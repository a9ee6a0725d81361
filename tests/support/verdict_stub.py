"""A scripted stand-in for the observer's verdict endpoint (GET /api/v1/canary/verdict) on loopback, for the
gates that poll it (`observer canary wait`, the GitOps example): it answers a scripted sequence of the observer's
verdict bodies, statuses or dropped connections. The body's shape is the observer's own (tested against a
running observer in tests/integration/test_canary_cli.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.prom import free_port


def body(verdict: str, reason: str = "") -> dict[str, Any]:
    return {"canary": "bbb", "baseline": "aaa", "verdict": verdict, "reason": reason or f"{verdict} because",
            "score": 0.0, "n": {"canary": 10, "baseline": 40}, "metrics": {},
            "report": "http://observer.test/report/canary/bbb?baseline=aaa"}


@contextmanager
def scripted(answers: list[Any]) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """Serve `answers` one per request (the last repeats): a body dict (200), an int (that status), or the
    string "down" (the connection is closed without an answer: an observer restarting)."""
    port = free_port()
    asked: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            from urllib.parse import parse_qsl, urlparse

            u = urlparse(self.path)
            asked.append({"path": u.path, **dict(parse_qsl(u.query))})
            answer = answers[min(len(asked) - 1, len(answers) - 1)]
            if answer == "down":
                self.connection.close()
                return
            code, text = (answer, "not here") if isinstance(answer, int) else (200, json.dumps(answer))
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(text.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{port}", asked
    finally:
        server.shutdown()
        server.server_close()
