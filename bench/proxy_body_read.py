"""The proxy's request-body read: `contract.read_capped` (the one bounded read shared with the ingest and
OTLP routes, an async generator over the ASGI messages) against the hand loop the proxy had before it, in
the same run. 100,000 one-message 120-byte bodies each; best of two. Last line: JSON.

    .venv/bin/python bench/proxy_body_read.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from observer.sample.proxy import _read_body

N = 100_000
SCOPE = {"headers": [(b"host", b"x"), (b"content-type", b"application/json"), (b"content-length", b"120")]}
BODY = b"x" * 120


async def hand_loop(receive: Callable[[], Awaitable[dict[str, Any]]], limit: int) -> bytes | int | None:
    """The proxy's read before read_capped (its size when over `limit`, None on disconnect)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return size
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


async def main() -> dict[str, float]:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": BODY, "more_body": False}

    arms: dict[str, Callable[[], Awaitable[object]]] = {
        "hand_loop": lambda: hand_loop(receive, 1 << 20),
        "read_capped": lambda: _read_body(SCOPE, receive, 1 << 20)}
    best = {name: float("inf") for name in arms}
    for _ in range(2):
        for name, fn in arms.items():
            t0 = time.perf_counter()
            for _ in range(N):
                await fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / N * 1e6)
    return best


if __name__ == "__main__":
    us = asyncio.run(main())
    print(f"read_capped {us['read_capped']:.2f} µs per request, the hand loop {us['hand_loop']:.2f} µs "
          f"(×{us['read_capped'] / us['hand_loop']:.1f}; +{us['read_capped'] - us['hand_loop']:.2f} µs)")
    print(json.dumps({"bench": "proxy_body_read", "read_capped_us": round(us["read_capped"], 3),
                      "hand_loop_us": round(us["hand_loop"], 3),
                      "added_us": round(us["read_capped"] - us["hand_loop"], 3)}))
