"""One look of the game day as Argo Rollouts and Prometheus would take it (the gate, the guardrail, each
Prometheus-template metric, the alerts), and the rules that say when a scenario has settled and matched."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import httpx
import yaml

from observer.config import ObserverConfig
from observer.render import alerts
from observer.render import argo as argo_render
from observer_dev.gameday.argo import (
    Phase,
    measurement_phase,
    prometheus_value,
    run_phase,
    web_measurement,
    web_value,
)
from observer_dev.gameday.scenarios import (
    Expect,
    GamedayError,
    Row,
    Scenario,
)


def fill(text: str, prom_url: str, observer_url: str | None = None) -> str:
    args = {"canary": "canary", "baseline": "stable", argo_render.WEIGHT_ARG: "20",  # Argo passes setWeight: 20
            "prometheus-address": prom_url}
    for k, v in args.items():
        text = text.replace("{{args." + k + "}}", v)
    return text


def prometheus_phase(prom_url: str, query: str, success: str | None, failure: str | None) -> Phase:
    r = httpx.get(f"{prom_url}/api/v1/query", params={"query": query}, timeout=10).json()
    if r.get("status") != "success":
        return Phase.ERROR
    data = r["data"]
    value = float(data["result"][1]) if data["resultType"] == "scalar" else \
        prometheus_value([float(s["value"][1]) for s in data["result"]])
    return measurement_phase(success, failure, value)


def web_phase(metric: Mapping[str, Any], url: str) -> tuple[Phase, bytes]:
    try:
        r = httpx.get(url, timeout=10)
    except httpx.HTTPError:
        return Phase.ERROR, b""
    return web_measurement(metric.get("successCondition"), metric.get("failureCondition"), status=r.status_code,
                           body=r.content, path=metric["provider"]["web"]["jsonPath"]), r.content


def argo_checks(config: ObserverConfig, prom_url: str, observer_url: str, *, web_url: str | None = None
                 ) -> tuple[str, str, dict[str, str], dict[str, Any]]:
    """One look as Argo would take it: the gate run's phase (its worst metric), the guardrail's phase, each
    Prometheus-template metric's phase, and the verdict body. `web_url` replaces the verdict URL."""
    gate_metrics = argo_render.gate_spec(config)["metrics"]
    guard = argo_render.guardrail_spec(config)["metrics"][0]
    phases_gate: list[Phase] = []
    raw = b""
    for m in gate_metrics:
        if "web" in m["provider"]:
            phase, raw = web_phase(m, web_url or fill(m["provider"]["web"]["url"], prom_url))
        else:
            phase = prometheus_phase(prom_url, fill(m["provider"]["prometheus"]["query"], prom_url),
                                      m.get("successCondition"), m.get("failureCondition"))
        phases_gate.append(phase)
    guard_phase, _ = web_phase(guard, web_url or fill(guard["provider"]["web"]["url"], prom_url))
    phases: dict[str, str] = {}
    for pm in argo_render.prometheus_metrics(config):
        phase = prometheus_phase(prom_url, fill(pm.query, prom_url), pm.success, pm.failure)
        phases[pm.name] = phase + (" (dryRun)" if pm.dry_run else "")
    try:
        body = json.loads(raw) if raw.strip() else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    gate = str(run_phase(phases_gate))
    if len(set(phases_gate)) > 1:
        gate += " (web " + str(phases_gate[0]) + ")"
    return gate, str(guard_phase), phases, body


def verdict_body(observer_url: str) -> dict[str, Any]:
    r = httpx.get(f"{observer_url}/api/v1/canary/verdict", params={"canary": "canary", "baseline": "stable"},
                  timeout=10)
    if r.status_code != 200:
        raise GamedayError(f"verdict endpoint answered HTTP {r.status_code}: {r.text[:200]}")
    out: dict[str, Any] = r.json()
    return out


