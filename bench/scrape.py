"""Benchmark of the scrape path, against what a user would otherwise pick, in the same run.

1. Parse throughput on the vLLM 0.33 fixture: observer's parser (and parser + vLLM normalisation)
   vs `prometheus_client.parser.text_string_to_metric_families` (fully consumed).
2. CPU seconds per full scrape cycle (HTTP fetch + parse + normalise + signals) of N loopback
   targets serving realistic vLLM bodies (the fixture, counters growing every scrape), measured with
   time.process_time() in this process; the targets run in a child process so they do not count.
   The same cycle with prometheus_client's parser swapped in (adapted to our families) is the
   comparison.

Usage: python -m bench.scrape [--targets 100] [--cycles 10] [--parse-seconds 3]
Last line: a JSON object with parse_speedup_vs_prometheus_client and core_fraction_100_targets_every_15s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

FIXTURE = ROOT / "tests" / "fixtures" / "vllm" / "generated_vllm-0.33.0_single-engine.prom"
INTERVAL = 15.0


# ------------------------------------------------------------------------------------------- targets


def serve(n: int) -> None:
    """Child process: n loopback HTTP/1.1 servers, each body the fixture with counters x (scrape count)."""
    from tests.support.observer_proc import scaled_exposition

    text = FIXTURE.read_text()
    bodies = [scaled_exposition(text, k).encode() for k in range(1, 65)]  # precomputed: serving costs ~0

    async def main() -> None:
        ports = []
        for _ in range(n):
            hits = [0]

            async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             hits: list[int] = hits) -> None:
                try:
                    while True:
                        head = await reader.readuntil(b"\r\n\r\n")
                        if not head:
                            break
                        body = bodies[hits[0] % len(bodies)]
                        hits[0] += 1
                        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                        await writer.drain()
                except (asyncio.IncompleteReadError, ConnectionError):
                    pass
                finally:
                    writer.close()

            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            ports.append(server.sockets[0].getsockname()[1])
        print(json.dumps(ports), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin

    asyncio.run(main())


# ------------------------------------------------------------------------------------------- parsing


def timed(fn: Callable[[], Any], seconds: float) -> float:
    """Calls per CPU second of fn over about `seconds` of CPU time (after one warm-up call); CPU time,
    not wall time, so other load on a shared machine does not skew the ratio."""
    fn()
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        fn()
        n += 1
    return n / (time.process_time() - t0)


def prometheus_client_families(text: str) -> list[Any]:
    """What a user would otherwise write: prometheus_client's parser, adapted to our Family type."""
    from prometheus_client.parser import text_string_to_metric_families

    from observer.collect.promtext import Family, Sample

    out = []
    for m in text_string_to_metric_families(text):
        fam = Family(name=m.name, type=m.type, help=m.documentation)
        fam.samples = [Sample(s.name, tuple(sorted(s.labels.items())), s.value) for s in m.samples]
        out.append(fam)
    return out


def bench_parse(seconds: float) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    from observer.collect import promtext
    from observer.collect.promtext import parse
    from observer.collect.vllm import parse_vllm

    text = FIXTURE.read_text()
    mb = len(text.encode()) / 1e6

    def cold() -> None:
        # The parser caches parsed label sets across scrapes (same series, new values). A cold parse
        # empties that cache first: the conservative figure, used as the headline speedup.
        promtext._LABEL_CACHE.clear()
        parse(text)

    ours_cold = timed(cold, seconds)
    ours = timed(lambda: parse(text), seconds)
    ours_vllm = timed(lambda: parse_vllm(text), seconds)
    theirs = timed(lambda: list(text_string_to_metric_families(text)), seconds)
    return {"payload_bytes": len(text.encode()), "ours_parses_per_s": ours, "ours_mb_per_s": ours * mb,
            "ours_cold_parses_per_s": ours_cold,
            "ours_with_vllm_normalise_per_s": ours_vllm, "prometheus_client_parses_per_s": theirs,
            "prometheus_client_mb_per_s": theirs * mb, "speedup": ours_cold / theirs,
            "speedup_warm_label_cache": ours / theirs}


# ------------------------------------------------------------------------------------------- cycles


