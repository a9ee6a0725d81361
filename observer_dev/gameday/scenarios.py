"""The game day's scenarios (what changes, what must come out), its sizes, and the rows it reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from observer import conventions as names
from observer.errors import ObserverError


class GamedayError(ObserverError):
    """The game day could not set up its fleet, observer or Prometheus."""


class Expect(StrEnum):
    """What a scenario must come out as, in any rig that plays it."""

    PASS = "pass"
    FAIL = "fail"
    NODATA = "nodata"
    IDLE = "idle"
    INCONCLUSIVE = "inconclusive"
    NOT_PASS = "not-pass"  # any verdict but pass, at every look
    NOT_FAIL = "not-fail"  # any verdict but fail, at every look (the real engines' A/A)
    DRIFT = "drift"  # the drift metrics fail; the verdict may go either way (drift is advisory)
    ALERTS = "alerts"  # the scenario's alerts fire after the change and not before
    QUIET = "quiet"  # the scenario's alerts never fire (A/A: what looks like the fault, and is not)
    HELD = "held"  # neither promoted nor aborted, ever (a rollout through a primitive)


class Named(Protocol):
    """A row of a catalogue: any scenario type has a name."""

    @property
    def name(self) -> str: ...


S = TypeVar("S", bound=Named)


@dataclass(frozen=True)
class Catalogue(Generic[S]):
    """The scenario rows one rig plays, and which of them a game day plays when none are named."""

    rig: str  # how an error names the rig: "single-process", "cluster", ...
    rows: tuple[S, ...]  # in the order they are played
    full: frozenset[str] | None = None  # played when none are named (None: every row)
    short: frozenset[str] | None = None  # the short form's (None: those of the full form)
    elsewhere: str = ""  # where a name this rig does not know may be played instead

    def choose(self, only: Sequence[str] | None, *, short: bool) -> list[S]:
        """The rows to play, in catalogue order; GamedayError naming every unknown name."""
        unknown = sorted(set(only or ()) - {s.name for s in self.rows})
        if unknown:
            raise GamedayError(f"unknown scenario(s) {', '.join(unknown)} in the {self.rig} game day; it plays: "
                               f"{', '.join(s.name for s in self.rows)}{self.elsewhere}")
        if only:
            return [s for s in self.rows if s.name in only]
        played = self.short if short and self.short is not None else self.full
        return [s for s in self.rows if played is None or s.name in played]


@dataclass(frozen=True)
class Scenario:
    """One game-day scenario: profiles, an optional change mid-way, and what must come out."""

    name: str
    title: str
    expect: Expect
    canary: Mapping[str, Any] = field(default_factory=dict)
    stable: Mapping[str, Any] = field(default_factory=dict)
    change_after: int | None = None  # rounds before `change` is applied to the canary
    change: Mapping[str, Any] = field(default_factory=dict)
    restart_after: int | None = None  # rounds before the observer is restarted
    dimension: str | None = None  # the Argo Prometheus metric that must fail
    needs: str | None = None  # quality | drift | goodput | fingerprint | proxy
    html_at_verdict_url: bool = False  # the gate's web URL answers 200 with an HTML page, no observer behind it
    costly: bool = False  # the advisory cost_per_token metric must fail (canary dearer per token), else pass
    must_fail: tuple[str, ...] = ()  # verdict metrics that must end `fail`
    # expect "alerts": these generated alerts' expressions, evaluated by the rig's Prometheus, must return a
    # series with `alert_labels` after the change and none before it (the `for` hold is promtool-tested).
    alerts: tuple[str, ...] = ()
    alert_labels: Mapping[str, str] = field(default_factory=dict)
    alert_labels_of: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # per alert, over alert_labels
    replica: int | None = None  # the change applies to this replica of `change_version` only
    change_version: str = "canary"
    min_rounds: int = 0  # looks allowed at least, whatever the plan (a slow-to-decide metric on a busy machine)
    blind: tuple[str, ...] = ()  # PromQL on the engine-side signals that must stay empty: what dashboards show
    hung_after: float | None = None  # scrape.hung_after_seconds for this scenario (default: the config's)
    reason: str = ""  # text the final verdict's reason must contain
    metrics: tuple[Mapping[str, Any], ...] = ()  # canary metrics added to the defaults for this scenario
    canary_end: Mapping[str, Any] = field(default_factory=dict)  # canary.end for this scenario (default: hold 2h)
    pending_pods: int = 0  # canary pods the scheduler cannot place (cluster topology only: pods are API objects)
    # needs "feedback": per version, the share of mirrored answers its users answer and the share they dislike
    feedback: Mapping[str, tuple[float, float]] = field(default_factory=dict)


FEEDBACK_METRIC: Mapping[str, Any] = {"name": "feedback", "kind": "feedback", "critical": True, "group": "quality",
                                      "base_rate": 0.1}
"""The users' feedback as a gate: critical here, so that it alone decides a scenario where nothing else moves."""

