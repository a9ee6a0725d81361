"""The proxy's hand-written upstream client against the well-kept alternative, in the same run (issue #21).

The sampling proxy forwards every request through `observer.sample.upstream.UpstreamPool` (asyncio protocol
+ httptools). What a user would otherwise pick is httpx (already a dependency) — aiohttp is not installed
here. Both forward the same requests to the same loopback upstream (a raw asyncio server answering a
1 KiB JSON body, and a 2 MiB body to exercise back-pressure and connection reuse after a large reply) at
the same concurrency; CPU seconds of this process per request (the loopback upstream runs in it too, the
same for both) and wall time are compared. The client stays only while it is clearly cheaper. Last line:
one JSON object.

    .venv/bin/python -m bench.upstream_client [--requests 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import httpx

from observer.sample.upstream import UpstreamError, UpstreamPool

SMALL = b'{"id":"x","choices":[{"text":"' + b"a" * 1000 + b'"}]}'
LARGE = b"b" * (2 * 1024 * 1024)


async def upstream() -> tuple[asyncio.Server, int]:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                break  # the client closed, or the benchmark is over
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            body = LARGE if b"/large" in head.split(b"\r\n", 1)[0] else SMALL
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


class Drain:
    """A ReplySink that reads the reply to its end, as the proxy does when it forwards one."""

    def __init__(self) -> None:
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        pass

    def on_body(self, data: bytes) -> None:
        pass

    def flush(self) -> None:
        pass

    def on_end(self) -> None:
        self.done.set_result(None)

    def on_error(self, error: UpstreamError) -> None:
        self.done.set_exception(error)


async def run_pool(port: int, n: int, concurrency: int, path: bytes) -> tuple[float, float]:
    pool = UpstreamPool(f"http://127.0.0.1:{port}", connect_timeout=5, read_timeout=30, max_idle=concurrency)
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            sink = Drain()
            pool.send("POST", path, [(b"content-type", b"application/json")], b'{"prompt":"x"}', sink)
            await sink.done

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    pool.close()
    return cpu, wall


async def run_httpx(port: int, n: int, concurrency: int, path: bytes) -> tuple[float, float]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=30) as client:
        sem = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with sem, client.stream("POST", path.decode(), content=b'{"prompt":"x"}',
                                          headers={"content-type": "application/json"}) as r:
                async for _ in r.aiter_raw():
                    pass

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.process_time() - cpu0, time.perf_counter() - t0


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    server, port = await upstream()
    out: dict[str, object] = {"requests": args.requests, "concurrency": args.concurrency}
    try:
        for label, path, n in (("small", b"/v1/completions", args.requests), ("large", b"/large", 100)):
            await run_pool(port, 50, 4, path)  # warm both
            await run_httpx(port, 50, 4, path)
            pool_cpu, pool_wall = await run_pool(port, n, args.concurrency, path)
            httpx_cpu, httpx_wall = await run_httpx(port, n, args.concurrency, path)
            out[f"pool_cpu_us_per_request_{label}"] = round(pool_cpu / n * 1e6, 1)
            out[f"httpx_cpu_us_per_request_{label}"] = round(httpx_cpu / n * 1e6, 1)
            out[f"httpx_over_pool_cpu_{label}"] = round(httpx_cpu / pool_cpu, 2)
            out[f"httpx_over_pool_wall_{label}"] = round(httpx_wall / pool_wall, 2)
            print(f"{label}: pool {pool_cpu / n * 1e6:.0f} µs CPU/request, httpx {httpx_cpu / n * 1e6:.0f} µs "
                  f"({httpx_cpu / pool_cpu:.2f}×); wall {pool_wall:.2f}s vs {httpx_wall:.2f}s")
    finally:
        server.close()
        await server.wait_closed()
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    asyncio.run(main())