def report_badge(page: str) -> str:
    """The verdict badge of a report page ("verdict fail"), or what the page was instead."""
    m = re.search(r'class="badge verdict ([a-z]+)"', page)
    return f"verdict {m.group(1)}" if m else f"no verdict badge ({page[:80]!r})"


def decided(expect: Expect, verdict: str, body: Mapping[str, Any]) -> bool:
    if expect in (Expect.PASS, Expect.FAIL):
        return verdict in ("pass", "fail")
    if expect is Expect.DRIFT:
        metrics = body.get("metrics", {})
        return any(metrics.get(n, {}).get("result") == "fail" for n in ("drift_prompts", "drift_outputs"))
    return False  # nodata / not-pass: run every round


POST_CHANGE_LOOKS = 4
"""Looks after a mid-step change before a verdict other than the expected one ends the scenario."""
ARGO_FAIL_LOOKS = 3
"""Argo measurements a `fail` scenario's final check may take. Argo measures every interval through a step
and one Failed measurement aborts it; a verdict near its threshold (a sequential test that restarts, a
score at the marginal line) can go from fail to inconclusive between two evaluations, so the final check
takes up to this many measurements, one scrape interval apart, and every check reads the same one."""
DIMENSION_LOOKS = 4
"""More Argo measurements a `fail` scenario with a dimension may take, until that dimension's Prometheus metric
has failed too: it reads the periodic judgment's gauges (exported every canary.interval_seconds, then scraped),
which trail the verdict the web gate reads by an export and a scrape."""


MUST_FAIL_LOOKS = 3
"""Consecutive looks a scenario's `must_fail` metrics must have failed at before it stops looking."""
PASS_LOOKS = 2
"""Consecutive passing looks before a `pass` scenario stops looking: a pass shown at one look on evidence at its
bound can read inconclusive at the next, and the readers after the last look (Argo, the report) read again."""


def must_fail_streak(s: Scenario, body: Mapping[str, Any], streak: int) -> int:
    """`streak` + 1 when every `must_fail` metric of `s` failed in `body`, else 0."""
    metrics = body.get("metrics", {})
    return streak + 1 if all(metrics.get(n, {}).get("result") == "fail" for n in s.must_fail) else 0


def settled(s: Scenario, rnd: int, verdict: str, body: Mapping[str, Any], streak: int, passes: int = PASS_LOOKS
            ) -> bool:
    """Whether the scenario can stop looking after round `rnd`.

    Argo keeps measuring through a step (the web gate's `count`), and one Failed measurement aborts it:
    a `pass` looked at before a mid-step regression's evidence has accumulated is not a promotion. So
    after a change the game day keeps looking, like the analysis would, until the expected verdict comes
    or POST_CHANGE_LOOKS looks have passed; the last verdict is the one checked. A scenario whose
    `must_fail` metrics have not failed at the last MUST_FAIL_LOOKS looks (`streak`) keeps looking too, and a
    `pass` scenario until it passed PASS_LOOKS looks in a row (`passes`)."""
    if not decided(s.expect, verdict, body):
        return False
    if s.expect is Expect.PASS and verdict == "pass" and passes < PASS_LOOKS:
        return False
    # The verdict failed on another metric first: keep looking, as Argo would, until the must-fail metrics
    # have failed at MUST_FAIL_LOOKS looks in a row (`streak`): a sequential test at its boundary can fail,
    # then not, as the next slice comes in, and the checks after the loop read the verdict again.
    if s.must_fail and streak < MUST_FAIL_LOOKS:
        return False
    if s.change_after is None:
        return True
    if rnd <= s.change_after:
        return False
    return verdict == s.expect or rnd >= s.change_after + POST_CHANGE_LOOKS


