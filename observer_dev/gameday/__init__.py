"""`observer gameday`: drive the simulated fleet through canary scenarios and check the whole chain.

simulator (observer_dev.sim) → observer (scrape, quality, canary judge) → a real Prometheus scraping the
observer → the generated Argo Prometheus-provider queries evaluated against that Prometheus with Argo's
condition semantics → the web gate and guardrail evaluated on the live verdict endpoint.

Each scenario gets a fresh observer (so windows never mix scenarios); the simulator and Prometheus live
for the whole game day. Load is injected with the simulator's `advance` (simulated seconds of built-in
load at once), so a scenario takes seconds, not the minutes of a real canary step. Everything binds to
127.0.0.1 on free ports.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from observer import conventions as names
from observer.config import ObserverConfig, parse_config
from observer.config.canary import default_metrics
from observer.errors import ObserverError
from observer.render import argo as argo_render
from observer.service import ThreadedService, start_in_thread
from observer_dev.gameday.argo import Phase
from observer_dev.gameday.flagger import FAILED as FLAGGER_FAILED
from observer_dev.gameday.flagger import SUCCEEDED as FLAGGER_SUCCEEDED
from observer_dev.gameday.flagger import FlaggerLoop
from observer_dev.gameday.looks import (
    ARGO_FAIL_LOOKS,
    DIMENSION_LOOKS,
    alert_exprs,
    alert_problems,
    alert_round,
    argo_checks,
    check_row,
    firing,
    must_fail_streak,
    report_badge,
    settled,
    verdict_body,
    web_phase,
)
from observer_dev.gameday.scenarios import (
    FINGERPRINT_NEW,
    FINGERPRINT_OLD,
    FINGERPRINT_WINDOW,
    FULL,
    SCENARIOS,
    SHORT,
    STABLE_PODS,
    GamedayError,
    Plan,
    Report,
    Row,
    Scenario,
)
from observer_dev.gameday.users import GamedayUsersError, give_feedback
from observer_dev.promserver import PrometheusError, free_port, run_prometheus
from observer_dev.sim.dcgm_exposition import MODEL_NAME as SIM_GPU_MODEL

__all__ = ["FULL", "SCENARIOS", "SHORT", "GamedayError", "Plan", "Report", "Row", "Scenario", "print_report",
           "run_gameday", "run_scenario", "start_observer"]

# The example golden sets travel as the dev package's data (a link to the repository's golden_sets/ in a
# checkout, copied into the wheel), so an installed game day finds them too.
GOLDEN_SETS = Path(__file__).resolve().parents[1] / "golden_sets"
FLAGGER_EXPECT = frozenset({"pass", "fail", "nodata", "idle", "inconclusive", "not-pass"})
FLAGGER_INTERVALS = 8
"""Flagger's intervals after the last look (one runs beside every look before): the example Canary needs 5 steps
of 10 % to its 50 %, then confirm-promotion; a fail ends it at once (the rollback webhook); undecided verdicts
wait at 50 %."""




# --- processes ------------------------------------------------------------------------------------

def _wait(pred: Callable[[], bool], *, timeout: float, what: str, every: float = 0.1) -> None:
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


def _config(ports: Mapping[str, int], plan: Plan, scenario: Scenario, workdir: Path | None = None
            ) -> ObserverConfig:
    return parse_config(_config_yaml(ports, plan, scenario, workdir), source=f"gameday:{scenario.name}",
                        environ={})


def _config_yaml(ports: Mapping[str, int], plan: Plan, scenario: Scenario, workdir: Path | None) -> str:
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
        from observer.conventions.fingerprint import template_hash

        work = workdir or Path(tempfile.gettempdir())
        for v in versions:  # both versions were released with the old system prompt
            v["prompt_template_hash"] = template_hash([FINGERPRINT_OLD])
        data["sampling"] = {"enabled": True, "store": {"path": str(work / "samples.db")},
                            "fingerprint": {"interval_seconds": 0.5, "window_seconds": FINGERPRINT_WINDOW,
                                            "reference_seconds": 600.0, "min_samples": 20}}
    if scenario.needs == "drift":
        work = workdir or Path(tempfile.gettempdir())
        # Samples reach the store through mirror ingest; the baseline is pinned from stable's samples.
        data["sampling"] = {"enabled": True, "store": {"path": str(work / "samples.db")}}
        data["drift"].update({"interval_seconds": 10, "window_seconds": 3600, "min_samples": 200,
                              "consecutive": 1, "permutations": 999, "baseline_dir": str(work / "baselines"),
                              "models": {"stable": "llm", "canary": "llm"}})
        data["quality"] = {"enabled": False}
    return yaml.safe_dump(data)


def _profile(base: Mapping[str, Any], plan: Plan, rps: float) -> dict[str, Any]:
    out = {"preset": "healthy", "load_rps": rps, "time_scale": 0.0, "error_rate": 0.0}
    out.update(base)
    if out.get("preset") == "idle":
        out["load_rps"] = 0.0
    return out


def _ready(obs: RunningObserver, what: str) -> None:
    _wait(lambda: httpx.get(obs.url + "/readyz", timeout=1).status_code == 200, timeout=20, what=what)


def _ingest(fleet: Any, observer_url: str, version: str, *, want: int, seconds: float) -> list[dict[str, Any]]:
    """Mirror `want` of the simulator's recent `version` requests into the observer (POST /api/v1/samples);
    returns what was mirrored."""
    seen: set[tuple[float, str]] = set()
    batch: list[dict[str, Any]] = []
    deadline = time.monotonic() + 120
    while len(seen) < want and time.monotonic() < deadline:
        fleet.advance(version, seconds)
        for x in fleet.recent(version, 1000):
            key = (x.ts, x.prompt)
            if key in seen or not x.output:
                continue
            seen.add(key)
            # Each simulated request is a conversation of its own (a keyed id, as a sidecar sends it).
            conversation = hashlib.sha256(f"{version}:{x.ts}:{x.prompt}".encode()).hexdigest()[:32]
            batch.append({"version": version, "prompt": x.prompt, "output": x.output, "ts": x.ts,
                          "conversation_key": conversation, "response_id": f"chatcmpl-{conversation}",
                          "model": "llm", "finish_reason": x.finish_reason, "prompt_tokens": x.prompt_tokens,
                          "output_tokens": x.output_tokens, "latency_s": x.latency_s, "ttft_s": x.ttft_s})
    for i in range(0, len(batch), 1000):
        r = httpx.post(f"{observer_url}/api/v1/samples", json={"samples": batch[i:i + 1000]}, timeout=30)
        if r.status_code >= 300:
            raise GamedayError(f"ingest of {version} samples answered HTTP {r.status_code}: {r.text[:200]}")
    return batch


def _prepare_drift(fleet: Any, observer_url: str, cfg: ObserverConfig) -> None:
    """Ingest stable samples, pin and promote a baseline from them (as `observer baseline pin`, with the
    observer's config `cfg`: its store and baseline folder), ingest canary samples."""
    from observer.analyse.drift.pinning import pin_baseline

    n = len(_ingest(fleet, observer_url, "stable", want=1500, seconds=5.0))
    try:
        pin_baseline(cfg, "stable", now=time.time(), created_by="gameday", promote=True)
    except ObserverError as e:
        raise GamedayError(f"could not pin a baseline from {n} stable samples: {e}") from e
    _ingest(fleet, observer_url, "canary", want=500, seconds=5.0)


def _ingest_fingerprinted(observer_url: str, version: str, system: str, *, n: int, ts: float) -> None:
    """Mirror `n` chat samples of `version` whose requests carry `system` as their system prompt."""
    batch = [{"version": version, "output": "ok", "ts": ts + i * 1e-3, "model": "llm",
              "messages": [{"role": "system", "content": system}, {"role": "user", "content": f"order {i}?"}],
              "sampling": {"temperature": 0.2, "max_tokens": 64}} for i in range(n)]
    r = httpx.post(f"{observer_url}/api/v1/samples", json={"samples": batch}, timeout=30)
    if r.status_code >= 300:
        raise GamedayError(f"ingest of {version} samples answered HTTP {r.status_code}: {r.text[:200]}")


def _through_proxy(port: int, *, n: int) -> None:
    """`n` users' chat requests through the observer's sampling proxy (whatever each one answers)."""
    body = {"messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 16}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        for _ in range(n):
            client.post("/v1/chat/completions", json=body)


@contextmanager
def html_page_server() -> Iterator[str]:
    """A loopback server answering every GET with 200 and an HTML login page (an ingress default backend,
    an auth proxy, a wrong Service port); yields its URL, stops on exit."""
    from http.server import BaseHTTPRequestHandler

    from observer.httpserve import threaded_http_server

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


def _run_html(s: Scenario, row: Row, *, config: ObserverConfig, prom_url: str) -> None:
    """The verdict URL answers 200 with HTML and no observer runs: the gate run must not be Successful."""
    sel = names.CANARY_VERDICT + '{canary="canary",baseline="stable"}'

    def verdict_gone() -> bool:  # Prometheus marks the stopped observer's series stale at its next scrape
        r = httpx.get(f"{prom_url}/api/v1/query", params={"query": sel}, timeout=5).json()
        return not r["data"]["result"]

    _wait(verdict_gone, timeout=30, what="Prometheus to mark the stopped observer's verdict stale", every=0.25)
    with html_page_server() as url:
        row.web_gate, row.guardrail, row.prometheus, _ = argo_checks(config, prom_url, "", web_url=url)
        web = argo_render.gate_spec(config)["metrics"][0]
        alone = web_phase(web, url)[0]
    row.verdicts.append("html")
    ok, detail = check_row(s, row, {})
    row.ok = ok and alone is Phase.SUCCESSFUL  # the trap is real: the web metric alone passes on v1.9.1
    row.detail = (f"web metric alone: {alone} (Argo v1.9.1 passes a non-JSON 200); gate run: {row.web_gate}"
                  if row.ok else detail + f"; web metric alone: {alone}")


def run_scenario(s: Scenario, *, fleet: Any, ports: Mapping[str, int], plan: Plan, prom_url: str,
                 workdir: Path | None = None) -> Row:
    """Run one scenario against the running fleet and Prometheus with a fresh observer."""
    t0 = time.monotonic()
    row = Row(scenario=s.name, title=s.title, expected=s.expect)
    if s.html_at_verdict_url:
        _run_html(s, row, config=_config(ports, plan, s, workdir), prom_url=prom_url)
        row.seconds = time.monotonic() - t0
        return row
    fleet.set_profile("stable", **_profile(s.stable, plan, plan.stable_rps))
    fleet.set_profile("canary", **_profile(s.canary, plan, plan.canary_rps))
    config = _config(ports, plan, s, workdir)
    obs = start_observer(config)
    body: dict[str, Any] = {}
    streak = passes = 0
    users = np.random.default_rng(sum(map(ord, s.name)))  # the scenario's users, the same each run
    answered: set[str] = set()  # the answers they have seen
    try:
        _ready(obs, "the observer's first scrape")
        # The same pair through Flagger's loop, webhooks and MetricTemplates, interval by interval beside the
        # looks; its first interval starts the revision's analysis window (the payload's checksum).
        loop = FlaggerLoop.for_config(config, canary="canary", baseline="stable", checksum=s.name) \
            if s.expect in FLAGGER_EXPECT else None
        if loop is not None:
            loop.step(prom_url)
        if s.needs == "quality":
            _wait(lambda: verdict_body(obs.url)["metrics"].get("golden", {}).get("result") != "nodata", timeout=60,
                  what="golden-set results for both versions", every=0.5)
        if s.needs == "drift":
            assert workdir is not None
            _prepare_drift(fleet, obs.url, parse_config(_config_yaml(ports, plan, s, workdir),
                                                        source="gameday-drift.yaml"))
        exprs = alert_exprs(config) if s.alerts else {}
        if s.needs == "fingerprint":  # the hour before: both versions served the old system prompt
            for version in ("stable", "canary"):
                _ingest_fingerprinted(obs.url, version, FINGERPRINT_OLD, n=60, ts=time.time() - 300)
        for rnd in range(max(plan.max_rounds, s.min_rounds)):
            if s.change_after is not None and rnd == s.change_after and s.change:
                fleet.set_profile(s.change_version, replica=s.replica, **dict(s.change))
            if s.restart_after is not None and rnd == s.restart_after:
                obs.stop()
                obs = start_observer(config)
                _ready(obs, "the restarted observer's first scrape")
                row.verdicts.append(str(verdict_body(obs.url)["verdict"]))  # before any new data: never pass
            # Interleaved one simulated second at a time: a scrape mid-round sees both arms equally far
            # along, so no canary slice holds a round whose baseline half fell into the next slice.
            for _ in range(int(plan.round_seconds)):
                fleet.advance("stable", 1.0)
                fleet.advance("canary", 1.0)
            if s.needs == "drift":
                # More mirrored canary samples each round: the drift test's power grows with the window.
                _ingest(fleet, obs.url, "canary", want=250, seconds=5.0)
                time.sleep(plan.scrape_interval * 5.0)  # the drift job runs every 10 s
            elif s.needs == "proxy":
                _through_proxy(ports["proxy"], n=100)
                time.sleep(plan.scrape_interval * 2.0)
            elif s.needs == "fingerprint":
                time.sleep(FINGERPRINT_WINDOW + 0.5)  # the last round's samples leave the current window
                changed = s.change_after is not None and rnd >= s.change_after
                now = time.time()
                _ingest_fingerprinted(obs.url, "stable", FINGERPRINT_OLD, n=30, ts=now)
                _ingest_fingerprinted(obs.url, "canary", FINGERPRINT_NEW if changed else FINGERPRINT_OLD, n=30,
                                      ts=now)
                time.sleep(plan.scrape_interval * 2.0)  # one fingerprint check and one Prometheus scrape
            elif s.needs == "goodput":
                for version in ("stable", "canary"):  # both arms mirrored: the goodput check compares them
                    _ingest(fleet, obs.url, version, want=150, seconds=1.0)
                time.sleep(plan.scrape_interval * 3.0)  # live scoring runs every second
            elif s.needs == "feedback":  # both arms mirrored; their users answer some of what they got
                for version in ("stable", "canary"):
                    rate, negative = s.feedback[version]
                    try:
                        give_feedback(obs.url, _ingest(fleet, obs.url, version, want=150, seconds=1.0),
                                      response_rate=rate, negative=negative, rng=users, seen=answered)
                    except GamedayUsersError as e:
                        raise GamedayError(str(e)) from e
                time.sleep(plan.scrape_interval * 2.0)
            else:
                time.sleep(plan.scrape_interval * 2.0)  # about one round per two-second slice
            if s.expect == "alerts":
                if alert_round(s, row, rnd, exprs, prom_url):
                    break
                continue
            body = verdict_body(obs.url)
            row.verdicts.append(str(body["verdict"]))
            if loop is not None:
                loop.step(prom_url)
            streak = must_fail_streak(s, body, streak)
            passes = passes + 1 if row.verdicts[-1] == "pass" else 0
            # Traffic flows while Flagger analyses (its window starts at its first webhook, not with the looks): a
            # decided pass plays on until Flagger's loop has ended too, as the cluster game day's does.
            if settled(s, rnd, row.verdicts[-1], body, streak, passes) and (
                    s.expect != "pass" or loop is None or loop.phase in (FLAGGER_FAILED, FLAGGER_SUCCEEDED)):
                break
            if s.expect in ("nodata", "not-pass", "idle", "inconclusive") and rnd + 1 >= plan.max_rounds // 2 \
                    and (s.restart_after is None or rnd > s.restart_after + 2):
                break  # enough looks to show it never passes
        if s.expect == "alerts":
            problems = alert_problems(s, row, prom_url)
            row.ok, row.detail = not problems, "; ".join(problems) or ", ".join(
                f"{k} {v}" for k, v in row.prometheus.items())
            row.seconds = time.monotonic() - t0
            return row
        # Let the periodic judge export the gauges and Prometheus scrape them before Argo's queries run.
        want = {"pass": 1.0, "fail": -1.0}.get(row.verdicts[-1] if row.verdicts else "", 0.0)
        sel = names.CANARY_VERDICT + '{canary="canary",baseline="stable"}'

        def exported() -> bool:
            r = httpx.get(f"{prom_url}/api/v1/query", params={"query": sel}, timeout=5).json()
            res = r["data"]["result"]
            return bool(res) and float(res[0]["value"][1]) == want

        def drift_exported() -> bool:
            q = f'max({names.DRIFT_DETECTED}{{version="canary"}}) >= 1'
            r = httpx.get(f"{prom_url}/api/v1/query", params={"query": q}, timeout=5).json()
            return bool(r["data"]["result"])

        try:
            _wait(exported, timeout=15, what="Prometheus to scrape the verdict gauge", every=0.25)
            if s.expect == "drift":
                _wait(drift_exported, timeout=15, what="Prometheus to scrape the drift gauge", every=0.25)
        except GamedayError as e:
            row.detail = str(e)
        looked = len(row.verdicts)
        # Argo measures each Prometheus metric every interval of the step, and one Failed measurement counts: the
        # dimension's metric reads the periodic judgment's gauges, a scrape behind the web verdict, so a `fail`
        # scenario's measurements go on until it has failed too (or they run out).
        measurements = 1 if s.expect != "fail" else ARGO_FAIL_LOOKS + (DIMENSION_LOOKS if s.dimension else 0)
        for look in range(measurements):
            if look:
                time.sleep(plan.scrape_interval)
            row.web_gate, row.guardrail, row.prometheus, body = argo_checks(config, prom_url, obs.url)
            row.reads["Argo"] = (f"measurement {look + 1} after look {looked} ({time.monotonic() - t0:.0f} s): "
                                 f"web gate {row.web_gate} on verdict {body.get('verdict')}, guardrail "
                                 f"{row.guardrail}, Prometheus {row.prometheus}")
            # A gate run can fail on another dimension while the verdict read with it sits at its boundary
            # (inconclusive): that look does not settle a `fail` scenario; the next measurement does.
            decided = row.web_gate.startswith("Failed") and (s.expect != "fail" or body.get("verdict") == "fail")
            if decided and s.expect == "fail" and s.dimension:
                decided = row.prometheus.get(s.dimension, "").startswith("Failed")
            if decided:
                break
        if row.verdicts:
            row.verdicts[-1] = str(body["verdict"])
        if loop is not None:  # Flagger's intervals after the last look, to its end or FLAGGER_INTERVALS more
            row.flagger = loop.run(prom_url, intervals=FLAGGER_INTERVALS)
            row.reads["Flagger"] = f"after look {looked} ({time.monotonic() - t0:.0f} s): {row.flagger}"
        page = httpx.get(obs.url + "/report/canary/canary", params={"baseline": "stable"}, timeout=10)
        row.report = page.text if page.status_code == 200 else f"HTTP {page.status_code}: {page.text[:300]}"
        row.reads["report"] = f"after look {looked} ({time.monotonic() - t0:.0f} s): {report_badge(row.report)}"
        ok, detail = check_row(s, row, body)
        for alert in s.alerts:  # alerts a verdict scenario must also fire, as Prometheus evaluates them now
            if not firing(prom_url, exprs[alert], s.alert_labels):
                ok, detail = False, f"{detail}; {alert} not firing with {dict(s.alert_labels)}"
        row.ok, row.detail = ok, (row.detail + "; " + detail).strip("; ") if not ok else detail
    finally:
        obs.stop()
    row.seconds = time.monotonic() - t0
    return row


def run_gameday(*, short: bool = False, only: Sequence[str] | None = None, seed: int = 7) -> Report:
    """Run the scenarios (all, or `only`) and return the report; GamedayError if the rig cannot start."""
    from observer_dev.sim.fleet import run_fleet

    plan = SHORT if short else FULL
    # A pod the scheduler cannot place is an API object: the cluster game day (--cluster) plays those scenarios.
    here = [s for s in SCENARIOS if not s.pending_pods]
    chosen = [s for s in here if only is None or s.name in only]
    unknown = sorted(set(only or ()) - {s.name for s in here})
    if unknown:
        raise GamedayError(f"unknown scenario(s) {', '.join(unknown)} in the single process; known: "
                           f"{', '.join(s.name for s in here)} (the cluster game day, --cluster, plays more)")
    if short and only is None:
        chosen = [s for s in chosen if s.needs != "drift"]  # the embedder-based check runs in the full game day
    ports = {**{f"stable{i}": free_port() for i in range(STABLE_PODS)}, "canary0": free_port(),
             "dcgm": free_port(), "observer": free_port(), "proxy": free_port(), "router": free_port()}
    base = _config(ports, plan, SCENARIOS[0])
    rows: list[Row] = []
    with run_fleet(base, {"stable": _profile({}, plan, plan.stable_rps),
                          "canary": _profile({}, plan, plan.canary_rps)}, seed=seed,
                   answer_dir=GOLDEN_SETS) as fleet, \
            prometheus(f"127.0.0.1:{ports['observer']}") as prom_url:
        ports["prometheus"] = int(prom_url.rsplit(":", 1)[1])
        for s in chosen:
            work = Path(tempfile.mkdtemp(prefix=f"observer-gameday-{s.name}-"))
            try:
                rows.append(run_scenario(s, fleet=fleet, ports=ports, plan=plan, prom_url=prom_url,
                                         workdir=work))
            except (GamedayError, httpx.HTTPError) as e:
                rows.append(Row(scenario=s.name, title=s.title, expected=s.expect, ok=False,
                                detail=f"could not run: {e}"))
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return Report(rows=rows)


def print_report(report: Report, console: Console) -> None:
    """Print the game-day table."""
    t = Table(title="observer game day", caption="OK" if report.ok else "MISMATCH")
    for col in ("scenario", "expected", "verdicts (per round)", "web gate", "guardrail", "Argo Prometheus",
                "Flagger", "ok", "detail"):
        t.add_column(col)
    for r in report.rows:
        seq = " ".join(v[0] for v in r.verdicts)  # p f i n
        prom = ", ".join(f"{k}={v}" for k, v in r.prometheus.items())
        t.add_row(f"{r.scenario}: {r.title}", r.expected, f"{seq} → {r.verdicts[-1] if r.verdicts else '-'}",
                  r.web_gate, r.guardrail, prom, r.flagger, "[green]yes[/]" if r.ok else "[red]NO[/]",
                  f"{r.detail} ({r.seconds:.0f}s)")
    console.print(t)
