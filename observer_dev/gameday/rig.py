"""The game day's rig parts every player shares: the observer's config for a scenario, the simulator's profiles,
a real Prometheus, an observer started in this process, and a page that answers HTML where JSON belongs."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import yaml

from observer.config import ObserverConfig, parse_config
from observer.config.canary import default_metrics
from observer.conventions.fingerprint import template_hash
from observer.httpserve import threaded_http_server
from observer.service import ThreadedService, start_in_thread
from observer_dev.gameday.scenarios import (
    FINGERPRINT_OLD,
    FINGERPRINT_WINDOW,
    NEIGHBOUR,
    STABLE_PODS,
    VICTIM,
    GamedayError,
    Plan,
    Scenario,
)
from observer_dev.promserver import PrometheusError, run_prometheus
from observer_dev.sim.dcgm_exposition import MODEL_NAME as SIM_GPU_MODEL

# The example golden sets travel as the dev package's data (a link to the repository's golden_sets/ in a
# checkout, copied into the wheel), so an installed game day finds them too.
TENANT_TIME_SCALE = 1 / 120
"""The noisy-neighbour scenario's alert windows: its hour back is 30 s, about ten rounds; its 10-minute rate 5 s."""
GOLDEN_SETS = Path(__file__).resolve().parents[1] / "golden_sets"


