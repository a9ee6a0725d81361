"""Fleet-scale benchmark (issue #15) — the ingest part: samples/s into the central observer's ingest API
from concurrent sidecar clients, PostgreSQL against SQLite in the same run.

An `observer serve` subprocess (sample area only, the default redaction on) per backend; PostgreSQL is a
real server from Debian's package started here on a free loopback port (tests/support/postgres.py).
`--clients` asyncio clients each post batches of `--batch` samples (the sidecar's RemoteSink batch) as
fast as acknowledgements come back, for `--seconds`; only acknowledged samples count, and afterwards the
store must hold at least as many rows as were acknowledged. RSS of the observer process at the end.

Fleet part (bench/fleet_prom.py): a real Prometheus holding the per-pod observer series of `--pods` pods
(backfilled with promtool from generated OpenMetrics: 20 minutes at a 20 s scrape interval, 10 % canary
pods), and of a tenth as many in the same run for comparison; one canary verdict (source: prometheus, the
judge's full query set per arm) timed `--repeats` times, and one refresh of the fleet and canary
dashboards (every query, as Grafana's range queries over the 20 minutes).

Shared-work part: two `observer serve` replicas on one PostgreSQL live-judge `--jobs` samples through the
durable job queue with the scripted judge (50 ms a call, 3 calls in flight per replica); the leader is
killed with SIGKILL once a third are done while it holds jobs. Counted from the database afterwards: jobs
lost (not done), jobs done twice (completion committed more than once), judge calls repeated (at least
once: only the dead replica's in-flight jobs), the leader failover time (kill → the survivor's
`observer_leader` = 1, singleton jobs at a 1 s interval) and the time until the dead replica's jobs were
redone (their lease is 2 s). The same jobs on one replica alone, in the same run, for the throughput
ratio.

Usage: python -m bench.scale [--clients 20] [--batch 25] [--seconds 10] [--pods 1000] [--repeats 20]
                             [--jobs 300] [--skip ingest,fleet,work]
Last line: JSON with ingest_samples_per_s_postgres, ingest_samples_per_s_sqlite, observer_rss_mb, pods,
judge_seconds_p95, jobs_lost, jobs_done_twice, failover_seconds and more.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

VERSIONS = [f"v{i}" for i in range(8)]


async def _load(url: str, *, clients: int, batch: int, seconds: float) -> tuple[int, float]:
    import httpx

    acked = 0
    deadline = time.monotonic() + seconds

    async def client(k: int) -> None:
        nonlocal acked
        n = 0
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer bench"}, timeout=30) as c:
            while time.monotonic() < deadline:
                items = [{"version": VERSIONS[(k + i) % len(VERSIONS)], "prompt": f"client {k} request {n + i}: "
                          "what is the capital of France, and why?", "output": "Paris. " * 40,
                          "ts": 1.7e9 + n + i, "model": "llm", "finish_reason": "stop", "prompt_tokens": 14,
                          "output_tokens": 80, "latency_s": 0.8, "ttft_s": 0.05} for i in range(batch)]
                r = await c.post("/api/v1/samples", json={"samples": items})
                if r.status_code == 200:
                    acked += len(r.json()["ids"])
                n += batch

    started = time.monotonic()
    await asyncio.gather(*(client(k) for k in range(clients)))
    return acked, time.monotonic() - started


def run_backend(store_yaml: str, count: Callable[[], int], *, clients: int, batch: int,
                seconds: float) -> dict[str, Any]:
    """Load one backend; `count()` reads the store's rows afterwards (it must hold every acknowledged one)."""
    import psutil

    from tests.support.prom import free_port, wait_http
    from tests.support.serve_areas import spawn

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "observer.yaml"
        versions = ", ".join(f"{{name: {v}}}" for v in VERSIONS)
        config.write_text(f"fleet: {{versions: [{versions}]}}\n"
                          f"server: {{host: 127.0.0.1, port: {port}, auth_token: bench}}\n"
                          f"sampling: {{max_batch_samples: {max(batch, 100)}, store: {store_yaml}}}\n")
        proc = spawn(config, ["sample"], stderr=subprocess.PIPE)
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
            acked, elapsed = asyncio.run(_load(f"http://127.0.0.1:{port}", clients=clients, batch=batch,
                                               seconds=seconds))
            rss = psutil.Process(proc.pid).memory_info().rss / 2**20
        finally:
            proc.terminate()
            proc.wait(30)
            if proc.stderr is not None:
                proc.stderr.close()
    rows = count()
    if rows < acked:
        raise SystemExit(f"{rows} rows stored but {acked} samples acknowledged: samples lost")
    return {"samples_per_s": acked / elapsed, "acked": acked, "rss_mb": rss}


