"""Benchmark: our fleet dashboard against vLLM's example dashboard, on the same Prometheus, in the same run.

A simulated stable + canary fleet (observer_dev.sim) is scraped twice by one real Prometheus: directly (raw
`vllm:*` series, what vLLM's example dashboard reads) and through the observer (per-version series, what
ours reads). Then every panel query of both dashboards is run the way Grafana refreshes a panel (a range
query over the last `--range` seconds at a Grafana-like step), `--repeat` times, and timed.

Reported, per dashboard: milliseconds per full refresh, queries returning data, and panels that can tell
the canary from stable (a `version` in the result). The example filters by `model_name` only, so it needs
one refresh per model to show both versions; its refresh time is counted for each served model.

Run: .venv/bin/python -m bench.dashboards [--collect 45] [--repeat 5]
Last output line: a JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from observer.config import parse_config
from observer.render import alerts as alert_render
from observer.render.dashboards import render
from observer.render.dashboards.lint import PanelQuery, queries, substitute
from observer_dev.sim.fleet import run_fleet
from tests.support.observer_proc import run_observer
from tests.support.prom import Prometheus, free_port, run_prometheus

ROOT = Path(__file__).resolve().parents[1]

EXAMPLE = ROOT / "tests" / "fixtures" / "dashboards" / "vllm-example-grafana.json"


def _config_text() -> str:
    stable, canary, dcgm = free_port(), free_port(), free_port()
    return f"""