NEIGHBOUR, VICTIM = "bigco", "acme"
"""The noisy-neighbour scenario's tenants (both allow-listed by its config)."""
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("healthy", "healthy canary", Expect.PASS),
    Scenario("slow", "TTFT ×1.5", Expect.FAIL, canary={"preset": "slow"}, dimension="latency"),
    Scenario("errors", "error rate 0.5% → 3%", Expect.FAIL, canary={"error_rate": 0.005},
             stable={"error_rate": 0.005}, change_after=2, change={"error_rate": 0.03}, dimension="errors"),
    Scenario("errors-5xx", "vLLM < 0.13 (no `error` finish reason): HTTP 5xx 0.5% → 3%", Expect.FAIL,
             canary={"error_rate": 0.005, "legacy_errors": True}, stable={"error_rate": 0.005, "legacy_errors": True},
             change_after=2, change={"error_rate": 0.03}, dimension="errors"),
    Scenario("worse", "worse answers on the golden set", Expect.FAIL, canary={"accuracy": 0.5}, dimension="quality",
             needs="quality"),
    Scenario("drifted", "10% prompts from another domain", Expect.DRIFT, canary={"preset": "drifted"},
             dimension="drift", needs="drift"),
    Scenario("idle", "canary with no traffic", Expect.NODATA, canary={"preset": "idle"}),
    Scenario("starved", "canary too starved of traffic to decide; canary.end: fail after 20 s", Expect.FAIL,
             canary={"load_rps": 0.5}, canary_end={"after_seconds": 20.0, "then": "fail"}, reason="canary.end"),
    Scenario("unschedulable", "a second canary pod Pending: Insufficient nvidia.com/gpu (cluster only)",
             Expect.INCONCLUSIVE, pending_pods=1, reason="pods not arriving"),
    Scenario("asleep", "canary engines asleep (vLLM sleep mode)", Expect.IDLE, canary={"asleep": True}),
    Scenario("unhealthy", "canary engine reports vllm:engine_healthy 0", Expect.INCONCLUSIVE,
             canary={"engine_healthy": False}, stable={"engine_healthy": True}, reason="unhealthy engine"),
    Scenario("hung", "canary engine hung: requests run, none finishes; /metrics still answers", Expect.INCONCLUSIVE,
             canary={"hung": True}, hung_after=3.0, reason="hung", alerts=(names.ALERT_ENGINE_HUNG,),
             alert_labels={names.VERSION: "canary", names.STATE: "hung"}),
    Scenario("admission", "canary refuses 3% at admission (vLLM queue limit, 503 before the engine)", Expect.FAIL,
             canary={"admission_reject_rate": 0.03}, dimension="errors", must_fail=("errors",)),
    Scenario("nan-logits", "canary answers 3% of requests from NaN logits (a broken quantisation)", Expect.FAIL,
             canary={"corrupted_rate": 0.03}, stable={"corrupted_rate": 0.0},
             metrics=({"name": "nan_logits", "kind": "ratio", "corrupted": True, "critical": True,
                       "base_rate": 0.001},),
             dimension="errors", must_fail=("nan_logits",), alerts=(names.ALERT_CORRUPTED_OUTPUTS,),
             alert_labels={names.VERSION: "canary"}),
    Scenario("router-queue", "the router queues the canary: 0.5 s at the gateway, llm-d pool saturated",
             Expect.INCONCLUSIVE, canary={"router_queue_s": 0.5, "router_saturation": 1.3}, reason="router"),
    Scenario("restart", "observer restarted mid-analysis", Expect.NOT_PASS, canary={"preset": "slow"},
             restart_after=2),
    Scenario("html", "verdict URL answers 200 with an HTML page", Expect.NOT_PASS, html_at_verdict_url=True),
    Scenario("costly", "canary on 2 GPUs per replica: 2× the cost per token", Expect.PASS,
             canary={"gpus_per_replica": 2}, costly=True),
    Scenario("goodput", "same cost, time per output token ×3: worse goodput", Expect.FAIL, canary={"itl_scale": 3.0},
             dimension="quality", needs="goodput", must_fail=("goodput",), min_rounds=30),
    Scenario("users-notice", "only the users notice: latency and golden sets unchanged, negative feedback "
             "doubled", Expect.FAIL, needs="feedback", dimension="quality", must_fail=("feedback",), min_rounds=30,
             metrics=(FEEDBACK_METRIC,), feedback={"stable": (0.25, 0.12), "canary": (0.25, 0.24)}),
    Scenario("users-silent", "negative feedback doubled, but the canary's users gave too few answers",
             Expect.INCONCLUSIVE, needs="feedback", metrics=(FEEDBACK_METRIC,), reason="feedback",
             feedback={"stable": (0.25, 0.12), "canary": (0.003, 0.24)}),
    Scenario("decode", "decode slower: time per output token ×1.5, TTFT and errors unchanged", Expect.FAIL,
             canary={"itl_scale": 1.5}, dimension="latency", must_fail=("itl",)),
    Scenario("template-rollback", "weights rolled back, the new system prompt kept", Expect.ALERTS, change_after=2,
             needs="fingerprint", alerts=(names.ALERT_FINGERPRINT_CHANGED, names.ALERT_FINGERPRINT_MISMATCH),
             alert_labels={names.VERSION: "canary", names.PART: "template"}),
    Scenario("slow-replica", "one stable GPU overheats: 3× slower than its three siblings", Expect.ALERTS,
             change_after=2, change={"ttft_scale": 3.0, "gpu_thermal_throttle": 0.6}, change_version="stable",
             replica=2, alerts=(names.ALERT_REPLICA_OUTLIER, names.ALERT_GPU_HW_SLOWDOWN),
             alert_labels={names.VERSION: "stable"},
             alert_labels_of={names.ALERT_REPLICA_OUTLIER: {names.REPLICA: "sim-stable-2"},
                              names.ALERT_GPU_HW_SLOWDOWN: {names.REASON: "hw_thermal"}}),
    Scenario("shed", "users turned away (503) before the engine: vLLM's own signals stay green", Expect.ALERTS,
             change_after=2, change={"shed_rate": 0.2}, needs="proxy", alerts=(names.ALERT_LOAD_SHEDDING,),
             alert_labels={names.VERSION: "canary"},
             blind=(f'max({names.WIN_FINISHED_RATIO}{{version="canary",finished_reason="error"}}) > 0.001',)),
    Scenario("gpu-ecc", "the canary's GPU reports uncorrectable ECC errors", Expect.ALERTS, change_after=2,
             change={"gpu_ecc_dbe": 2}, alerts=(names.ALERT_GPU_MEMORY_ERRORS,),
             alert_labels={names.VERSION: "canary"}),
    # Fourteen rounds before the change: the alert compares a victim's TTFT with its own an hour (scaled) before.
    Scenario("noisy-neighbour", "one tenant's share of the canary's tokens 1/3 → 9/10 while the other's first "
             "tokens slow ×3", Expect.ALERTS, change_after=14, min_rounds=22, change={"ttft_scale": 3.0},
             needs="tenants", alerts=(names.ALERT_NOISY_NEIGHBOUR,),
             alert_labels={names.VERSION: "canary", names.TENANT: NEIGHBOUR}),
    Scenario("noisy-neighbour-aa", "one tenant takes 9/10 of the canary's tokens throughout, nobody slows (A/A)",
             Expect.QUIET, change_after=0, needs="tenants", alerts=(names.ALERT_NOISY_NEIGHBOUR,)),
)
SINGLE = Catalogue(
    "single-process",
    # A pod the scheduler cannot place is an API object: the cluster game day plays those scenarios.
    tuple(s for s in SCENARIOS if not s.pending_pods),
    # The embedder-based check runs in the full form only.
    short=frozenset(s.name for s in SCENARIOS if s.needs != "drift" and not s.pending_pods),
    elsewhere=" (the cluster game day, --cluster, plays more)")