def wait_for(pred: Callable[[], bool], *, timeout: float, what: str, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(every)
    raise GamedayError(f"timed out after {timeout:.0f}s waiting for {what}")


@contextmanager
def prometheus(target: str, *, interval: str = "1s") -> Iterator[str]:
    """A real Prometheus (Debian `prometheus`) on 127.0.0.1 scraping `target`; yields its URL."""
    try:
        with run_prometheus([target], scrape_interval=interval) as prom:
            yield prom.url
    except PrometheusError as e:
        raise GamedayError(str(e)) from e


RunningObserver = ThreadedService


def start_observer(config: ObserverConfig) -> RunningObserver:
    """Start an observer for `config` on config.server's host:port; return when /healthz answers."""
    try:
        return start_in_thread(config, name="gameday-observer")
    except RuntimeError as e:
        raise GamedayError(str(e)) from e


def observer_config(ports: Mapping[str, int], plan: Plan, scenario: Scenario, workdir: Path | None = None
            ) -> ObserverConfig:
    return parse_config(config_yaml(ports, plan, scenario, workdir), source=f"gameday:{scenario.name}",
                        environ={})


def config_yaml(ports: Mapping[str, int], plan: Plan, scenario: Scenario, workdir: Path | None) -> str:
    versions = []
    for name, role, weight, pods in (("stable", "stable", 0.8, STABLE_PODS), ("canary", "canary", 0.2, 1)):
        keys = [f"{name}{i}" for i in range(pods)]
        versions.append({"name": name, "role": role, "vllm": [f"http://127.0.0.1:{ports[k]}/metrics" for k in keys],
                         "openai": f"http://127.0.0.1:{ports[keys[0]]}/v1",
                         "dcgm": [f"http://127.0.0.1:{ports['dcgm']}/metrics"],
                         "pods": [{"namespace": "llm-serving", "pod": f"sim-{name}-{i}"} for i in range(pods)],
                         "expected_traffic_weight": weight,
                         # Both behind one llm-d endpoint picker, routed by target model (the simulator's names).
                         "router": {"kind": "llm-d-epp", "urls": [f"http://127.0.0.1:{ports['router']}/metrics"],
                                    "model": f"sim-{name}"}})
    metrics = [m.model_dump(mode="json", exclude_defaults=True) for m in default_metrics()] + \
        [dict(m) for m in scenario.metrics]
    for m in metrics:
        if m["name"] == "golden" and scenario.needs == "quality":
            m["critical"] = True  # a gate in the quality scenario; elsewhere quality is off (nodata)
    data: dict[str, Any] = {
        "fleet": {"versions": versions},
        "scrape": {"interval_seconds": plan.scrape_interval, "timeout_seconds": plan.scrape_interval,
                   "window_seconds": 60,
                   **({"hung_after_seconds": scenario.hung_after} if scenario.hung_after else {})},
        # Loopback only, and the game day mirrors samples into ingest itself: no token to hand around.
        "server": {"host": "127.0.0.1", "port": ports["observer"], "auth": {"mode": "none"}},
        # Time is compressed (one round of simulated load per ~2 s): two-second slices keep about one round
        # per slice, as one minute of real traffic is one slice in production.
        "canary": {"interval_seconds": plan.scrape_interval, "window_seconds": 3600, "metrics": metrics,
                   "slice_seconds": 2.0 * plan.scrape_interval,
                   # The rendered gates' planned ends are in real minutes; a compressed step never reaches
                   # them, and its gate looks once, at the end: the anytime-valid tests, as the rounds use.
                   "planned_end": False,
                   # Four stable pods and one canary pod at an 80/20 split: the same load per pod.
                   "fairness": {"per_pod_load_tolerance": 1.0},
                   "observer_url": f"http://127.0.0.1:{ports['observer']}",
                   "prometheus_url": f"http://127.0.0.1:{ports.get('prometheus', 9090)}"},
        "sampling": {"enabled": False},
        "cost": {"gpu_hour_prices": {SIM_GPU_MODEL: 4.0}},
        "drift": {"enabled": scenario.needs == "drift"},
        "quality": {"enabled": scenario.needs == "quality"},
    }
    if scenario.canary_end:
        data["canary"]["end"] = dict(scenario.canary_end)
    if scenario.needs == "quality":
        data["quality"].update({"golden_dirs": [str(GOLDEN_SETS)], "golden_sets": ["factual"],
                                "interval_seconds": 1.0, "run_at_start": True, "concurrency": 8,
                                "live": {"enabled": False}})
    if scenario.needs == "goodput":
        work = workdir or Path(tempfile.gettempdir())
        # Samples (with the simulator's per-request timings) reach the store through mirror ingest; the
        # goodput live check scores them, the golden sets stay idle.
        data["sampling"] = {"enabled": True, "store": {"path": str(work / "samples.db")}}
        data["quality"] = {"enabled": True, "golden_dirs": [str(GOLDEN_SETS)], "golden_sets": ["factual"],
                           "interval_seconds": 3600, "run_at_start": False,
                           "live": {"interval_seconds": 1.0, "checks": ["goodput"]}}
    if scenario.needs == "feedback":  # mirrored samples and the users' feedback on them, nothing else scored
        work = workdir or Path(tempfile.gettempdir())
        data["sampling"] = {"enabled": True, "store": {"path": str(work / "samples.db")}}
    if scenario.needs == "proxy":  # the observer's in-process sampling proxy fronts the canary
        work = workdir or Path(tempfile.gettempdir())
        data["sampling"] = {"enabled": True, "store": {"path": str(work / "samples.db")},
                            "versions": {"canary": {"listen": f"127.0.0.1:{ports['proxy']}"}}}
    if scenario.needs == "fingerprint":
        work = workdir or Path(tempfile.gettempdir())
        for v in versions:  # both versions were released with the old system prompt
            v["prompt_template_hash"] = template_hash([FINGERPRINT_OLD])
        data["sampling"] = {"enabled": True, "store": {"path": str(work / "samples.db")},
                            "fingerprint": {"interval_seconds": 0.5, "window_seconds": FINGERPRINT_WINDOW,
                                            "reference_seconds": 600.0, "min_samples": 20}}
    if scenario.needs == "tenants":  # mirrored samples name their tenant; alert windows an hour long, scaled
        work = workdir or Path(tempfile.gettempdir())
        data["sampling"] = {"enabled": True, "store": {"path": str(work / "samples.db")},
                            "tenants": {"allow": [NEIGHBOUR, VICTIM]}}
        data["slo"] = {"time_scale": TENANT_TIME_SCALE}
    if scenario.needs == "drift":
        work = workdir or Path(tempfile.gettempdir())
        # Samples reach the store through mirror ingest; the baseline is pinned from stable's samples.
        data["sampling"] = {"enabled": True, "store": {"path": str(work / "samples.db")}}
        data["drift"].update({"interval_seconds": 10, "window_seconds": 3600, "min_samples": 200,
                              "consecutive": 1, "permutations": 999, "baseline_dir": str(work / "baselines"),
                              "models": {"stable": "llm", "canary": "llm"}})
        data["quality"] = {"enabled": False}
    return yaml.safe_dump(data)


def sim_profile(base: Mapping[str, Any], plan: Plan, rps: float) -> dict[str, Any]:
    out = {"preset": "healthy", "load_rps": rps, "time_scale": 0.0, "error_rate": 0.0}
    out.update(base)
    if out.get("preset") == "idle":
        out["load_rps"] = 0.0
    return out


def wait_ready(obs: RunningObserver, what: str) -> None:
    wait_for(lambda: httpx.get(obs.url + "/readyz", timeout=1).status_code == 200, timeout=20, what=what)


@contextmanager
def html_page_server() -> Iterator[str]:
    """A loopback server answering every GET with 200 and an HTML login page (an ingress default backend,
    an auth proxy, a wrong Service port); yields its URL, stops on exit."""
    page = b"<!doctype html><html><head><title>Sign in</title></head><body>Please sign in</body></html>"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            return None

    with threaded_http_server(Handler) as port:
        yield f"http://127.0.0.1:{port}/api/v1/canary/verdict"


