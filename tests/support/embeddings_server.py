"""A SCRIPTED OpenAI-compatible `/v1/embeddings` endpoint on loopback: feature hashing, not a model.

Lets integration tests exercise the drift area's remote-embedder path without loading torch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from observer.analyse.embed import HashingEmbedder
from observer.httpserve import threaded_http_server


class _Embeddings(BaseHTTPRequestHandler):
    embedder = HashingEmbedder(dim=64)

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        vecs = self.embedder.embed(list(body["input"]))
        out = json.dumps({"object": "list", "model": body.get("model"),
                          "data": [{"index": i, "embedding": v.tolist()} for i, v in enumerate(vecs)]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@contextmanager
def run_embeddings_server() -> Iterator[str]:
    """Serve hashed 64-dimensional embeddings; yields the base URL (…/v1)."""
    with threaded_http_server(_Embeddings) as port:
        yield f"http://127.0.0.1:{port}/v1"