fleet:
  versions:
    - {{name: stable, role: stable, vllm: [http://127.0.0.1:{stable}/metrics], openai: http://127.0.0.1:{stable}/v1,
       dcgm: [http://127.0.0.1:{dcgm}/metrics], pods: [{{namespace: llm-serving, pod: sim-stable-0}}],
       expected_traffic_weight: 0.9}}
    - {{name: canary, role: canary, vllm: [http://127.0.0.1:{canary}/metrics], openai: http://127.0.0.1:{canary}/v1,
       dcgm: [http://127.0.0.1:{dcgm}/metrics], pods: [{{namespace: llm-serving, pod: sim-canary-0}}],
       expected_traffic_weight: 0.1}}
scrape: {{interval_seconds: 1, timeout_seconds: 1, window_seconds: 30}}
sampling: {{enabled: false}}
quality: {{enabled: false}}
drift: {{enabled: false}}
canary: {{enabled: false}}
"""


def _refresh(prom: Prometheus, exprs: list[str], *, range_s: float, step: float) -> tuple[float, int, set[str]]:
    """Run each expr as a range query; wall ms of the whole refresh, queries with data, versions seen."""
    end = time.time()
    with_data, versions = 0, set()
    t0 = time.perf_counter()
    for expr in exprs:
        r = httpx.get(f"{prom.url}/api/v1/query_range", params={"query": expr, "start": end - range_s, "end": end,
                                                                 "step": step}, timeout=30).json()
        if r.get("status") != "success":
            raise RuntimeError(f"query failed: {expr}: {r}")
        series = r["data"]["result"]
        with_data += bool(series)
        versions |= {s["metric"].get("version", "") for s in series} - {""}
    return (time.perf_counter() - t0) * 1000, with_data, versions


def _split_panels(qs: list[PanelQuery], prom: Prometheus, exprs: dict[int, list[str]], *, range_s: float,
                  step: float) -> int:
    split = 0
    for panel_id in {q.panel_id for q in qs}:
        _, _, versions = _refresh(prom, exprs[panel_id], range_s=range_s, step=step)
        split += versions >= {"stable", "canary"}
    return split


def _models(prom_url: str, *, within: float) -> list[str]:
    """The simulated versions' model names in Prometheus, waiting up to `within` s for the first scrapes."""
    deadline = time.monotonic() + within
    while True:
        models = sorted(m for m in httpx.get(f"{prom_url}/api/v1/label/model_name/values", timeout=10)
                        .json()["data"] if m.startswith("sim-"))
        if models or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if not models:
        raise SystemExit(f"no sim-* model_name series in Prometheus ({prom_url}) after --collect and {within:.0f} s "
                         "more: the simulator's targets were not scraped (see Prometheus's /targets)")
    return models


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collect", type=float, default=45.0, help="seconds of data to collect first")
    ap.add_argument("--repeat", type=int, default=5, help="refreshes timed per dashboard")
    ap.add_argument("--range", dest="range_s", type=float, default=300.0, help="dashboard time range, seconds")
    args = ap.parse_args()
    step = max(1.0, args.range_s / 1000)  # Grafana: about one point per pixel of a 1000-px panel
    rate_interval = "15s"

    config = parse_config(_config_text(), environ={})
    ours_d = json.loads(render(config)["dashboards/fleet.json"])
    ours = [q for q in queries(ours_d) if "observer_request_" not in q.expr and "prefill" not in q.expr
            and "decode" not in q.expr]  # request-shape panels wait for their export (docs/dashboards.md)
    ours_exprs = [substitute(q.expr, {"namespace": ".*", "model": ".*", "version": ".*"},
                             rate_interval=rate_interval) for q in ours]
    example = queries(json.loads(EXAMPLE.read_text(encoding="utf-8")))

    with run_fleet(config, seed=3, answer_dir=None, total_rps=40.0), run_observer(config) as obs:
        obs.wait_ready(timeout=30)
        targets = [obs.url.removeprefix("http://")] + [u.removeprefix("http://").removesuffix("/metrics")
                                                       for v in config.fleet.versions for u in v.vllm]
        rules = Path(tempfile.mkdtemp(prefix="bench-dash-")) / "rules.yaml"
        rules.write_text(alert_render.render(config)[alert_render.RULES_FILE])  # the SLO recording rules
        with run_prometheus(targets, scrape_interval="1s", rule_files=[rules]) as prom:
            print(f"collecting {args.collect:.0f} s of data from {len(targets)} targets ...", flush=True)
            time.sleep(args.collect)
            models = _models(prom.url, within=30.0)
            example_exprs = {m: [substitute(q.expr, {"model_name": m, "DS_PROMETHEUS": "prometheus"},
                                            rate_interval=rate_interval) for q in example] for m in models}
            ours_ms, example_ms = [], []
            for _ in range(args.repeat):
                ms, ours_data, _ = _refresh(prom, ours_exprs, range_s=args.range_s, step=step)
                ours_ms.append(ms)
                total = 0.0
                example_data = 0
                for m in models:  # one refresh per model to see both versions
                    ms, n, _ = _refresh(prom, example_exprs[m], range_s=args.range_s, step=step)
                    total += ms
                    example_data += n
                example_ms.append(total)
            by_panel: dict[int, list[str]] = {}
            for q, e in zip(ours, ours_exprs, strict=True):
                by_panel.setdefault(q.panel_id, []).append(e)
            ours_split = _split_panels(ours, prom, by_panel, range_s=args.range_s, step=step)
            ex_panels: dict[int, list[str]] = {}
            for q, e in zip(example, example_exprs[models[0]], strict=True):
                ex_panels.setdefault(q.panel_id, []).append(e)
            example_split = _split_panels(example, prom, ex_panels, range_s=args.range_s, step=step)

    o, x = statistics.median(ours_ms), statistics.median(example_ms)
    print(f"ours (fleet overview): {len(ours)} queries, {len({q.panel_id for q in ours})} panels, "
          f"{o:.1f} ms per refresh (median of {args.repeat}), {ours_data}/{len(ours)} queries with data, "
          f"{ours_split} panels showing both versions")
    print(f"vLLM example: {len(example)} queries x {len(models)} models, {x:.1f} ms per refresh of both models, "
          f"{example_data}/{len(example) * len(models)} queries with data, "
          f"{example_split} panels showing both versions")
    print(f"refresh time ratio ours/example: {o / x:.2f}")
    print(json.dumps({
        "ours_queries": len(ours), "ours_ms_per_refresh": round(o, 1), "ours_queries_with_data": ours_data,
        "ours_panels_split_by_version": ours_split,
        "example_queries": len(example) * len(models), "example_ms_per_refresh": round(x, 1),
        "example_queries_with_data": example_data, "example_panels_split_by_version": example_split,
        "refresh_ratio_ours_over_example": round(o / x, 2),
    }))


if __name__ == "__main__":
    main()
