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

import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from rich.console import Console
from rich.table import Table

from observer import conventions as names
from observer.config import ObserverConfig, parse_config
from observer.render import argo as argo_render
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
from observer_dev.gameday.rig import (
    GOLDEN_SETS,
    config_yaml,
    html_page_server,
    observer_config,
    prometheus,
    sim_profile,
    start_observer,
    wait_for,
    wait_ready,
)
from observer_dev.gameday.scenarios import (
    FULL,
    SCENARIOS,
    SHORT,
    STABLE_PODS,
    Expect,
    GamedayError,
    Plan,
    Report,
    Row,
    Scenario,
)
from observer_dev.gameday.traffic import before_rounds, prepare_drift, round_traffic
from observer_dev.promserver import free_port
from observer_dev.sim.fleet import run_fleet

__all__ = ["FULL", "SCENARIOS", "SHORT", "Expect", "GamedayError", "Plan", "Report", "Row", "Scenario", "SingleRig",
           "print_report", "run_scenario", "single_rig", "start_observer"]

FLAGGER_EXPECT = frozenset({Expect.PASS, Expect.FAIL, Expect.NODATA, Expect.IDLE, Expect.INCONCLUSIVE,
                            Expect.NOT_PASS})
FLAGGER_INTERVALS = 8
"""Flagger's intervals after the last look (one runs beside every look before): the example Canary needs 5 steps
of 10 % to its 50 %, then confirm-promotion; a fail ends it at once (the rollback webhook); undecided verdicts
wait at 50 %."""




def _run_html(s: Scenario, row: Row, *, config: ObserverConfig, prom_url: str) -> None:
    """The verdict URL answers 200 with HTML and no observer runs: the gate run must not be Successful."""
    sel = names.CANARY_VERDICT + '{canary="canary",baseline="stable"}'

    def verdict_gone() -> bool:  # Prometheus marks the stopped observer's series stale at its next scrape
        r = httpx.get(f"{prom_url}/api/v1/query", params={"query": sel}, timeout=5).json()
        return not r["data"]["result"]

    wait_for(verdict_gone, timeout=30, what="Prometheus to mark the stopped observer's verdict stale", every=0.25)
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
        _run_html(s, row, config=observer_config(ports, plan, s, workdir), prom_url=prom_url)
        row.seconds = time.monotonic() - t0
        return row
    fleet.set_profile("stable", **sim_profile(s.stable, plan, plan.stable_rps))
    fleet.set_profile("canary", **sim_profile(s.canary, plan, plan.canary_rps))
    config = observer_config(ports, plan, s, workdir)
    obs = start_observer(config)
    body: dict[str, Any] = {}
    streak = passes = 0
    users = np.random.default_rng(sum(map(ord, s.name)))  # the scenario's users, the same each run
    answered: set[str] = set()  # the answers they have seen
    try:
        wait_ready(obs, "the observer's first scrape")
        # The same pair through Flagger's loop, webhooks and MetricTemplates, interval by interval beside the
        # looks; its first interval starts the revision's analysis window (the payload's checksum).
        loop = FlaggerLoop.for_config(config, canary="canary", baseline="stable", checksum=s.name) \
            if s.expect in FLAGGER_EXPECT else None
        if loop is not None:
            loop.step(prom_url)
        if s.needs == "quality":
            wait_for(lambda: verdict_body(obs.url)["metrics"].get("golden", {}).get("result") != "nodata", timeout=60,
                  what="golden-set results for both versions", every=0.5)
        if s.needs == "drift":
            assert workdir is not None
            prepare_drift(fleet, obs.url, parse_config(config_yaml(ports, plan, s, workdir),
                                                       source="gameday-drift.yaml"))
        exprs = alert_exprs(config) if s.alerts else {}
        before_rounds(s, obs.url)
        for rnd in range(max(plan.max_rounds, s.min_rounds)):
            if s.change_after is not None and rnd == s.change_after and s.change:
                fleet.set_profile(s.change_version, replica=s.replica, **dict(s.change))
            if s.restart_after is not None and rnd == s.restart_after:
                obs.stop()
                obs = start_observer(config)
                wait_ready(obs, "the restarted observer's first scrape")
                row.verdicts.append(str(verdict_body(obs.url)["verdict"]))  # before any new data: never pass
            # Interleaved one simulated second at a time: a scrape mid-round sees both arms equally far
            # along, so no canary slice holds a round whose baseline half fell into the next slice.
            for _ in range(int(plan.round_seconds)):
                fleet.advance("stable", 1.0)
                fleet.advance("canary", 1.0)
            round_traffic(s, fleet, obs.url, ports, plan, rnd, users=users, answered=answered)
            if s.expect in (Expect.ALERTS, Expect.QUIET):
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
                    s.expect is not Expect.PASS or loop is None or loop.phase in (FLAGGER_FAILED, FLAGGER_SUCCEEDED)):
                break
            if s.expect in (Expect.NODATA, Expect.NOT_PASS, Expect.IDLE, Expect.INCONCLUSIVE) \
                    and rnd + 1 >= plan.max_rounds // 2 and (s.restart_after is None or rnd > s.restart_after + 2):
                break  # enough looks to show it never passes
        if s.expect in (Expect.ALERTS, Expect.QUIET):
            problems = alert_problems(s, row, prom_url)
            row.ok, row.detail = not problems, "; ".join(problems) or ", ".join(
                f"{k} {v}" for k, v in row.prometheus.items()) or f"{', '.join(s.alerts)} quiet in all " \
                f"{len(row.verdicts)} looks"
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
            wait_for(exported, timeout=15, what="Prometheus to scrape the verdict gauge", every=0.25)
            if s.expect is Expect.DRIFT:
                wait_for(drift_exported, timeout=15, what="Prometheus to scrape the drift gauge", every=0.25)
        except GamedayError as e:
            row.detail = str(e)
        looked = len(row.verdicts)
        # Argo measures each Prometheus metric every interval of the step, and one Failed measurement counts: the
        # dimension's metric reads the periodic judgment's gauges, a scrape behind the web verdict, so a `fail`
        # scenario's measurements go on until it has failed too (or they run out).
        measurements = 1 if s.expect is not Expect.FAIL else ARGO_FAIL_LOOKS + (DIMENSION_LOOKS if s.dimension else 0)
        for look in range(measurements):
            if look:
                time.sleep(plan.scrape_interval)
            row.web_gate, row.guardrail, row.prometheus, body = argo_checks(config, prom_url, obs.url)
            row.reads["Argo"] = (f"measurement {look + 1} after look {looked} ({time.monotonic() - t0:.0f} s): "
                                 f"web gate {row.web_gate} on verdict {body.get('verdict')}, guardrail "
                                 f"{row.guardrail}, Prometheus {row.prometheus}")
            # A gate run can fail on another dimension while the verdict read with it sits at its boundary
            # (inconclusive): that look does not settle a `fail` scenario; the next measurement does.
            decided = row.web_gate.startswith("Failed") and (
                s.expect is not Expect.FAIL or body.get("verdict") == "fail")
            if decided and s.expect is Expect.FAIL and s.dimension:
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


