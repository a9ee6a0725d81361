"""A byte tap in front of an engine: a loopback TCP relay that timestamps what passes, for latency benches.

Direct and proxied requests both go through the tap, so for each request the bench can subtract the
engine's own time (first request byte the tap forwards to the engine → last reply byte the tap reads
back) from what the client measured. What is left is the time spent outside the engine — network hops,
the proxy — and the engine's jitter (hundreds of ms at p99 on a shared CPU) no longer swamps a
difference of a few milliseconds. The tap costs both paths the same relay hop.

Requests must be sent one at a time: the tap attributes every byte between a client's `mark()` and its
`window()` call to that request. It runs its own event loop in a daemon thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """One request as the tap saw it (perf_counter seconds)."""

    first_up: float | None  # first request byte read from the client side
    first_data: float | None  # first engine chunk holding an SSE `data:` line
    last_down: float | None  # last reply byte read from the engine

    @property
    def engine_s(self) -> float:
        """First request byte in → last reply byte out of the engine."""
        if self.first_up is None or self.last_down is None:
            raise ValueError("the tap saw no complete exchange in this window")
        return self.last_down - self.first_up

    @property
    def engine_first_data_s(self) -> float:
        """First request byte in → first streamed `data:` chunk out of the engine."""
        if self.first_up is None or self.first_data is None:
            raise ValueError("the tap saw no streamed data in this window")
        return self.first_data - self.first_up


class EngineTap:
    """Relay 127.0.0.1:<port> → `host`:`port` and keep timestamps of each direction's reads."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._events: list[tuple[str, float, bool]] = []  # (direction, t, holds "data:")
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._run, name="engine-tap", daemon=True)
        self.port = 0

    def __enter__(self) -> EngineTap:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the engine tap did not start listening within 10 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def mark(self) -> int:
        with self._lock:
            return len(self._events)

    def window(self, since: int) -> Window:
        with self._lock:
            events = self._events[since:]
        ups = [t for d, t, _ in events if d == "up"]
        downs = [t for d, t, _ in events if d == "down"]
        data = [t for d, t, has in events if d == "down" and has]
        return Window(first_up=ups[0] if ups else None, first_data=data[0] if data else None,
                      last_down=downs[-1] if downs else None)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pump(reader, up_writer, "up"), self._pump(up_reader, writer, "down"),
                             return_exceptions=True)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, direction: str) -> None:
        try:
            while chunk := await src.read(65536):
                t = time.perf_counter()  # stamped before forwarding: the client cannot see bytes unstamped
                with self._lock:
                    self._events.append((direction, t, direction == "down" and b"data:" in chunk))
                dst.write(chunk)
                await dst.drain()
        finally:
            dst.close()
