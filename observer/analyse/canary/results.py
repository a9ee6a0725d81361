"""The canary judge's data in and results out: the facts of one arm (ArmData, with its paired counts and drift
observation), one metric's result, and the verdict. Frozen: the service, the API and the collector read
them without copying."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from observer.collect.model import Histogram
from observer.conventions.labels import EngineState


class Outcome(StrEnum):
    """Result of one metric, and of the whole canary."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    NODATA = "nodata"
    IDLE = "idle"
    """An arm's engines sleep (vLLM sleep mode): nothing to compare, on purpose. Never a fail, never a nodata
    that pages; Argo reads it as neither pass nor fail (inconclusive)."""


GAUGE_VALUE: Mapping[Outcome, float] = {Outcome.PASS: 1.0, Outcome.FAIL: -1.0, Outcome.INCONCLUSIVE: 0.0,
                                        Outcome.NODATA: 0.0, Outcome.IDLE: 0.0}
"""How outcomes are exported as gauges: never NaN, so Argo conditions can always be evaluated."""


UNKNOWN_VERSIONS = "unknown version(s)"
"""How a verdict for a pair the fleet does not hold starts its reason (the Flagger hooks answer it with 404)."""

@dataclass(frozen=True)
class DriftObservation:
    """The drift area's latest result for one field of one version."""

    drift: bool
    status: str  # ok | insufficient_data | no_baseline
    p_value: float | None = None
    statistic: float | None = None
    n_current: int = 0


@dataclass(frozen=True)
class PairCounts:
    """Paired comparisons of the canary with the baseline on the same prompts (shadow replay), by outcome."""

    wins: int = 0
    """The canary's answer was better (judge: in both orders; rule check: only the baseline's failed)."""
    losses: int = 0
    ties: int = 0
    """Equal answers, or both passed/failed the rule check."""
    inconsistent: int = 0
    """Judge pairs whose two orders disagreed: a tie, counted apart (the judge's position bias)."""
    errors: int = 0
    """Pairs with no decision: a replay failed or timed out, or the judge answered garbage. Never a win."""

    @property
    def decided(self) -> int:
        return self.wins + self.losses

    def evidence(self) -> dict[str, int]:
        return {"wins": self.wins, "losses": self.losses, "ties": self.ties,
                "position_inconsistent": self.inconsistent, "errors": self.errors}


@dataclass(frozen=True)
class FeedbackWindow:
    """Users' feedback on one arm's sampled answers over the window, and per slice (the same slices on both arms)."""

    events: int
    negatives: int
    responses: int
    """Sampled live answers of the window: the response rate's denominator."""
    units: int
    """Conversations (or lone answers) the events came from."""
    slices: tuple[tuple[int, int], ...] = ()
    """(negatives, events) per slice of the window, by when the user gave them."""
    note: str = ""
    truncated: bool = False
    """Only the newest slices of a window longer than the reader's bound were read (no planned end then)."""
    error: str = ""
    """Why the feedback could not be read (the store failed): the metric is nodata with it."""

    @property
    def response_rate(self) -> float | None:
        return self.events / self.responses if self.responses else None


ROUTED_NOTE = "no vLLM series under its model name (vLLM counts an adapter under the base model): judge router_ttft"
"""Why an engine-side metric is nodata for a version whose requests are the router's."""