@dataclass
class SingleRig:
    """What every single-process scenario runs against: the simulator and a Prometheus scraping the observer's
    port; each scenario starts an observer of its own on that port (so windows never mix scenarios)."""

    fleet: Any
    ports: dict[str, int]
    prom_url: str
    plan: Plan

    def play(self, s: Scenario) -> Row:
        """Run `s` with a working directory of its own."""
        work = Path(tempfile.mkdtemp(prefix=f"observer-gameday-{s.name}-"))
        try:
            return run_scenario(s, fleet=self.fleet, ports=self.ports, plan=self.plan, prom_url=self.prom_url,
                                workdir=work)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def could_not_run(self, s: Scenario, reason: str) -> Row:
        """The row of a scenario the rig could not play."""
        return Row(scenario=s.name, title=s.title, expected=s.expect, ok=False, detail=reason)


@contextmanager
def single_rig(plan: Plan, *, seed: int) -> Iterator[SingleRig]:
    """Start the simulator and Prometheus on free loopback ports; GamedayError if either cannot start."""
    ports = {**{f"stable{i}": free_port() for i in range(STABLE_PODS)}, "canary0": free_port(),
             "dcgm": free_port(), "observer": free_port(), "proxy": free_port(), "router": free_port()}
    base = observer_config(ports, plan, SCENARIOS[0])
    with run_fleet(base, {"stable": sim_profile({}, plan, plan.stable_rps),
                          "canary": sim_profile({}, plan, plan.canary_rps)}, seed=seed,
                   answer_dir=GOLDEN_SETS) as fleet, \
            prometheus(f"127.0.0.1:{ports['observer']}") as prom_url:
        ports["prometheus"] = int(prom_url.rsplit(":", 1)[1])
        yield SingleRig(fleet=fleet, ports=ports, prom_url=prom_url, plan=plan)


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
