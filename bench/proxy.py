"""Latency the sampling proxy adds, and mirror-ingest throughput, on loopback against the simulator.

    .venv/bin/python -m bench.proxy            # ~2.5 min: 4 s phases, 20 s ingest soak
    .venv/bin/python -m bench.proxy --full     # 10 s phases, 60 s ingest soak

Three processes: the simulator (time_scale 0, no background load: replies as fast as it can), the
`observer proxy` sidecar in front of it (restarted per sampling rate 0 %, 10 %, 100 %; samples go to a
local SQLite store), and this load generator. What a user would otherwise do is talk to vLLM directly,
so every proxied phase is paired with a direct phase at the same open-loop rate (alternating in short
slices so both see the same machine conditions). Added latency = proxied − direct, per percentile,
for plain requests (full reply) and streamed ones (time to the first body chunk). The proxy's own
in-process measurement (`observer_proxy_added_latency_seconds`) is printed beside it.

Ingest: an observer process with only the sampling area; 1,000 samples/s in batches of 100 (prompts
with some PII to redact), acknowledged only after commit; its RSS is sampled to show memory stays flat.
Last output line: JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

from tests.support.gateways import process_cpu_seconds
from tests.support.prom import free_port, wait_http

ROOT = Path(__file__).resolve().parents[1]

SIM = """
import sys, time
from observer.config import load_config
from observer_dev.sim.fleet import run_fleet
config = load_config(sys.argv[1])
profile = {"preset": "idle", "time_scale": 0.0}
with run_fleet(config, {"stable": profile}, seed=1, answer_dir=None):
    while True:
        time.sleep(3600)
"""

RATE = 200.0
CHAT = {"messages": [{"role": "user", "content": "Summarise the release notes in one line."}], "max_tokens": 12}


def start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


class RawClient:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams: the load generator must cost far less
    CPU than what it measures (httpx costs ~1 ms per request on this machine)."""

    def __init__(self, base: str) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.requests = {stream: self._encode({**CHAT, "stream": True} if stream else CHAT) for stream in (False, True)}

    def _encode(self, body: dict[str, Any]) -> bytes:
        data = json.dumps(body).encode()
        return (f"POST /v1/chat/completions HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n").encode() + data

    async def one(self, stream: bool) -> float | None:
        """Latency of one request: the whole reply (plain) or its first body chunk (stream); None on error."""
        conn = self.idle.pop() if self.idle else await asyncio.open_connection(self.host, self.port)
        reader, writer = conn
        t0 = time.perf_counter()
        try:
            writer.write(self.requests[stream])
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            lower = head.lower()
            if b"transfer-encoding: chunked" in lower:
                first = None
                while True:
                    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                    await reader.readexactly(size + 2)
                    if first is None:
                        first = time.perf_counter() - t0
                    if size == 0:
                        break
                latency = first if stream else time.perf_counter() - t0
            else:
                length = int(lower.split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                latency = time.perf_counter() - t0
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            writer.close()
            return None
        self.idle.append(conn)
        return latency if status == 200 else None

    async def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


async def paired_load(direct: str, proxied: str, *, stream: bool, seconds: float, rate: float,
                      slice_s: float = 0.5) -> tuple[list[float], list[float], int]:
    """Open-loop load at `rate` req/s, alternating direct and proxied slices; returns both latency lists."""
    lat: dict[str, list[float]] = {"direct": [], "proxied": []}
    failed = 0
    clients = {"direct": RawClient(direct), "proxied": RawClient(proxied)}
    for client in clients.values():  # warm both: open connections, first requests
        await asyncio.gather(*(client.one(stream) for _ in range(20)))
    tasks: list[tuple[str, asyncio.Task[float | None]]] = []
    t_start = time.perf_counter()
    for i in range(int(seconds * rate)):
        due = t_start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        arm = "direct" if int((due - t_start) / slice_s) % 2 == 0 else "proxied"
        tasks.append((arm, asyncio.create_task(clients[arm].one(stream))))
    for arm, task in tasks:
        value = await task
        if value is None:
            failed += 1
        else:
            lat[arm].append(value)
    for client in clients.values():
        await client.close()
    return lat["direct"], lat["proxied"], failed


async def sequential(direct: str, proxied: str, *, stream: bool, n: int) -> tuple[list[float], list[float]]:
    """One request at a time, alternating direct and proxied: the proxy's cost without any queueing."""
    lat: dict[str, list[float]] = {direct: [], proxied: []}
    clients = {direct: RawClient(direct), proxied: RawClient(proxied)}
    for i in range(n * 2 + 20):
        base = direct if i % 2 == 0 else proxied
        value = await clients[base].one(stream)
        if i >= 20 and value is not None:
            lat[base].append(value)
    for client in clients.values():
        await client.close()
    return lat[direct], lat[proxied]


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) * 1000.0


