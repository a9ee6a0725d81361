"""Where `observer proxy` spends its CPU per request, under load: a py-spy profile grouped by part.

    .venv/bin/pip install py-spy                       # not a dependency of the observer
    .venv/bin/python -m bench.proxy_profile            # ~40 s: concurrency 16, plain requests
    .venv/bin/python -m bench.proxy_profile --stream --concurrency 64 --seconds 30

The proxy runs in front of the constant-delay upstream (`tests.support.constant_upstream`, 20 ms) at its
default sampling; the lean load generator (`tests.support.loadgen`) keeps `--concurrency` requests in flight
while py-spy samples the proxy process 1,000 times a second (`--nonblocking`: it never pauses the proxy).
Each sample's innermost frame is attributed to one part (the HTTP server, the ASGI app, the upstream
client, the event loop, metrics, sampling, ...) by the file it runs in; the table gives each part's share
and its CPU microseconds per request (the process's CPU time over the requests served). Last line: JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from tests.support import gateways as gw
from tests.support.loadgen import Target

ROOT = Path(__file__).resolve().parents[1]

# The first matching substring of a frame's file (or function) names its part.
PARTS = (
    ("observer/sample/upstream.py", "upstream client (ours)"),
    ("observer/sample/proxy.py", "proxy app (ours)"),
    ("observer/sample/h1.py", "HTTP server (ours)"),
    ("observer/sample/metrics.py", "metrics"),
    ("observer/analyse/histogram.py", "metrics"),
    ("observer/sample/pipeline.py", "sampling"),
    ("observer/sample/capture.py", "sampling"),
    ("observer/sample/reservoir.py", "sampling"),
    ("observer/store", "sampling"),
    ("observer/httpserve.py", "HTTP server (uvicorn)"),
    ("uvicorn/", "HTTP server (uvicorn)"),
    ("httptools", "HTTP parsing (C)"),
    ("asyncio/", "event loop"),
    ("uvloop", "event loop"),
    ("contextlib.py", "event loop"),
    ("prometheus_client", "metrics"),
    ("sqlite3", "sampling"),
    ("threading.py", "threads (sampling writer)"),
)


def part_of(frame: str) -> str:
    for needle, part in PARTS:
        if needle in frame:
            return part
    return "other"


def summarise(raw: Path) -> Counter[str]:
    """py-spy's collapsed stacks (`frame;frame;... count`) → samples per part of the innermost frame we know."""
    parts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        part = "other"
        for frame in reversed(frames):  # innermost first: the first frame a part claims
            part = part_of(frame)
            if part != "other":
                break
        if "idle" in frames[-1] or "select" in frames[-1] or "epoll" in frames[-1] or "poll (" in frames[-1]:
            part = "idle (waiting in the event loop)"
        parts[part] += int(count)
    return parts


async def load(url: str, seconds: float, concurrency: int, stream: bool) -> int:
    target = Target(url)
    payload = target.encode({"model": "stable", "stream": stream, "max_tokens": 12,
                             "messages": [{"role": "user", "content": "Summarise the release notes."}]})
    done = 0
    end = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done
        while time.monotonic() < end:
            if await target.one(payload) is not None:
                done += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    target.close()
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--keep", type=Path, default=None, help="also write py-spy's collapsed stacks here")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        upstream = stack.enter_context(gw.constant_upstream(workdir))
        proxy = stack.enter_context(gw.observer_proxy(workdir, upstream.url))
        asyncio.run(load(proxy.url, 3.0, args.concurrency, args.stream))  # warm-up
        raw = workdir / "stacks.txt"
        record = subprocess.Popen([spy, "record", "--pid", str(proxy.proc.pid), "--rate", "1000", "--nonblocking",
                                   "--format", "raw", "--output", str(raw), "--duration",
                                   str(int(args.seconds) + 1)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)
        c0 = proxy.cpu_seconds()
        served = asyncio.run(load(proxy.url, args.seconds, args.concurrency, args.stream))
        cpu = proxy.cpu_seconds() - c0
        _, err = record.communicate(timeout=60)
        if not raw.exists():
            raise SystemExit(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
        if args.keep is not None:
            shutil.copy(raw, args.keep)
        parts = summarise(raw)
    busy = {k: v for k, v in parts.items() if not k.startswith("idle")}
    total_busy = sum(busy.values()) or 1
    us_per_request = cpu / max(1, served) * 1e6
    print(f"{served} requests in {args.seconds:.0f} s at concurrency {args.concurrency} "
          f"({'streamed' if args.stream else 'plain'}); proxy CPU {us_per_request:.0f} µs per request")
    print(f"{'part':<34}{'share of busy samples':>24}{'µs per request':>16}")
    for part, n in sorted(busy.items(), key=lambda kv: -kv[1]):
        print(f"{part:<34}{n / total_busy:>23.1%}{n / total_busy * us_per_request:>16.0f}")
    print(json.dumps({"requests": served, "cpu_us_per_request": round(us_per_request, 1),
                      "parts_us_per_request": {k: round(v / total_busy * us_per_request, 1) for k, v in busy.items()},
                      "samples": sum(parts.values())}))


if __name__ == "__main__":
    main()