def _counter(open_store: Callable[[], Any]) -> Callable[[], int]:
    def count() -> int:
        store = open_store()
        try:
            return int(store.count())
        finally:
            store.close()
    return count


def fleet_judge(pods: int, *, repeats: int) -> dict[str, Any]:
    """Time one canary verdict and one dashboard refresh against a Prometheus holding `pods` pods."""
    import httpx
    import psutil
    import yaml

    from bench.fleet_prom import create_blocks, write_openmetrics
    from observer.analyse.canary.service import CanaryService
    from observer.analyse.canary.sources import PrometheusSource
    from observer.config import parse_config
    from observer.render.dashboards import render
    from observer.render.dashboards.lint import queries, substitute
    from observer_dev.promserver import run_prometheus

    step, span = 20.0, 1200.0
    end = float(int(time.time() // 60 * 60) - 120)
    config = parse_config(yaml.safe_dump({
        "fleet": {"versions": [{"name": "stable", "role": "stable"}, {"name": "canary", "role": "canary"}]},
        "canary": {"window_seconds": span, "slice_seconds": 60}}), environ={})
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        samples = write_openmetrics(work / "fleet.om", pods=pods, canary_share=0.1, start=end - span, end=end,
                                    step=step)
        create_blocks(work / "fleet.om", work / "data")
        (work / "fleet.om").unlink()
        load_s = time.monotonic() - t0
        with run_prometheus([], workdir=work, ready_timeout=120) as prom:
            series = httpx.get(f"{prom.url}/api/v1/query", params={"query": "count({job=\"observer\"})",
                                                                   "time": end}, timeout=120).json()
            n_series = int(float(series["data"]["result"][0]["value"][1]))

            async def verdicts() -> tuple[list[float], str]:
                async with httpx.AsyncClient(timeout=60) as http:
                    service = CanaryService(config, PrometheusSource(url=prom.url, http=http, timeout=60,
                                                                     slice_seconds=60), clock=lambda: end)
                    out: list[float] = []
                    verdict = ""
                    for _ in range(repeats):
                        t = time.perf_counter()
                        v = await service.verdict_for(None, None, since=end - span, weight="any")
                        out.append(time.perf_counter() - t)
                        verdict = str(v.verdict)
                    return out, verdict

            judge_s, verdict = asyncio.run(verdicts())
            rendered = render(config)
            exprs = [substitute(q.expr, {"namespace": ".*", "model": ".*", "version": ".*"}, rate_interval="1m")
                     for name in ("dashboards/fleet.json", "dashboards/canary.json")
                     for q in queries(json.loads(rendered[name]))]
            refresh_s: list[float] = []
            with_data = 0
            with httpx.Client(timeout=120) as c:
                for i in range(max(3, repeats // 4)):
                    t = time.perf_counter()
                    got = 0
                    for e in exprs:
                        body = c.get(f"{prom.url}/api/v1/query_range",
                                     params={"query": e, "start": end - span, "end": end, "step": step}).json()
                        got += bool(body.get("data", {}).get("result"))
                    refresh_s.append(time.perf_counter() - t)
                    with_data = got if i == 0 else with_data
            prom_rss = _prometheus_rss(psutil)
    return {"pods": pods, "series": n_series, "samples": samples, "load_seconds": load_s, "verdict": verdict,
            "judge_s": judge_s, "refresh_s": refresh_s, "dashboard_queries": len(exprs),
            "dashboard_queries_with_data": with_data, "prometheus_rss_mb": prom_rss}


def _prometheus_rss(psutil: Any) -> float:
    rss = [p.info["memory_info"].rss for p in psutil.process_iter(["name", "memory_info"])
           if p.info["name"] == "prometheus" and p.info["memory_info"] is not None]
    return max(rss, default=0) / 2**20


def _p(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def shared_work(jobs: int) -> dict[str, Any]:
    """Two replicas share `jobs` judge jobs; the leader is SIGKILLed mid-work. Then one replica alone."""
    import signal

    import psycopg

    from observer_dev.pgserver import run_postgres
    from tests.support.judge_server import Reply, run_judge_server
    from tests.support.prom import metric
    from tests.support.shared_work import ingest, job_states, judged_output, live_samples, run_replicas

    def held_by(url: str, pid: int) -> list[int]:
        with psycopg.connect(url) as conn:
            return [int(r[0]) for r in conn.execute(
                "SELECT id FROM jobs WHERE state = 'running' AND worker LIKE %s", (f"%-{pid}-%",))]

    def wait_done(url: str, n: int, limit: float) -> float:
        t = time.monotonic()
        while job_states(url).get("done", 0) < n:
            if time.monotonic() - t > limit:
                raise SystemExit(f"shared work stalled: {job_states(url)}")
            time.sleep(0.05)
        return time.monotonic()

    out: dict[str, Any] = {}
    with run_postgres() as pg, run_judge_server() as judge, tempfile.TemporaryDirectory() as tmp:
        judge.script(*[Reply(delay_s=0.05) for _ in range(20 * jobs)])
        for n_replicas in (1, 2):
            url = pg.database()
            sub = Path(tmp) / f"r{n_replicas}"
            sub.mkdir()
            with run_replicas(sub, n_replicas, url=url, judge_url=judge.url) as replicas:
                judge.requests.clear()
                started = time.monotonic()
                ingest(replicas[0], live_samples(jobs))
                if n_replicas == 1:
                    out["jobs_per_s_one_replica"] = jobs / (wait_done(url, jobs, 300) - started)
                    continue
                wait_done(url, jobs // 3, 300)
                leaders = [metric(r.url, "observer_leader") for r in replicas]
                lead = leaders.index(1.0)
                survivor = replicas[1 - lead]
                held = held_by(url, replicas[lead].proc.pid)
                looked = time.monotonic()
                while not held:  # the leader must be killed holding a job, or nothing is measured
                    if time.monotonic() - looked > 30 or job_states(url).get("done", 0) >= jobs:
                        raise SystemExit(f"the leader held no job to be killed with ({job_states(url)}): the "
                                         f"jobs ran out first; raise --jobs")
                    time.sleep(0.005)
                    held = held_by(url, replicas[lead].proc.pid)
                replicas[lead].proc.send_signal(signal.SIGKILL)
                replicas[lead].proc.wait(10)
                killed = time.monotonic()
                while metric(survivor.url, "observer_leader") != 1.0:
                    if time.monotonic() - killed > 30:
                        raise SystemExit("the surviving replica never took over the leadership")
                    time.sleep(0.02)
                out["failover_seconds"] = time.monotonic() - killed
                with psycopg.connect(url) as conn:
                    while conn.execute("SELECT COUNT(*) FROM jobs WHERE id = ANY(%s) AND state <> 'done'",
                                       (held,)).fetchone()[0]:
                        time.sleep(0.02)
                out["job_recovery_seconds"] = time.monotonic() - killed
                finished = wait_done(url, jobs, 300)
                out["jobs_per_s_two_replicas_with_a_kill"] = jobs / (finished - started)
                with psycopg.connect(url) as conn:
                    out["jobs_lost"] = int(conn.execute("SELECT COUNT(*) FROM jobs WHERE state <> 'done'")
                                           .fetchone()[0]) + jobs - int(conn.execute(
                                               "SELECT COUNT(*) FROM jobs").fetchone()[0])
                    out["jobs_done_twice"] = int(conn.execute("SELECT COUNT(*) FROM jobs WHERE done_count > 1")
                                                 .fetchone()[0])
                    out["verdicts_stored"] = int(conn.execute(
                        "SELECT COUNT(*) FROM scores WHERE scorer = 'judge:helpfulness'").fetchone()[0])
                calls: dict[str, int] = {}
                for b in judge.requests:  # the judged OUTPUT names the sample (each prompt has its own nonce)
                    key = judged_output(b)
                    calls[key] = calls.get(key, 0) + 1
                out["judge_calls_repeated"] = sum(n - 1 for n in calls.values() if n > 1)
                out["jobs_held_by_the_killed_replica"] = len(held)
    out["jobs"] = jobs
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: ingest, fleet, work")
    args = ap.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    result: dict[str, Any] = {"clients": args.clients, "batch": args.batch}
    if "ingest" not in skip:
        result.update(ingest_part(args))
    if "fleet" not in skip:
        small = fleet_judge(max(10, args.pods // 10), repeats=args.repeats)
        big = fleet_judge(args.pods, repeats=args.repeats)
        for r in (small, big):
            print(f"{r['pods']:5d} pods, {r['series']} series ({r['samples']} samples, loaded in "
                  f"{r['load_seconds']:.0f} s): verdict {r['verdict']} in p50 {_p(r['judge_s'], 0.5):.3f} s, "
                  f"p95 {_p(r['judge_s'], 0.95):.3f} s; dashboards refresh ({r['dashboard_queries']} queries, "
                  f"{r['dashboard_queries_with_data']} with data) p95 {_p(r['refresh_s'], 0.95):.2f} s; "
                  f"Prometheus RSS {r['prometheus_rss_mb']:.0f} MB")
        ratio = _p(big["judge_s"], 0.95) / _p(small["judge_s"], 0.95)
        print(f"judge p95 at {big['pods']} vs {small['pods']} pods: {ratio:.2f}x")
        result.update({"pods": big["pods"], "series": big["series"],
                       "judge_seconds_p50": round(_p(big["judge_s"], 0.5), 4),
                       "judge_seconds_p95": round(_p(big["judge_s"], 0.95), 4),
                       "pods_small": small["pods"], "judge_seconds_p95_small": round(_p(small["judge_s"], 0.95), 4),
                       "judge_p95_ratio_10x_pods": round(ratio, 3), "verdict": big["verdict"],
                       "dashboard_refresh_seconds_p95": round(_p(big["refresh_s"], 0.95), 3),
                       "dashboard_queries": big["dashboard_queries"],
                       "dashboard_queries_with_data": big["dashboard_queries_with_data"],
                       "prometheus_rss_mb": round(big["prometheus_rss_mb"], 1)})
    else:
        result.update({"pods": None, "judge_seconds_p95": None})
    if "work" not in skip:
        w = shared_work(args.jobs)
        print(f"shared work: {w['jobs']} judge jobs, 2 replicas, leader SIGKILLed holding "
              f"{w['jobs_held_by_the_killed_replica']}: lost {w['jobs_lost']}, done twice {w['jobs_done_twice']}, "
              f"judge calls repeated {w['judge_calls_repeated']}; leader failover {w['failover_seconds']:.2f} s, "
              f"its jobs redone {w['job_recovery_seconds']:.2f} s after the kill; "
              f"{w['jobs_per_s_two_replicas_with_a_kill']:.1f} jobs/s vs {w['jobs_per_s_one_replica']:.1f} on one "
              f"replica ({w['jobs_per_s_two_replicas_with_a_kill'] / w['jobs_per_s_one_replica']:.2f}x)")
        result.update({k: (round(v, 3) if isinstance(v, float) else v) for k, v in w.items()})
    else:
        result.update({"jobs_lost": None, "jobs_done_twice": None, "failover_seconds": None})
    print(json.dumps(result))


def ingest_part(args: argparse.Namespace) -> dict[str, Any]:
    from observer.store.postgres import PostgresStore
    from observer.store.sqlite import SqliteStore
    from observer_dev.pgserver import run_postgres

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "samples.db"
        sqlite = run_backend(f"{{path: '{db}'}}", _counter(lambda: SqliteStore(db)), clients=args.clients,
                             batch=args.batch, seconds=args.seconds)
    with run_postgres() as pg:
        url = pg.database()
        postgres = run_backend(f"{{url: '{url}'}}", _counter(lambda: PostgresStore(url)), clients=args.clients,
                               batch=args.batch, seconds=args.seconds)
    for name, r in (("sqlite", sqlite), ("postgres", postgres)):
        print(f"{name:9s} {r['samples_per_s']:8.0f} samples/s acknowledged ({r['acked']} in {args.seconds:g}s, "
              f"{args.clients} clients x batches of {args.batch}), observer RSS {r['rss_mb']:.0f} MB")
    ratio = postgres["samples_per_s"] / sqlite["samples_per_s"]
    print(f"postgres / sqlite: {ratio:.2f}x")
    return {"ingest_samples_per_s_postgres": round(postgres["samples_per_s"], 1),
            "ingest_samples_per_s_sqlite": round(sqlite["samples_per_s"], 1),
            "postgres_vs_sqlite": round(ratio, 3),
            "observer_rss_mb": round(max(postgres["rss_mb"], sqlite["rss_mb"]), 1)}


if __name__ == "__main__":
    main()
