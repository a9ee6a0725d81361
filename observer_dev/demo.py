"""`make demo`: a simulated stable + canary fleet, the observer scraping it, and a real Prometheus
scraping the observer; prints where to look and runs until Ctrl-C (or `--duration SECONDS`).

    python -m observer_dev.demo [--config deploy/observer.yaml] [--duration 20] [--with-gameday]
    python -m observer_dev.demo --real [--duration 60]      # `make demo REAL=1`: real vLLM instead of the simulator

With `--duration` the demo checks at the end that Prometheus holds per-version TTFT p95 data and
exits 1 naming what is missing. `--real` runs two real vLLM servers (the CPU build, Gemma 3 270M; the canary
with `--max-num-seqs 1`, so its requests queue) and a MiniLM embedding server instead of the simulator,
with a small bounded load on both (set up by `make real-vllm`). `--with-gameday` then runs `observer
gameday` (observer_dev/gameday/), the scripted canary scenarios, each checked through the whole chain; the exit
code is non-zero on a mismatch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

from observer.config import ObserverConfig, load_config
from observer.errors import ObserverError
from observer_dev.promserver import PrometheusError, free_port, log_tail, port_free, run_prometheus, stop_process
from observer_dev.sim.fleet import FleetHandle, run_fleet
from observer_dev.sim.profile import parse_profile_args
from observer_dev.vllmproc import sigterm_stops

TTFT_P95_QUERY = 'histogram_quantile(0.95, sum by (version, le) (rate(observer_ttft_seconds_bucket[1m])))'
WINDOW_TTFT_P95_QUERY = 'observer_window_ttft_seconds{quantile="0.95"}'


class DemoError(ObserverError):
    """A part of the demo could not start or produced no data."""


@dataclass
class DemoRun:
    """What a running demo offers to hooks such as the game day."""

    config: ObserverConfig
    config_path: Path
    fleet: FleetHandle
    observer_url: str
    prometheus_url: str
    workdir: Path
    say: Callable[[str], None]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant PromQL query against the demo's Prometheus."""
        r = httpx.get(f"{self.prometheus_url}/api/v1/query", params={"query": promql}, timeout=10.0)
        body = r.json()
        if body.get("status") != "success":
            raise DemoError(f"Prometheus query failed: {promql}: {body.get('error')}")
        return list(body["data"]["result"])


def _wait(url: str, *, timeout: float, what: str, alive: Callable[[], bool] = lambda: True) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not alive():
            raise DemoError(f"{what} exited before it was ready")
        try:
            r = httpx.get(url, timeout=1.0)
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as e:
            last = str(e) or type(e).__name__
        time.sleep(0.2)
    raise DemoError(f"{what} not ready at {url} after {timeout:.0f}s ({last})")


@contextmanager
def _process(args: list[str], *, log: Path, env: dict[str, str] | None = None
             ) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        yield proc
    finally:
        stop_process(proc)


def start_prometheus(stack: ExitStack, *, workdir: Path, target: str, port: int, interval: str) -> str:
    """Start /usr/bin/prometheus scraping the observer at `target` (host:port); return its URL."""
    try:
        prom = stack.enter_context(run_prometheus([target], port=port, scrape_interval=interval, workdir=workdir))
    except PrometheusError as e:
        raise DemoError(str(e)) from e
    return prom.url


def start_observer(stack: ExitStack, *, config_path: Path, config: ObserverConfig, workdir: Path) -> str:
    """Run `observer serve --config FILE` as a subprocess; return its URL once /healthz answers."""
    host, port = config.server.host, config.server.port
    if not port_free(port):
        raise DemoError(f"port {port} (server.port) is in use; stop what runs there or set "
                        "OBSERVER__SERVER__PORT")
    log = workdir / "observer.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = stack.enter_context(_process(
        [sys.executable, "-m", "observer", "serve", "--config", str(config_path), "--log-level", "WARNING"],
        log=log, env=env))
    url = f"http://{'127.0.0.1' if host in {'0.0.0.0', ''} else host}:{port}"
    try:
        _wait(f"{url}/healthz", timeout=60, what="the observer", alive=lambda: proc.poll() is None)
    except DemoError as e:
        raise DemoError(f"{e}; its log ends:\n{log_tail(log)}") from e
    return url