async def bench_cycles(ports: list[int], cycles: int, parser: str) -> dict[str, float]:
    import httpx

    from observer.analyse.signals import SignalStore
    from observer.collect.dcgm import parse_dcgm
    from observer.collect.scraper import Scraper, TargetHealth
    from observer.collect.vllm import normalise, parse_vllm
    from observer.config.fleet import VersionSpec

    versions = [VersionSpec(name=f"v{i}", vllm=[f"http://127.0.0.1:{p}/metrics" for p in ports[i::10]])
                for i in range(min(10, len(ports)))]
    store = SignalStore(versions, window_seconds=300.0, stale_after_seconds=2 * INTERVAL)
    health = TargetHealth(store.bindings())
    parse = parse_vllm if parser == "observer" else (lambda t: normalise(prometheus_client_families(t)))
    # The service's own client settings (httpx defaults: 20 keep-alive connections). More idle keep-alive
    # connections cost more CPU, not less: httpcore's pool scans every connection on each request.
    async with httpx.AsyncClient(follow_redirects=False) as client:
        scraper = Scraper(client=client, parse_vllm=parse, parse_dcgm=parse_dcgm, timeout_seconds=10.0,
                          concurrency=32)

        async def cycle(ts: float) -> int:
            results = await scraper.scrape_all(health.targets)
            health.record(results)
            store.record(results, ts=ts)
            return sum(1 for r in results.values() if r.ok)

        for i in range(2):  # warm-up: connections opened, baselines taken
            await cycle(i * INTERVAL)
        cpu, wall, ok = [], [], 0
        for i in range(cycles):
            c0, w0 = time.process_time(), time.perf_counter()
            ok = await cycle((i + 2) * INTERVAL)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
    sig = store.latest("v0")
    assert sig is not None and sig.ttft is not None and sig.ttft.p95 is not None, "signals were not computed"
    cpu.sort()
    return {"targets": len(ports), "targets_ok": ok, "cpu_s_per_cycle_median": cpu[len(cpu) // 2],
            "cpu_s_per_cycle_max": cpu[-1], "wall_s_per_cycle_median": sorted(wall)[len(wall) // 2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--parse-seconds", type=float, default=3.0)
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return

    parse = bench_parse(args.parse_seconds)
    print(f"parse 0.33 fixture ({parse['payload_bytes']} B): observer {parse['ours_mb_per_s']:.1f} MB/s "
          f"({parse['ours_parses_per_s']:.0f}/s; with vLLM normalisation "
          f"{parse['ours_with_vllm_normalise_per_s']:.0f}/s)"
          f" vs prometheus_client {parse['prometheus_client_mb_per_s']:.1f} MB/s "
          f"({parse['prometheus_client_parses_per_s']:.0f}/s): {parse['speedup']:.2f}x cold label cache, "
          f"{parse['speedup_warm_label_cache']:.2f}x warm (repeat scrapes of the same series)")

    child = subprocess.Popen([sys.executable, __file__, "--serve", str(args.targets)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert child.stdout is not None
        ports = json.loads(child.stdout.readline())
        ours = asyncio.run(bench_cycles(ports, args.cycles, "observer"))
        theirs = asyncio.run(bench_cycles(ports, args.cycles, "prometheus_client"))
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=10)
    fraction = ours["cpu_s_per_cycle_median"] / INTERVAL
    scale = 100 / args.targets
    print(f"cycle of {ours['targets']} targets ({ours['targets_ok']} ok): {ours['cpu_s_per_cycle_median']:.3f} CPU s "
          f"(max {ours['cpu_s_per_cycle_max']:.3f}, wall {ours['wall_s_per_cycle_median']:.3f} s); "
          f"with prometheus_client's parser {theirs['cpu_s_per_cycle_median']:.3f} CPU s: "
          f"{theirs['cpu_s_per_cycle_median'] / ours['cpu_s_per_cycle_median']:.2f}x")
    print(f"every {INTERVAL:g} s: {100 * fraction * scale:.2f}% of one core for 100 targets (target < 5%)")
    print(json.dumps({
        "parse_speedup_vs_prometheus_client": round(parse["speedup"], 3),
        "parse_speedup_warm_label_cache": round(parse["speedup_warm_label_cache"], 3),
        "parse_mb_per_s": round(parse["ours_mb_per_s"], 2),
        "prometheus_client_parse_mb_per_s": round(parse["prometheus_client_mb_per_s"], 2),
        "targets": ours["targets"],
        "cpu_seconds_per_cycle": round(ours["cpu_s_per_cycle_median"], 4),
        "cpu_seconds_per_cycle_prometheus_client_parser": round(theirs["cpu_s_per_cycle_median"], 4),
        "cycle_speedup_vs_prometheus_client_parser": round(theirs["cpu_s_per_cycle_median"]
                                                           / ours["cpu_s_per_cycle_median"], 3),
        "core_fraction_100_targets_every_15s": round(fraction * scale, 5),
    }))


if __name__ == "__main__":
    main()