FINGERPRINT_OLD = "You are ACME's support assistant. Answer in two sentences."
FINGERPRINT_NEW = "You are ACME's support assistant v2. Use bullet points and cite the help centre."
FINGERPRINT_WINDOW = 3.0  # seconds: the game day's current window (one round of mirrored samples)
STABLE_PODS = 4  # stable pods of the rig: at the 80/20 split each pod of either arm serves the same load


@dataclass
class Row:
    """What one scenario produced and whether it matched."""

    scenario: str
    title: str
    expected: Expect
    verdicts: list[str] = field(default_factory=list)
    web_gate: str = ""
    guardrail: str = ""
    prometheus: dict[str, str] = field(default_factory=dict)
    ok: bool = False
    detail: str = ""
    seconds: float = 0.0
    failed_metric: str = ""  # the metrics the final verdict failed on, comma-joined
    evidence: Any = None  # what else the scenario measured (the real game day: quality and drift evidence)
    report: str = ""  # the pair's report page (HTML) at the scenario's last look
    flagger: str = ""  # where Flagger's analysis loop (observer_dev/gameday/flagger.py) ended on the last look
    reads: dict[str, str] = field(default_factory=dict)  # per reader (web gate, twin, Flagger, report): when, what

    def readers(self) -> str:
        """When each reader read and what it read, for a failure message."""
        return "; ".join(f"{k}: {v}" for k, v in self.reads.items()) or "no reader read"


@dataclass
class Report:
    """All rows; ok when every scenario matched."""

    rows: list[Row]

    @property
    def ok(self) -> bool:
        """True when every scenario matched."""
        return all(r.ok for r in self.rows)


@dataclass(frozen=True)
class Plan:
    """Sizes of a game day: load per round, rounds, and timings."""

    stable_rps: float
    canary_rps: float
    round_seconds: float  # simulated seconds of load injected per round
    max_rounds: int
    scrape_interval: float


SHORT = Plan(stable_rps=60.0, canary_rps=15.0, round_seconds=30.0, max_rounds=16, scrape_interval=1.0)
FULL = Plan(stable_rps=80.0, canary_rps=20.0, round_seconds=60.0, max_rounds=30, scrape_interval=1.0)