def proxy_internal_p99(metrics_text: str) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    for fam in text_string_to_metric_families(metrics_text):
        if fam.name == "observer_proxy_added_latency_seconds":
            buckets = [(float(s.labels["le"]), s.value) for s in fam.samples if s.name.endswith("_bucket")]
            total = buckets[-1][1]
            for le, count in buckets:
                if count >= 0.99 * total:
                    return le * 1000.0
    return None


async def proxy_phase(workdir: Path, config: Path, sim_url: str, fraction: float, seconds: float,
                      sequential_n: int, rate: float) -> dict[str, Any]:
    port = free_port()
    proc = start([sys.executable, "-m", "observer", "proxy", "--config", str(config), "--version", "stable",
                  "--listen", f"127.0.0.1:{port}", "--log-level", "WARNING"],
                 env={"OBSERVER__SAMPLING__FRACTION": str(fraction),
                      "OBSERVER__SAMPLING__STORE__PATH": str(workdir / f"proxy-{fraction}.db")})
    proxied = f"http://127.0.0.1:{port}"
    out: dict[str, Any] = {"fraction": fraction}
    try:
        wait_http(proxied + "/healthz", timeout=60)
        ps = psutil.Process(proc.pid)
        for kind, stream in (("plain", False), ("stream_first_chunk", True)):
            cpu0 = process_cpu_seconds(ps)
            d, p, failed = await paired_load(sim_url, proxied, stream=stream, seconds=seconds, rate=rate)
            cpu_us = (process_cpu_seconds(ps) - cpu0) / max(1, len(p)) * 1e6
            out[kind] = {
                "n_direct": len(d), "n_proxied": len(p), "failed": failed,
                "direct_p50_ms": pct(d, 50), "proxied_p50_ms": pct(p, 50),
                "direct_p99_ms": pct(d, 99), "proxied_p99_ms": pct(p, 99),
                "p50_added_ms": pct(p, 50) - pct(d, 50), "p99_added_ms": pct(p, 99) - pct(d, 99),
                "proxy_cpu_us_per_request": round(cpu_us)}
            d, p = await sequential(sim_url, proxied, stream=stream, n=sequential_n)
            out[kind].update({"seq_p50_added_ms": pct(p, 50) - pct(d, 50), "seq_p99_added_ms": pct(p, 99) - pct(d, 99),
                              "seq_direct_p50_ms": pct(d, 50)})
        metrics = httpx.get(proxied + "/observer/metrics", timeout=10).text
        out["proxy_internal_added_p99_ms_le"] = proxy_internal_p99(metrics)
        out["stored"] = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                            if line.startswith("observer_samples_stored_total"))
    finally:
        stop(proc)
    return out


PROMPTS = ["Please email the report to alex.murphy@example.com by Friday.",
           "My card 4111 1111 1111 1111 was charged twice, order 55120.",
           "What does HTTP status 429 mean and how should a client back off?",
           "Translate 'good morning' into French, German and Japanese.",
           "Server 10.20.30.40 returns 502 since version 2.4.1 was deployed."]