def check_row(s: Scenario, row: Row, body: Mapping[str, Any]) -> tuple[bool, str]:
    final = row.verdicts[-1] if row.verdicts else "none"
    prom = {k: v.split(" ")[0] for k, v in row.prometheus.items()}
    problems: list[str] = []
    if s.expect in (Expect.PASS, Expect.FAIL, Expect.NODATA):
        if final != s.expect:
            problems.append(f"verdict {final}, expected {s.expect}")
        want_gate = {"pass": "Successful", "fail": "Failed", "nodata": "Inconclusive"}[s.expect]
        if row.web_gate.split(" ")[0] != want_gate:
            problems.append(f"web gate {row.web_gate}, expected {want_gate}")
        want_verdict = want_gate
        if prom.get("verdict") != want_verdict:
            problems.append(f"Prometheus verdict metric {prom.get('verdict')}, expected {want_verdict}")
    if s.expect in (Expect.IDLE, Expect.INCONCLUSIVE):
        if final != s.expect:
            problems.append(f"verdict {final}, expected {s.expect}")
        if row.web_gate.split(" ")[0] != "Inconclusive":
            problems.append(f"web gate {row.web_gate}, expected Inconclusive")
        if prom.get("verdict") != "Inconclusive":
            problems.append(f"Prometheus verdict metric {prom.get('verdict')}, expected Inconclusive")
        if row.guardrail != "Successful":
            problems.append(f"guardrail {row.guardrail}, expected Successful")
        if "pass" in row.verdicts or "fail" in row.verdicts:
            problems.append(f"verdicts {row.verdicts}: an {s.expect} canary must never pass or fail")
    if s.expect is Expect.IDLE and "nodata" in row.verdicts:
        problems.append("an asleep canary read nodata (the no-data path pages)")
    if s.reason and s.reason not in str(body.get("reason", "")):
        problems.append(f"reason {str(body.get('reason', ''))[:120]!r} does not name {s.reason!r}")
    if s.expect is Expect.NODATA and "pass" in row.verdicts:
        problems.append("passed with no canary traffic")
    if s.expect is Expect.PASS and any(p == "Failed" for k, p in prom.items() if not (s.costly and k == "cost")):
        problems.append("a Prometheus metric failed on a healthy canary")
    if s.costly and prom.get("cost") != "Failed":
        problems.append(f"Prometheus cost metric {prom.get('cost')}, expected Failed (dryRun)")
    if s.expect is Expect.FAIL and s.dimension and prom.get(s.dimension) != "Failed":
        problems.append(f"Prometheus {s.dimension} metric {prom.get(s.dimension)}, expected Failed")
    if s.expect is Expect.FAIL and body.get("critical_failed") and row.guardrail != "Failed":
        problems.append(f"guardrail {row.guardrail} on a critical failure")
    if s.expect in (Expect.PASS, Expect.NODATA) and row.guardrail != "Successful":
        problems.append(f"guardrail {row.guardrail}, expected Successful")
    if s.expect is Expect.NOT_PASS and "pass" in row.verdicts:
        problems.append("a verdict said pass after the observer restarted")
    if s.expect is Expect.NOT_PASS and row.web_gate.startswith("Successful"):
        problems.append("the gate run succeeded" + (" on an HTML page" if s.html_at_verdict_url else
                                                    " after the restart"))
    cost = body.get("metrics", {}).get("cost_per_token", {})
    ratio = cost.get("ratio")  # absent when the body had to be shortened to fit the web gate's budget
    if s.costly and (cost.get("result") != "fail" or (ratio is not None and ratio < 1.5)):
        problems.append(f"cost_per_token {cost.get('result')} at {cost.get('ratio')}×, expected fail at ≥ 1.5×")
    for name in s.must_fail:
        got = body.get("metrics", {}).get(name, {}).get("result")
        if got != "fail":
            problems.append(f"metric {name} {got}, expected fail")
    if not s.costly and s.expect in (Expect.PASS, Expect.FAIL) and cost.get("result") == "fail":
        problems.append(f"cost_per_token failed at {cost.get('ratio')}× on a canary that costs the same")
    if s.expect is Expect.DRIFT:
        metrics = body.get("metrics", {})
        if not any(metrics.get(n, {}).get("result") == "fail" for n in ("drift_prompts", "drift_outputs")):
            problems.append("drift not flagged")
        if prom.get("drift") != "Failed":
            problems.append(f"Prometheus drift metric {prom.get('drift')}, expected Failed")
    if s.expect in (Expect.PASS, Expect.FAIL) and body:
        # What the AnalysisRun shows: the web gate's measurement value must say why and where to look.
        value = web_value(json.dumps(body).encode(), argo_render.GATE_PATH)
        gate = json.loads(value) if value else {}
        if not gate.get("reason") or gate.get("report") != body.get("report"):
            problems.append(f"the gate's measurement value {value[:160]!r} lacks the reason or the report URL")
    want_flagger = FLAGGER_END.get(s.expect)
    if row.flagger and want_flagger and not row.flagger.startswith(want_flagger):
        problems.append(f"Flagger's loop ended {row.flagger}, expected {want_flagger}")
    if row.flagger.startswith("Succeeded") and s.expect is not Expect.PASS:
        problems.append(f"Flagger promoted a canary expected {s.expect}")
    return not problems, "; ".join(problems) or str(body.get("reason", ""))[:120]