def graph_url(prometheus_url: str, *queries: str) -> str:
    """A Prometheus UI link opening `queries` as graphs over the last 15 minutes."""
    params: dict[str, str] = {}
    for i, q in enumerate(queries):
        params.update({f"g{i}.expr": q, f"g{i}.tab": "0", f"g{i}.range_input": "15m"})
    return f"{prometheus_url}/graph?{urlencode(params)}"


def check_ttft(demo: DemoRun, *, timeout: float) -> dict[str, float]:
    """Wait until Prometheus has a TTFT p95 per version; return them (DemoError naming what is missing)."""
    wanted = set(demo.fleet.versions)
    deadline = time.monotonic() + timeout
    found: dict[str, float] = {}
    while True:
        found = {}
        for series in demo.query(TTFT_P95_QUERY):
            value = float(series["value"][1])
            if value == value:  # NaN while a version has no requests in the window
                found[series["metric"].get("version", "")] = value
        if wanted <= set(found) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    missing = wanted - set(found)
    if missing:
        raise DemoError(f"Prometheus has no TTFT p95 for version(s) {sorted(missing)} (query: {TTFT_P95_QUERY})")
    return found


def run(argv: list[str] | None = None) -> int:
    """Run the demo; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m observer_dev.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("deploy/observer.yaml"))
    parser.add_argument("--duration", type=float, default=None, help="Stop after SECONDS and check the data.")
    parser.add_argument("--profile", action="append", default=[], help="VERSION=PRESET, e.g. canary=slow.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prometheus-port", type=int, default=9090, help="0: any free port.")
    parser.add_argument("--prometheus-interval", default="5s")
    parser.add_argument("--with-gameday", action="store_true", help="Run the canary game day on the demo.")
    parser.add_argument("--real", action="store_true", help="Real vLLM servers instead of the simulator.")
    parser.add_argument("--servers", action="append", default=[], metavar="NAME=URL",
                        help="With --real: use these running servers (stable, canary, embedder) instead of "
                             "starting them, e.g. stable=http://127.0.0.1:8000 (the real test tier's).")
    parser.add_argument("--observer-port", type=int, default=0,
                        help="With --real: the observer's port, where the generators send their OTLP spans "
                             "(0: any free port; give the port running --servers export to).")
    args = parser.parse_args(argv)

    def say(message: str) -> None:
        print(message, flush=True)

    # `kill` (SIGTERM) stops the demo like Ctrl-C, so the observer and Prometheus are stopped too.
    sigterm_stops()
    workdir = Path(tempfile.mkdtemp(prefix="observer-demo-"))
    try:
        if args.real:
            return _run_real(args, workdir=workdir, say=say)
        config = load_config(args.config)
        profiles = parse_profile_args(args.profile)
        with ExitStack() as stack:
            fleet = stack.enter_context(run_fleet(config, profiles, seed=args.seed))
            say(f"simulated fleet up: {', '.join(f'{n} → {fleet.url(n)}' for n in fleet.versions)}; "
                f"DCGM {', '.join(fleet.dcgm_urls())}")
            observer_url = start_observer(stack, config_path=args.config, config=config, workdir=workdir)
            port = args.prometheus_port if args.prometheus_port and port_free(args.prometheus_port) else free_port()
            target = observer_url.removeprefix("http://")
            prom_url = start_prometheus(stack, workdir=workdir, target=target, port=port,
                                        interval=args.prometheus_interval)
            demo = DemoRun(config=config, config_path=args.config, fleet=fleet, observer_url=observer_url,
                           prometheus_url=prom_url, workdir=workdir, say=say)
            say("")
            say("observer demo is running (simulated vLLM + DCGM; real observer; real Prometheus):")
            say(f"  observer metrics   {observer_url}/metrics")
            say(f"  signals (JSON)     {observer_url}/api/v1/signals")
            say(f"  canary report      {observer_url}/report")
            say(f"  API docs           {observer_url}/docs")
            say(f"  Prometheus         {prom_url}")
            say(f"  TTFT p95 by version {graph_url(prom_url, TTFT_P95_QUERY, WINDOW_TTFT_P95_QUERY)}")
            say(f"    query: {TTFT_P95_QUERY}")
            say(f"    query: {WINDOW_TTFT_P95_QUERY}")
            canary = next((v.name for v in config.fleet.versions if v.role == "canary" and v.name in fleet.versions),
                          next(reversed(fleet.versions)))
            say(f"  make the canary slow: curl -X PUT {fleet.url(canary)}/sim/profile "
                "-H 'content-type: application/json' -d '{\"preset\": \"slow\"}'")
            say(f"  logs in {workdir} (removed at exit)")
            if args.with_gameday:
                return _gameday(demo)
            if not _keep_running(args.duration, say):
                return 0
            found = check_ttft(demo, timeout=30.0)
            say("TTFT p95 from Prometheus: " + ", ".join(f"{v}={s * 1000:.0f} ms" for v, s in sorted(found.items())))
            return 0
    except (ObserverError, OSError) as e:
        print(f"demo failed: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


OUTSIDE_ENGINE_QUERY = ('histogram_quantile(0.5, sum by (version, le) '
                        '(rate(observer_outside_engine_seconds_bucket{part="e2e"}[1m])))')
"""Median time a proxied request spends outside vLLM's engine (API server, tokenization, network), from the
engine spans vLLM exports to the observer."""


def _real_config(servers: dict[str, Any], *, port: int, proxies: dict[str, int], workdir: Path) -> str:
    import yaml

    versions = [{"name": name, "role": name, "vllm": [servers[name].url + "/metrics"],
                 "openai": servers[name].url + "/v1", "expected_traffic_weight": 0.5}
                for name in ("stable", "canary")]
    return yaml.safe_dump({
        "fleet": {"versions": versions},
        "scrape": {"interval_seconds": 5, "timeout_seconds": 5, "window_seconds": 300},
        "server": {"host": "127.0.0.1", "port": port, "auth": {"mode": "none"}},
        "sampling": {"store": {"path": str(workdir / "samples.db")}, "fraction": 0.25,
                     "versions": {name: {"listen": f"127.0.0.1:{p}"} for name, p in proxies.items()},
                     "engine_spans": {"enabled": True}},
        "quality": {"enabled": False},
        "drift": {"baseline_dir": str(workdir / "baselines"),
                  "embedder": {"kind": "remote", "url": servers["embedder"].url + "/v1", "model": "minilm"}},
        "canary": {"window_seconds": 900, "interval_seconds": 10},
    })


def _load(urls: list[str], stop: threading.Event) -> None:
    """About one completion per second per server, 16 tokens, until `stop` (bounded, loopback only)."""
    with httpx.Client(timeout=60) as client:
        i = 0
        while not stop.is_set():
            for url in urls:
                with suppress(httpx.HTTPError):
                    client.post(url + "/v1/completions", json={"model": "llm", "prompt": f"demo request {i}",
                                                               "max_tokens": 16, "temperature": 0.7})
            i += 1
            stop.wait(1.0)


def _run_real(args: argparse.Namespace, *, workdir: Path, say: Callable[[str], None]) -> int:
    """The demo on real vLLM servers (stable, a queueing canary, an embedder), observer and Prometheus."""
    from observer_dev.vllmproc import VllmSpec, run_vllm, with_otlp

    port = args.observer_port or free_port()  # the observer's: the generators send it their OTLP request spans
    traces = f"http://127.0.0.1:{port}/v1/traces"
    specs = [with_otlp(VllmSpec(name="stable", core=0), traces),
             with_otlp(VllmSpec(name="canary", core=1, max_num_seqs=1), traces),
             VllmSpec(name="embedder", served_name="minilm", core=0, runner="pooling", max_model_len=256)]
    proxies = {"stable": free_port(), "canary": free_port()}
    given = _given_servers(args.servers)
    with ExitStack() as stack:
        if given:
            servers: dict[str, Any] = given
        else:
            say("starting two real vLLM generators and an embedder (about a minute) ...")
            servers = stack.enter_context(run_vllm(specs, log_dir=workdir / "vllm"))
        say("real vLLM up: " + ", ".join(f"{n} → {s.url}" for n, s in servers.items()))
        config_path = workdir / "observer.yaml"
        config_path.write_text(_real_config(servers, port=port, proxies=proxies, workdir=workdir))
        config = load_config(config_path)
        observer_url = start_observer(stack, config_path=config_path, config=config, workdir=workdir)
        prom_port = args.prometheus_port if args.prometheus_port and port_free(args.prometheus_port) else free_port()
        prom_url = start_prometheus(stack, workdir=workdir, target=observer_url.removeprefix("http://"),
                                    port=prom_port, interval=args.prometheus_interval)
        stop = threading.Event()
        proxy_urls = {name: f"http://127.0.0.1:{p}" for name, p in proxies.items()}
        loader = threading.Thread(target=_load, args=(list(proxy_urls.values()), stop), daemon=True)
        loader.start()
        stack.callback(loader.join, 70)
        stack.callback(stop.set)
        say("")
        say("observer demo is running on REAL vLLM (CPU build, Gemma 3 270M" +
            ("; servers given with --servers):" if given else "; canary queues: --max-num-seqs 1):"))
        say(f"  observer metrics   {observer_url}/metrics")
        say(f"  canary verdict     {observer_url}/api/v1/canary/verdict?canary=canary&baseline=stable")
        say(f"  canary report      {observer_url}/report/canary/canary?baseline=stable")
        say(f"  Prometheus         {prom_url}")
        say(f"  TTFT p95 by version {graph_url(prom_url, TTFT_P95_QUERY)}")
        say(f"  raw vLLM metrics   {servers['stable'].url}/metrics, {servers['canary'].url}/metrics")
        say(f"  sampling proxies   {', '.join(f'{n} → {u}' for n, u in proxy_urls.items())} (the load goes "
            "through them)")
        say(f"  outside the engine {graph_url(prom_url, OUTSIDE_ENGINE_QUERY)}")
        say(f"  logs in {workdir} (removed at exit)")
        if not _keep_running(args.duration, say):
            return 0
        deadline = time.monotonic() + 60
        found: dict[str, dict[str, float]] = {}
        queries = {"TTFT p95": TTFT_P95_QUERY, "outside-engine p50": OUTSIDE_ENGINE_QUERY}
        while time.monotonic() < deadline and not all(len(found.get(k, {})) == 2 for k in queries):
            for what, query in queries.items():
                r = httpx.get(f"{prom_url}/api/v1/query", params={"query": query}, timeout=10).json()
                found[what] = {x["metric"]["version"]: float(x["value"][1]) for x in r["data"]["result"]
                               if float(x["value"][1]) == float(x["value"][1])}
            time.sleep(1.0)
        for what, query in queries.items():
            if len(found.get(what, {})) < 2:
                raise DemoError(f"Prometheus has no {what} for both versions (query: {query})")
            say(f"{what} from Prometheus: " + ", ".join(f"{v}={s * 1000:.1f} ms"
                                                         for v, s in sorted(found[what].items())))
        return 0


@dataclass(frozen=True)
class _Given:
    """A vLLM server some other process started and stops (`--servers NAME=URL`)."""

    url: str


def _given_servers(items: list[str]) -> dict[str, _Given]:
    """`--servers` as {name: server}: all of stable, canary and embedder, or none (DemoError otherwise)."""
    given: dict[str, _Given] = {}
    for item in items:
        name, sep, url = item.partition("=")
        if not sep or not url.startswith("http"):
            raise DemoError(f"--servers {item!r}: expected NAME=URL, e.g. stable=http://127.0.0.1:8000")
        given[name] = _Given(url.rstrip("/"))
    if given and set(given) != {"stable", "canary", "embedder"}:
        raise DemoError(f"--servers names {sorted(given)}: give exactly stable, canary and embedder")
    return given


def _keep_running(duration: float | None, say: Callable[[str], None]) -> bool:
    """Run for `duration` seconds (forever when None); False when stopped with Ctrl-C or SIGTERM."""
    started = time.monotonic()
    try:
        if duration is None:
            say("Ctrl-C to stop.")
            while True:
                time.sleep(3600)
        while time.monotonic() - started < duration:
            time.sleep(0.5)
    except KeyboardInterrupt:
        say("stopping")
        return False
    return True


def _gameday(demo: DemoRun) -> int:
    """Run the canary game day (it drives its own simulated fleet, observer and Prometheus)."""
    from rich.console import Console

    from observer_dev.gameday import runner

    print("running the canary game day (about 2 minutes) ...", flush=True)
    rows = runner.play(runner.Kind.SINGLE)
    return 0 if runner.show(runner.Kind.SINGLE, rows, Console()) else 1


if __name__ == "__main__":
    sys.exit(run())