async def ingest_soak(workdir: Path, seconds: float, rate: float = 1000.0, batch: int = 100) -> dict[str, Any]:
    port = free_port()
    config = workdir / "ingest.yaml"
    config.write_text(f"""
fleet: {{versions: [{{name: stable}}, {{name: canary}}]}}
server: {{host: 127.0.0.1, port: {port}, auth_token: bench}}
sampling: {{store: {{path: "{workdir / 'ingest.db'}"}}}}
""")
    from tests.support.serve_areas import spawn

    proc = spawn(config, ["sample"])
    url = f"http://127.0.0.1:{port}"
    rng = random.Random(0)
    acked = 0
    latencies: list[float] = []
    rss: list[tuple[float, float]] = []
    try:
        wait_http(url + "/healthz", timeout=60)
        ps = psutil.Process(proc.pid)
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer bench"}, timeout=30,
                                     limits=httpx.Limits(max_connections=8)) as client:

            async def post(i: int) -> None:
                nonlocal acked
                body = {"samples": [{"version": "stable" if j % 10 else "canary",
                                     "prompt": rng.choice(PROMPTS) + f" #{i}-{j}",
                                     "output": "Here is a considered answer. " * rng.randint(3, 12),
                                     "finish_reason": "stop", "latency_s": 0.8, "ttft_s": 0.1,
                                     "prompt_tokens": 40, "output_tokens": 120} for j in range(batch)]}
                t0 = time.perf_counter()
                resp = await client.post("/api/v1/samples", json=body)
                latencies.append(time.perf_counter() - t0)
                if resp.status_code == 200:
                    acked += len(resp.json()["ids"])

            t_start = time.perf_counter()
            n = int(seconds * rate / batch)
            pending: list[asyncio.Task[None]] = []
            next_rss = t_start
            for i in range(n):
                due = t_start + i * batch / rate
                while (delay := due - time.perf_counter()) > 0:
                    if time.perf_counter() >= next_rss:
                        rss.append((time.perf_counter() - t_start, ps.memory_info().rss / 2**20))
                        next_rss += 1.0
                    await asyncio.sleep(min(delay, 0.05))
                pending.append(asyncio.create_task(post(i)))
            await asyncio.gather(*pending)
            elapsed = time.perf_counter() - t_start
            rss.append((elapsed, ps.memory_info().rss / 2**20))
    finally:
        stop(proc)
    warm = [m for t, m in rss if t >= min(5.0, seconds / 4)]
    return {"seconds": round(elapsed, 1), "offered_samples_per_s": rate,
            "ingest_samples_per_s": round(acked / elapsed, 1), "acked": acked,
            "post_p50_ms": pct(latencies, 50), "post_p99_ms": pct(latencies, 99),
            "rss_start_mb": round(warm[0], 1), "rss_end_mb": round(warm[-1], 1),
            "rss_max_mb": round(max(warm), 1), "ingest_rss_growth_mb": round(warm[-1] - warm[0], 1)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--full", action="store_true", help="10 s phases and a 60 s ingest soak")
    parser.add_argument("--phase-seconds", type=float, default=None)
    parser.add_argument("--soak-seconds", type=float, default=None)
    parser.add_argument("--rate", type=float, default=RATE, help="open-loop request rate (default 200/s)")
    args = parser.parse_args()
    phase = args.phase_seconds or (10.0 if args.full else 4.0)
    soak = args.soak_seconds or (60.0 if args.full else 20.0)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        sim_port = free_port()
        config = workdir / "observer.yaml"
        config.write_text(f"""
fleet:
  versions:
    - {{name: stable, vllm: ["http://127.0.0.1:{sim_port}/metrics"], openai: "http://127.0.0.1:{sim_port}/v1"}}
sampling:
  reservoir: {{window_seconds: 1, max_per_window: 100000}}
""")
        sim = start([sys.executable, "-c", SIM, str(config)])
        sim_url = f"http://127.0.0.1:{sim_port}"
        phases = []
        try:
            wait_http(sim_url + "/v1/models", timeout=60)
            print(f"upstream: observer simulator (time_scale 0), {args.rate:.0f} req/s open loop, {phase:.0f} s "
                  "per kind and rate, direct and proxied alternating every 0.5 s")
            print(f"{'sampling':>8} {'kind':<19} {'direct p50':>10} {'proxy p50':>10} {'direct p99':>10} "
                  f"{'proxy p99':>10} {'added p50':>9} {'added p99':>9} {'ratio p99':>9}")
            for fraction in (0.0, 0.1, 1.0):
                result = await proxy_phase(workdir, config, sim_url, fraction, phase, 300, args.rate)
                phases.append(result)
                for kind in ("plain", "stream_first_chunk"):
                    r = result[kind]
                    print(f"{fraction:>8.0%} {kind:<19} {r['direct_p50_ms']:>9.2f}m {r['proxied_p50_ms']:>9.2f}m "
                          f"{r['direct_p99_ms']:>9.2f}m {r['proxied_p99_ms']:>9.2f}m {r['p50_added_ms']:>8.2f}m "
                          f"{r['p99_added_ms']:>8.2f}m {r['proxied_p99_ms'] / r['direct_p99_ms']:>8.2f}x")
                    print(f"{'':>8} {'':<19} one at a time (no queueing): added p50 {r['seq_p50_added_ms']:.2f} ms, "
                          f"p99 {r['seq_p99_added_ms']:.2f} ms over a direct p50 of {r['seq_direct_p50_ms']:.2f} ms; "
                          f"proxy CPU {r['proxy_cpu_us_per_request']} µs/request")
                print(f"{'':>8} proxy's own added-latency p99 ≤ {result['proxy_internal_added_p99_ms_le']} ms "
                      f"(histogram bucket); samples stored: {result['stored']:.0f}")
        finally:
            stop(sim)
        ingest = await ingest_soak(workdir, soak)
        print(f"ingest: {ingest['ingest_samples_per_s']} samples/s acknowledged of "
              f"{ingest['offered_samples_per_s']:.0f} offered for {ingest['seconds']} s; "
              f"POST p50 {ingest['post_p50_ms']:.1f} ms p99 "
              f"{ingest['post_p99_ms']:.1f} ms; RSS {ingest['rss_start_mb']} → {ingest['rss_end_mb']} MB "
              f"(max {ingest['rss_max_mb']})")
    ten = next(p for p in phases if p["fraction"] == 0.1)
    print(json.dumps({
        "upstream": "simulator", "rate_rps": args.rate, "phase_seconds": phase,
        "p99_added_ms_plain": round(ten["plain"]["p99_added_ms"], 3),
        "p99_added_ms_stream_first_chunk": round(ten["stream_first_chunk"]["p99_added_ms"], 3),
        "p50_added_ms_plain": round(ten["plain"]["p50_added_ms"], 3),
        "p50_added_ms_stream_first_chunk": round(ten["stream_first_chunk"]["p50_added_ms"], 3),
        "p99_added_ms_by_sampling": {f"{p['fraction']:.0%}": {k: round(p[k]["p99_added_ms"], 3)
                                                               for k in ("plain", "stream_first_chunk")}
                                     for p in phases},
        "sequential_added_ms_by_sampling": {
            f"{p['fraction']:.0%}": {k: {"p50": round(p[k]["seq_p50_added_ms"], 3),
                                         "p99": round(p[k]["seq_p99_added_ms"], 3)}
                                     for k in ("plain", "stream_first_chunk")} for p in phases},
        "proxy_cpu_us_per_request": {f"{p['fraction']:.0%}": {k: p[k]["proxy_cpu_us_per_request"]
                                                               for k in ("plain", "stream_first_chunk")}
                                     for p in phases},
        "load_average_1m": round(os.getloadavg()[0], 1),
        "ingest_samples_per_s": ingest["ingest_samples_per_s"],
        "ingest_rss_growth_mb": ingest["ingest_rss_growth_mb"],
        "ingest_seconds": ingest["seconds"],
    }))


if __name__ == "__main__":
    asyncio.run(main())