FLAGGER_END = {"pass": "Succeeded", "fail": "Failed", "nodata": "Waiting", "idle": "Waiting", "inconclusive": "Waiting"}
"""Where Flagger's analysis loop must end per expected verdict: promoted, rolled back, or held at its maximum
weight by the confirm-promotion webhook (never promoted)."""


def alert_exprs(config: ObserverConfig) -> dict[str, str]:
    """The generated alerting rules' expressions by alert name (what Prometheus would evaluate)."""
    rules = yaml.safe_load(alerts.render(config)[alerts.RULES_FILE])
    return {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"] if "alert" in r}


def firing(prom_url: str, expr: str, labels: Mapping[str, str]) -> bool:
    """Whether `expr`, evaluated now, returns a series carrying `labels`."""
    r = httpx.get(f"{prom_url}/api/v1/query", params={"query": expr}, timeout=10).json()
    if r.get("status") != "success":
        raise GamedayError(f"Prometheus refused a generated alert expression: {r.get('error')}: {expr}")
    return any(all(x["metric"].get(k) == v for k, v in labels.items()) for x in r["data"]["result"])


def alert_problems(s: Scenario, row: Row, prom_url: str) -> list[str]:
    """What is wrong with an alert scenario's row at its end: an alert that fired before the change or, in a quiet
    scenario, at all (already in `row.detail`), one that never fired after the change, an engine-side signal
    that saw what only the observer should."""
    missing = [] if s.expect is Expect.QUIET else [name for name in s.alerts if name not in row.prometheus]
    problems = [p for p in (row.detail,) if p] + [f"{name} never fired" for name in missing]
    return problems + [f"the engine-side signals saw it: {q}" for q in s.blind if firing(prom_url, q, {})]


def alert_round(s: Scenario, row: Row, rnd: int, exprs: Mapping[str, str], prom_url: str) -> bool:
    """Evaluate the scenario's alerts after round `rnd`; True once every one fires after the change."""
    fired = {name: firing(prom_url, exprs[name], {**s.alert_labels, **s.alert_labels_of.get(name, {})})
             for name in s.alerts}
    quiet = s.expect is Expect.QUIET  # it must never fire
    before = quiet or (s.change_after is not None and rnd < s.change_after)
    for name, on in fired.items():
        if on and before:
            what = "fired on A/A traffic" if quiet else "fired before the change"
            row.detail = (row.detail + f"; {name} {what} (round {rnd})").strip("; ")
        if on and not before and name not in row.prometheus:
            row.prometheus[name] = f"fired (look {rnd - (s.change_after or 0) + 1} after the change)"
    row.verdicts.append("alert" if all(fired.values()) else "quiet")
    return not before and all(name in row.prometheus for name in s.alerts)
