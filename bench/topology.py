"""The cluster topology, measured: what a fleet mode judge is missing, what `check-config` misses, what the
shared work and the fleet-wide budget lose or overspend, and the dashboards' refresh at 1,000 pods with the
generated recording rules against the raw per-pod series, in the same run.

Parts (all by default; `--only` picks some):
- `dashboards`: 1,000 pods of per-pod observer series (bench/fleet_prom.py), 20 minutes backfilled into a real
  Prometheus; the dashboards' recording rules backfilled over the same 20 minutes (`promtool tsdb
  create-blocks-from rules`); then the fleet and canary dashboards refreshed (every query as Grafana's range
  query, one after another) alternately as generated (recorded rates) and with each recorded rate written back
  as the raw `rate(…[1m])` over the pods. Reported: p50/p95 seconds per refresh of each and the ratio.
- `discovered`: two Rollout revisions from the scripted Kubernetes API (simulator pods, no static list),
  quality and mirror ingest on: does each get golden replays and live scores, and how soon.
- `gameday`: the short cluster game day (`observer gameday --cluster --short`): its scenarios, and how many end
  in the single-process game day's verdict class despite a replica SIGKILLed and the other cut from
  PostgreSQL mid-step.
- `check_config`: every build-time refusal of tests/support/badconfigs.py, built and checked.
- `parity`: one recorded window of a simulated fleet through the own and the Prometheus source (the default
  metrics and a paired one; tests/support/fleet_window.py, as the parity test reads it).
- `budget`: two replicas sharing one store spend a judge budget of 40 calls; calls the judge received.
- `drift`: drift checks as shared jobs on a real PostgreSQL: two replicas (own connection pools), three rounds
  of both versions, one replica stalling on its claims in the last (its leases run out and the other redoes
  them); jobs lost and done twice, checks per replica, and whether both replicas hold the same flagged state.

Ends with one JSON line (keys named by the issue; a part not run gives null).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

RECORDED_RATE = re.compile(r"version:(observer_[a-z0-9_]+):rate1m(\{[^}]*\})")


def raw_expr(expr: str) -> str:
    """The same query over the raw per-pod series: each recorded rate back as `sum without (pod, instance)
    (rate(series[1m]))` — what the panels ran before the recording rules."""
    from observer.conventions.recording import RECORDED, recorded

    by_name = {recorded(s).split(":")[1]: s for s in RECORDED}

    def one(m: re.Match[str]) -> str:
        return f"sum without (pod, instance) (rate({by_name[m.group(1)]}{m.group(2)}[1m]))"

    return RECORDED_RATE.sub(one, expr)


def _p(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def dashboards_part(pods: int, repeats: int) -> dict[str, Any]:
    import httpx
    import yaml

    from bench.fleet_prom import create_blocks, write_openmetrics
    from observer.config import parse_config
    from observer.render.dashboard_rules import dashboard_group
    from observer.render.dashboards import render
    from observer.render.dashboards.lint import queries, substitute
    from observer.render.rulemodel import groups_data
    from observer_dev.promserver import run_prometheus

    step, span = 20.0, 1200.0
    end = float(int(time.time() // 60 * 60) - 120)
    start = end - span
    config = parse_config(yaml.safe_dump({
        "fleet": {"versions": [{"name": "stable", "role": "stable"}, {"name": "canary", "role": "canary"}]}}),
        environ={})
    with tempfile.TemporaryDirectory(prefix="bench-topology-") as tmp:
        work = Path(tmp)
        write_openmetrics(work / "fleet.om", pods=pods, canary_share=0.1, start=start, end=end, step=step)
        create_blocks(work / "fleet.om", work / "data")
        (work / "fleet.om").unlink()
        rules = work / "dashboard-rules.yaml"
        rules.write_text(yaml.safe_dump({"groups": groups_data([dashboard_group(config)], "")}))
        t0 = time.monotonic()
        with run_prometheus([], workdir=work, ready_timeout=120) as prom:
            proc = subprocess.run(
                ["promtool", "tsdb", "create-blocks-from", "rules", f"--start={int(start)}", f"--end={int(end)}",
                 f"--url={prom.url}", f"--output-dir={work / 'recorded'}", "--eval-interval=20s", str(rules)],
                capture_output=True, text=True, check=False, timeout=1800)
            if proc.returncode != 0:
                raise SystemExit(f"promtool could not backfill the recording rules: {proc.stderr[-2000:]}")
        record_s = time.monotonic() - t0
        for block in (work / "recorded").iterdir():
            if block.is_dir():
                shutil.move(str(block), work / "data" / block.name)
        rendered = render(config)
        recorded_exprs = [substitute(q.expr, {"namespace": ".*", "model": ".*", "version": ".*"}, rate_interval="1m")
                          for name in ("dashboards/fleet.json", "dashboards/canary.json")
                          for q in queries(json.loads(rendered[name]))]
        raw_exprs = [raw_expr(e) for e in recorded_exprs]
        changed = sum(a != b for a, b in zip(recorded_exprs, raw_exprs, strict=True))
        times: dict[str, list[float]] = {"raw": [], "recorded": []}
        data: dict[str, int] = {}
        with run_prometheus([], workdir=work, ready_timeout=120) as prom, httpx.Client(timeout=300) as c:
            def refresh(exprs: list[str]) -> tuple[float, int]:
                t = time.perf_counter()
                got = 0
                for e in exprs:
                    body = c.get(f"{prom.url}/api/v1/query_range",
                                 params={"query": e, "start": start + 120, "end": end, "step": step}).json()
                    got += bool(body.get("data", {}).get("result"))
                return time.perf_counter() - t, got

            refresh(recorded_exprs[:3])  # warm the head and the caches once, for both arms alike
            for i in range(repeats):
                for arm in (("raw", "recorded") if i % 2 == 0 else ("recorded", "raw")):  # the arms rotate
                    s, got = refresh(raw_exprs if arm == "raw" else recorded_exprs)
                    times[arm].append(s)
                    data[arm] = got
    raw95, rec95 = _p(times["raw"], 0.95), _p(times["recorded"], 0.95)
    return {"pods": pods, "dashboard_queries": len(recorded_exprs), "dashboard_queries_recorded": changed,
            "dashboard_queries_with_data_raw": data["raw"], "dashboard_queries_with_data_recorded": data["recorded"],
            "dashboard_refresh_seconds_1000_pods_raw": round(raw95, 3),
            "dashboard_refresh_seconds_1000_pods": round(rec95, 3),
            "dashboard_refresh_p50_raw": round(statistics.median(times["raw"]), 3),
            "dashboard_refresh_p50_recorded": round(statistics.median(times["recorded"]), 3),
            "dashboard_refresh_ratio_recorded_over_raw": round(rec95 / raw95, 3),
            "recording_backfill_seconds": round(record_s, 1)}


def gameday_part() -> dict[str, Any]:
    from observer_dev.gameday.runner import Kind, play

    rows = play(Kind.CLUSTER, short=True, seed=7)
    return {"scenarios_total": len(rows), "scenarios_same_verdict": sum(r.ok for r in rows),
            "scenario_verdicts": {r.scenario: r.verdicts[-1] if r.verdicts else None for r in rows},
            "scenario_seconds": {r.scenario: round(r.seconds, 1) for r in rows}}


def discovered_part() -> dict[str, Any]:
    from tests.support import discovered_quality

    out = discovered_quality.run(deadline_s=150.0)
    return {"discovered_versions_golden_replayed": all(n > 0 for n in out.golden_replayed.values()),
            "discovered_versions_live_scored": all(n > 0 for n in out.live_scored.values()),
            "discovered_golden_items": out.golden_replayed, "discovered_live_checks": out.live_scored,
            "discovered_seconds_to_both": round(out.seconds, 1)}


def primitives_part() -> dict[str, Any]:
    from observer_dev.gameday.primitive_scenarios import PRIMITIVE_SCENARIOS
    from observer_dev.gameday.runner import Kind, play
    from tests.support import primitive_discovery

    out = primitive_discovery.run(deadline_s=30.0)
    # Every scenario, at the short form's sizes (the test suite plays SHORT_PRIMITIVE_SCENARIOS).
    rows = play(Kind.PRIMITIVES, short=True, only=[s.name for s in PRIMITIVE_SCENARIOS])
    return {"primitives_discovered": out.discovered, "primitive_scenarios_total": len(rows),
            "primitive_scenarios_expected_verdict": sum(r.ok for r in rows),
            "primitive_scenarios": {r.scenario: f"{r.steps[-1] if r.steps else '-'} on "
                                                f"{r.verdicts[-1] if r.verdicts else '-'}" for r in rows}}


def check_config_part() -> dict[str, Any]:
    from observer.crosscheck import check_references
    from observer.errors import ConfigError
    from observer.service import Service
    from tests.support.badconfigs import corpus, parse

    misses, refused = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for bad in corpus(Path(tmp)):
            config = parse(bad)
            try:
                Service.build(config)
            except ConfigError as e:
                refused += 1
                if str(e) not in {str(p) for p in check_references(config)}:
                    misses.append(bad.name)
    return {"check_config_cases": refused, "check_config_misses": len(misses), "check_config_missed": misses}


def parity_part() -> dict[str, Any]:
    from observer_dev.parity import fields_missing
    from tests.support.fleet_window import both_sources

    missing = {f for own, fleet in both_sources().values() for f in fields_missing(own, fleet)}
    return {"fleet_mode_armdata_fields_missing": sorted(missing)}


def budget_part() -> dict[str, Any]:
    import httpx

    from observer.analyse.quality.judge import JudgeClient
    from observer.analyse.quality.prompts import load_prompt, load_rubrics
    from observer.errors import JudgeError
    from observer.store.sqlite import SqliteStore
    from tests.support.judge_server import run_judge_server

    budget = 40
    prompt = load_prompt(ROOT / "evals" / "judge_prompt.yaml")
    rubric = load_rubrics(ROOT / "evals" / "rubrics")["correctness"]
    with tempfile.TemporaryDirectory() as tmp, run_judge_server() as server:
        store = SqliteStore(Path(tmp) / "s.db")

        async def run() -> int:
            async with httpx.AsyncClient() as http:
                replicas = [JudgeClient(http, base_url=server.url, model="j", prompt=prompt, budget_per_hour=budget,
                                        ledger=store) for _ in range(2)]

                async def one(i: int) -> bool:
                    try:
                        await replicas[i % 2].judge(rubric=rubric, prompt="Capital of France?", output="Paris",
                                                    reference="Paris")
                        return True
                    except JudgeError:
                        return False

                return sum(await asyncio.gather(*(one(i) for i in range(100))))

        judged = asyncio.run(run())
        calls = len(server.requests)
        store.close()
    return {"judge_budget_per_hour": budget, "judge_calls_made": calls, "judged": judged,
            "judge_calls_over_budget": max(0, calls - budget)}


def drift_part() -> dict[str, Any]:
    import psycopg

    from observer.analyse.embed import HashingEmbedder
    from observer.store.postgres import PostgresStore
    from observer_dev.pgserver import run_postgres
    from tests.support.drift_replicas import Clock, config, drifted_windows, one_round, replica, seed_baseline, states

    with tempfile.TemporaryDirectory() as tmp, run_postgres() as pg:
        url = pg.database()
        stores = [PostgresStore(url), PostgresStore(url)]
        try:
            cfg = config(Path(tmp), url)
            clock, emb = Clock(), HashingEmbedder(dim=128, max_cache_entries=5000)
            corpus, rng = seed_baseline(cfg, stores[0], emb)
            a, b = (replica(cfg, s, clock, lambda: emb) for s in stores)

            async def run() -> None:
                await drifted_windows(a, b, stores[0], clock, corpus, rng)
                clock.now += 600
                assert a.shared is not None
                await a.shared.enqueue()
                stalled = stores[0].claim(worker="stalled", kinds=["drift"], limit=2, lease_seconds=0.0)
                await one_round(a, [b], [a, b])  # b redoes the stalled claims; their late completions are refused
                for job in stalled:
                    stores[0].complete(job)

            asyncio.run(run())
            with psycopg.connect(url) as conn:
                lost = int(conn.execute("SELECT COUNT(*) FROM jobs WHERE state <> 'done'").fetchone()[0])
                twice = int(conn.execute("SELECT COUNT(*) FROM jobs WHERE done_count > 1").fetchone()[0])
                reports = int(conn.execute("SELECT COUNT(*) FROM drift_reports").fetchone()[0])
            sa, sb = states(a, b)
            return {"jobs_lost": lost, "jobs_done_twice": twice, "drift_reports_stored": reports,
                    "drift_checks_by_replica": [x.worker.metrics.attempts[("drift", "done")] if x.worker else 0
                                                for x in (a, b)],
                    "drift_leader_loaded_embedder": a.runner._checker is not None,
                    "drift_states_equal": sa == sb, "drift_canary_flagged": sa["canary"][1]["prompts"][0]}
        finally:
            for s in stores:
                s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=6, help="refreshes timed per arm")
    ap.add_argument("--only", default="",
                    help="comma-separated parts: dashboards, gameday, discovered, primitives, check_config, parity, "
                         "budget, drift")
    args = ap.parse_args()
    parts = {p.strip() for p in args.only.split(",") if p.strip()} or {
        "dashboards", "gameday", "discovered", "primitives", "check_config", "parity", "budget", "drift"}
    out: dict[str, Any] = {"scenarios_total": None, "scenarios_same_verdict": None}
    if "gameday" in parts:
        r = gameday_part()
        print(f"cluster game day: {r['scenarios_same_verdict']} of {r['scenarios_total']} scenarios in the "
              f"single-process verdict class: {r['scenario_verdicts']}")
        out.update(r)
    if "discovered" in parts:
        r = discovered_part()
        print(f"discovered versions: golden items {r['discovered_golden_items']}, live checks "
              f"{r['discovered_live_checks']} after {r['discovered_seconds_to_both']} s")
        out.update(r)
    if "primitives" in parts:
        r = primitives_part()
        print(f"rollout primitives discovered through the API (versions, roles, weights as the objects say, at "
              f"25 % and promoted): {r['primitives_discovered']}; rollouts through them: "
              f"{r['primitive_scenarios_expected_verdict']} of {r['primitive_scenarios_total']} as expected "
              f"{r['primitive_scenarios']}")
        out.update(r)
    if "check_config" in parts:
        r = check_config_part()
        print(f"check-config: {r['check_config_cases']} build-time refusals, {r['check_config_misses']} not reported")
        out.update(r)
    if "parity" in parts:
        r = parity_part()
        print(f"fleet mode ArmData fields missing: {r['fleet_mode_armdata_fields_missing'] or 'none'}")
        out.update(r)
    if "budget" in parts:
        r = budget_part()
        print(f"fleet-wide judge budget {r['judge_budget_per_hour']}/h, 2 replicas asking 100 times: "
              f"{r['judge_calls_made']} calls made")
        out.update(r)
    if "drift" in parts:
        r = drift_part()
        print(f"drift as shared jobs: {r['drift_reports_stored']} reports, checks per replica "
              f"{r['drift_checks_by_replica']}, lost {r['jobs_lost']}, done twice {r['jobs_done_twice']}, same "
              f"state on both: {r['drift_states_equal']}")
        out.update(r)
    if "dashboards" in parts:
        r = dashboards_part(args.pods, args.repeats)
        print(f"dashboards at {r['pods']} pods ({r['dashboard_queries']} queries, {r['dashboard_queries_recorded']} "
              f"on recorded rates; with data: raw {r['dashboard_queries_with_data_raw']}, recorded "
              f"{r['dashboard_queries_with_data_recorded']}): refresh p95 raw "
              f"{r['dashboard_refresh_seconds_1000_pods_raw']:.2f} s, "
              f"recorded {r['dashboard_refresh_seconds_1000_pods']:.2f} s — ratio "
              f"{r['dashboard_refresh_ratio_recorded_over_raw']:.3f}")
        out.update(r)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