@dataclass(frozen=True)
class ArmData:
    """Everything the judge reads about one version over the window; None/missing means no data."""

    requests: Mapping[str, float] | None = None
    """Finished requests in the window by finished_reason."""
    http_status: Mapping[str, float] | None = None
    """Generation responses of vLLM's HTTP server in the window by status class (2xx, 4xx, 5xx)."""
    histograms: Mapping[str, Histogram] = field(default_factory=dict)
    """Histogram increase over the window by family (ttft, itl, e2e, queue)."""
    golden: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """(passed, scored) golden items by golden set ("" = all sets)."""
    golden_judge_errors: Mapping[str, int] = field(default_factory=dict)
    """Golden items the judge failed to score over the window, by golden set ("" = all sets)."""
    live_checks: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """(failures, total) by live-check name."""
    drift: Mapping[str, DriftObservation] = field(default_factory=dict)
    note: str = ""
    """Why data is missing (e.g. the source was unreachable), shown in the reason."""
    slices: tuple[ArmData, ...] = ()
    """The same window cut into consecutive time slices (requests, histograms and live checks), oldest first.
    With slices the bad-event tests are cluster-robust (stats.slice_test); without, they assume every
    request is an independent draw, which dependent traffic breaks (docs/canary.md)."""
    replicas: int | None = None
    """Pods serving this arm (ready targets), for the per-pod load fairness check."""
    prefix_cache_hit_ratio: float | None = None
    """Prefix-cache hit ratio over the last minutes, for the warm-up fairness check."""
    environment: Mapping[str, str] = field(default_factory=dict)
    """Facts that must match between arms for a fair comparison (gpu_model, gpu_driver, engine_args…)."""
    cost_per_million_tokens: float | None = None
    """Cost over the window per million generated tokens (None: no prices, no tokens or unpriced GPUs)."""
    paired: Mapping[str, PairCounts] = field(default_factory=dict)
    """Canary arm only: paired comparisons with its baseline over the window, by paired check."""
    paired_note: str = ""
    """Why paired comparisons are missing or stopped (replay budget spent, shadow replay off)."""
    feedback: FeedbackWindow | None = None
    """Users' feedback on the arm's sampled answers; None where no store is read."""
    judge_identity: Mapping[str, str] = field(default_factory=dict)
    """The LLM judge behind quality results (model, prompt hash, rubric hash), pinned in the verdict."""
    admission_rejections: float | None = None
    """Requests vLLM refused at admission in the window (503 before the engine; in no finished count)."""
    replicas_in_state: Mapping[EngineState, int] = field(default_factory=dict)
    """Replicas now unhealthy (vLLM's engine_healthy 0), asleep (every engine in sleep mode) or hung (requests
    running, none finished for scrape.hung_after_seconds); a state no replica is in is absent."""
    corrupted: float | None = None
    """Finished requests with NaNs in their logits in the window; None where vLLM does not check."""
    spec_decode: Mapping[str, float] | None = None
    """Speculative-decoding draft tokens in the window by outcome (accepted, rejected); None without it."""
    router_trouble: str = ""
    """What the router in front of the arm reported in the window: its pool saturated or endpoints stale."""
    routed_requests: bool = False
    """`requests` are the router's, by outcome: vLLM has no series under this version's model name (a LoRA
    adapter, which vLLM counts under the base model), so only the router sees the version's own requests."""
    pods: Mapping[str, ArmData] = field(default_factory=dict)
    """The same window per pod of the arm, by pod name, each with its own slices (on the arm's slice edges): the
    units of the pods-as-units pass test (pods.py). Empty where the source has no per-pod series."""
    pods_waiting: Mapping[str, int] = field(default_factory=dict)
    """Pods of the version that do not serve yet, by `state[:reason]` (Kubernetes discovery): unschedulable
    for want of a GPU, starting, failing, not Ready. Empty without discovery."""

    def in_state(self, state: EngineState) -> int:
        """Replicas in engine state `state` (0 when none is)."""
        return self.replicas_in_state.get(state, 0)

    @property
    def total_requests(self) -> int | None:
        """Finished requests in the window, or None when the source has no request counters."""
        if self.requests is None:
            return None
        return round(sum(self.requests.values()))


@dataclass(frozen=True)
class MetricResult:
    """One metric's outcome and the numbers behind it."""

    name: str
    kind: str
    outcome: Outcome
    critical: bool
    advisory: bool
    group: str
    n_canary: int = 0
    n_baseline: int = 0
    min_n: int | None = None
    canary: float | None = None
    """Canary value: bad-event rate, share above edge, pass rate, or drift p-value."""
    baseline: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    detail: str = ""
    design_effect: float | None = None
    """Slice variance ÷ binomial variance: how much the dependence in the traffic inflates the noise."""
    slices: int | None = None
    """Slices with data in both arms behind a sliced test (None: the metric is not tested on slices)."""
    worse_since: int | None = None
    """The slice a failing sliced test found the canary worse from (None: from the first, or not failed)."""
    evidence: Mapping[str, int] | None = None
    """paired: wins, losses, ties, position-inconsistent pairs and errors behind the outcome."""


@dataclass(frozen=True)
class Verdict:
    """The judge's answer for one (canary, baseline) pair at one look."""

    canary: str
    baseline: str
    verdict: Outcome
    score: float
    critical_failed: bool
    n_canary: int
    n_baseline: int
    split_ok: bool
    canary_share: float | None
    expected_share: float | None
    metrics: tuple[MetricResult, ...]
    reason: str
    evaluated_at: float
    window_seconds: float = 0.0
    judge: Mapping[str, str] = field(default_factory=dict)
    """The LLM judge's identity (model, prompt hash, rubric hash) behind the quality metrics, if any."""
    undecided_seconds: float = 0.0
    """How long the pair has been undecided (inconclusive, nodata, idle) as of this look; 0 once decided."""
    looks: str = ""
    """How the sliced tests spend α over the looks: at a planned end, or anytime-valid and why (planned.py)."""
    unknown: tuple[str, ...] = ()
    """The names asked about that the fleet does not know (the verdict is nodata): a gate naming the wrong
    versions, told apart from one whose versions have no data yet."""

    def metric(self, name: str) -> MetricResult:
        """The result of metric `name`; KeyError if it was not judged."""
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(name)


@dataclass(frozen=True)
class Evidence:
    """A verdict and the data of both arms it was judged on."""

    verdict: Verdict
    canary: ArmData
    baseline: ArmData
