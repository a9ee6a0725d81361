"""What each kind of scenario sends the observer besides the simulator's load: mirrored samples (for drift,
goodput and the users' feedback), chat requests through the observer's proxy, system-prompt fingerprints."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from observer.analyse.drift.pinning import pin_baseline
from observer.config import ObserverConfig
from observer.errors import ObserverError
from observer_dev.gameday.rig import TENANT_TIME_SCALE
from observer_dev.gameday.scenarios import (
    FINGERPRINT_NEW,
    FINGERPRINT_OLD,
    FINGERPRINT_WINDOW,
    NEIGHBOUR,
    VICTIM,
    GamedayError,
    Plan,
    Scenario,
)
from observer_dev.gameday.users import GamedayUsersError, give_feedback


def ingest(fleet: Any, observer_url: str, version: str, *, want: int, seconds: float,
           tenant: Callable[[int], str] | None = None) -> list[dict[str, Any]]:
    """Mirror `want` of the simulator's recent `version` requests into the observer (POST /api/v1/samples),
    the i-th from `tenant(i)` where given; returns what was mirrored."""
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
                          "output_tokens": x.output_tokens, "latency_s": x.latency_s, "ttft_s": x.ttft_s,
                          **({"tenant": tenant(len(batch))} if tenant is not None else {})})
    for i in range(0, len(batch), 1000):
        r = httpx.post(f"{observer_url}/api/v1/samples", json={"samples": batch[i:i + 1000]}, timeout=30)
        if r.status_code >= 300:
            raise GamedayError(f"ingest of {version} samples answered HTTP {r.status_code}: {r.text[:200]}")
    return batch


def prepare_drift(fleet: Any, observer_url: str, cfg: ObserverConfig) -> None:
    """Ingest stable samples, pin and promote a baseline from them (as `observer baseline pin`, with the
    observer's config `cfg`: its store and baseline folder), ingest canary samples."""
    n = len(ingest(fleet, observer_url, "stable", want=1500, seconds=5.0))
    try:
        pin_baseline(cfg, "stable", now=time.time(), created_by="gameday", promote=True)
    except ObserverError as e:
        raise GamedayError(f"could not pin a baseline from {n} stable samples: {e}") from e
    ingest(fleet, observer_url, "canary", want=500, seconds=5.0)


def ingest_fingerprinted(observer_url: str, version: str, system: str, *, n: int, ts: float) -> None:
    """Mirror `n` chat samples of `version` whose requests carry `system` as their system prompt."""
    batch = [{"version": version, "output": "ok", "ts": ts + i * 1e-3, "model": "llm",
              "messages": [{"role": "system", "content": system}, {"role": "user", "content": f"order {i}?"}],
              "sampling": {"temperature": 0.2, "max_tokens": 64}} for i in range(n)]
    r = httpx.post(f"{observer_url}/api/v1/samples", json={"samples": batch}, timeout=30)
    if r.status_code >= 300:
        raise GamedayError(f"ingest of {version} samples answered HTTP {r.status_code}: {r.text[:200]}")


def through_proxy(port: int, *, n: int) -> None:
    """`n` users' chat requests through the observer's sampling proxy (whatever each one answers)."""
    body = {"messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 16}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        for _ in range(n):
            client.post("/v1/chat/completions", json=body)


@dataclass(frozen=True)
class RoundContext:
    """One round of one scenario, as the traffic of its kind sees it."""

    scenario: Scenario
    fleet: Any
    observer_url: str
    ports: Mapping[str, int]
    plan: Plan
    round: int
    users: np.random.Generator  # the scenario's users, the same each run
    answered: set[str]  # the answers they have seen
    mirror_cut: bool = False  # the observer the mirror posts to is cut from its store (the cluster's partition)
    faults: list[str] = field(default_factory=list)  # what the round's traffic met, for the row


def _load_only(c: RoundContext) -> None:
    time.sleep(c.plan.scrape_interval * 2.0)  # about one round per two-second slice


def _drift_round(c: RoundContext) -> None:
    # More mirrored canary samples each round: the drift test's power grows with the window. A mirror pauses while
    # the observer it posts to is cut from its store, and drops a round the store answers 503 to, as it would.
    if not c.mirror_cut:
        try:
            ingest(c.fleet, c.observer_url, "canary", want=250, seconds=5.0)
        except GamedayError as e:
            if "HTTP 503" not in str(e):
                raise
            c.faults.append(f"look {c.round}: ingest answered 503 (store not ready); round skipped")
    time.sleep(c.plan.scrape_interval * 5.0)  # a drift check is offered every 10 s


def _proxy_round(c: RoundContext) -> None:
    through_proxy(c.ports["proxy"], n=100)
    time.sleep(c.plan.scrape_interval * 2.0)


def _fingerprint_round(c: RoundContext) -> None:
    time.sleep(FINGERPRINT_WINDOW + 0.5)  # the last round's samples leave the current window
    s = c.scenario
    changed = s.change_after is not None and c.round >= s.change_after
    now = time.time()
    ingest_fingerprinted(c.observer_url, "stable", FINGERPRINT_OLD, n=30, ts=now)
    ingest_fingerprinted(c.observer_url, "canary", FINGERPRINT_NEW if changed else FINGERPRINT_OLD, n=30, ts=now)
    time.sleep(c.plan.scrape_interval * 2.0)  # one fingerprint check and one Prometheus scrape


def _goodput_round(c: RoundContext) -> None:
    for version in ("stable", "canary"):  # both arms mirrored: the goodput check compares them
        ingest(c.fleet, c.observer_url, version, want=150, seconds=1.0)
    time.sleep(c.plan.scrape_interval * 3.0)  # live scoring runs every second


def _tenants_round(c: RoundContext) -> None:
    # The canary's requests from two tenants, mirrored: the neighbour sends one in three before the change and nine
    # in ten after it, the victim the same 40 a round throughout (its p95 is read from as many requests after as
    # before). The change slows the canary's first tokens: the scenario plays the neighbour's effect, and checks
    # the chain from mirrored samples through the bounded tenant label to the generated alert.
    after = c.scenario.change_after is not None and c.round >= c.scenario.change_after
    if after:
        ingest(c.fleet, c.observer_url, "canary", want=400, seconds=5.0,
               tenant=lambda i: VICTIM if i % 10 == 0 else NEIGHBOUR)
    else:
        ingest(c.fleet, c.observer_url, "canary", want=60, seconds=5.0,
               tenant=lambda i: NEIGHBOUR if i % 3 == 0 else VICTIM)
    time.sleep(c.plan.scrape_interval * 2.0)


def _feedback_round(c: RoundContext) -> None:
    for version in ("stable", "canary"):  # both arms mirrored; their users answer some of what they got
        rate, negative = c.scenario.feedback[version]
        try:
            give_feedback(c.observer_url, ingest(c.fleet, c.observer_url, version, want=150, seconds=1.0),
                          response_rate=rate, negative=negative, rng=c.users, seen=c.answered)
        except GamedayUsersError as e:
            raise GamedayError(str(e)) from e
    time.sleep(c.plan.scrape_interval * 2.0)


ROUNDS: dict[str, Callable[[RoundContext], None]] = {
    "drift": _drift_round, "proxy": _proxy_round, "fingerprint": _fingerprint_round, "goodput": _goodput_round,
    "feedback": _feedback_round, "tenants": _tenants_round}
"""What a scenario that needs each kind sends after each round of load; any other scenario only waits."""


def round_traffic(s: Scenario, fleet: Any, observer_url: str, ports: Mapping[str, int], plan: Plan, rnd: int, *,
                  users: np.random.Generator, answered: set[str], mirror_cut: bool = False,
                  faults: list[str] | None = None) -> None:
    """After round `rnd` of the simulator's load: what the scenario's kind sends, and the wait for it to land;
    what the traffic met is appended to `faults`."""
    ROUNDS.get(s.needs or "", _load_only)(RoundContext(s, fleet, observer_url, ports, plan, rnd, users, answered,
                                                       mirror_cut, faults if faults is not None else []))


def before_rounds(s: Scenario, observer_url: str) -> None:
    """What the hour before the step held, where the scenario's kind reads it."""
    if s.needs == "tenants":
        # Prometheus outlives each scenario's observer: the previous tenants scenario's series (a slowed victim)
        # must leave the scaled rate window before this one's first look, or they decide it.
        time.sleep(600 * TENANT_TIME_SCALE + 3.0)
    if s.needs == "fingerprint":  # both versions served the old system prompt
        for version in ("stable", "canary"):
            ingest_fingerprinted(observer_url, version, FINGERPRINT_OLD, n=60, ts=time.time() - 300)
