"""Every other kind the canary judge reads, simulated beside a latency/error step (tests.support.canary_streams):
live checks on sampled requests, goodput, golden-set rounds, paired shadow comparisons, drift and cost.

Samples are the arm's own requests (the sampling proxy's reservoir, 100 per 10 s, keeps all of them at these
rates). Two ways their outcomes are drawn:

* ``iid``      each sample fails a check independently (refusal 2%, empty 0.5%, invalid JSON 3% of the JSON
               requests).
* ``session``  users send runs of related prompts (geometric, mean 8, ~15 s apart) and a session sticks to
               one arm: a risky topic (10% of sessions) is refused 15% of the time, the rest 0.5%; a third
               of sessions ask for JSON, and a fifth of those have a schema the model gets wrong 20% of the
               time. Same means as ``iid``; the failures come in runs.

Goodput is bad when the sample's TTFT (drawn from its arm's requests of the same seconds) is above the
baseline's q95 edge: it inherits the latency model's dependence (queues, stalls). Golden sets: both arms
answer the same 50 items (fixed difficulty) every 15 min from the step start. Paired: ~0.2 shadow pairs per
second, a third decided, each a fair coin in an A/A step. Drift and cost (advisory by default) are present
with A/A values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from observer.analyse.canary.results import ArmData, DriftObservation, PairCounts
from tests.support.canary_streams import TTFT_EDGES, Step

CHECKS: tuple[str, ...] = ("refusal", "empty", "invalid_json", "goodput")
GOLDEN_ITEMS = 50
GOLDEN_EVERY = 900
PAIRS_PER_SECOND = 0.2
QUALITY_MODELS = ("iid", "session")


@dataclass(frozen=True)
class ArmQuality:
    """Per-second live-check failures and totals (T, len(CHECKS)), golden rounds, and (canary) pairs."""

    fails: np.ndarray
    totals: np.ndarray
    golden: tuple[tuple[int, int, int], ...]  # (second, passed, scored)
    pairs: np.ndarray | None = None  # (T, 3): wins, losses, ties


def _sessions(rng: np.random.Generator, requests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(second, session id) of each request, sessions of mean 8 related prompts ~15 s apart on this arm."""
    seconds = len(requests)
    rate = float(requests.sum()) / max(seconds, 1) / 8.0
    starts = np.flatnonzero(rng.poisson(rate, seconds))
    ts, ids = [], []
    for sid, s in enumerate(starts):
        k = int(rng.geometric(1 / 8))
        t = s + np.concatenate(([0.0], np.cumsum(rng.exponential(15.0, k - 1))))
        t = t[t < seconds].astype(int)
        ts.append(t)
        ids.append(np.full(len(t), sid))
    if not ts:
        return np.zeros(0, dtype=int), np.zeros(0, dtype=int)
    return np.concatenate(ts), np.concatenate(ids)


def draw_arm(rng: np.random.Generator, stream_requests: np.ndarray, ttft: np.ndarray, edge: int, *, model: str,
             refusal_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """One arm's live-check (failures, totals) per second; `edge` is the TTFT bucket index above which a
    sample misses goodput."""
    seconds = len(stream_requests)
    if model == "session":
        t, sid = _sessions(rng, stream_requests)
        n_sessions = int(sid.max()) + 1 if sid.size else 0
        risky = rng.random(n_sessions) < 0.10
        wants_json = rng.random(n_sessions) < 1 / 3
        hard = rng.random(n_sessions) < 0.2
        p_refusal = np.where(risky[sid], 0.15, 0.005)
        json_req = wants_json[sid]
        p_invalid = np.where(hard[sid], 0.2, 0.01)
    elif model == "iid":
        t = np.repeat(np.arange(seconds), stream_requests)
        p_refusal = np.full(t.size, 0.02)
        json_req = rng.random(t.size) < 1 / 3
        p_invalid = np.full(t.size, 0.03)
    else:
        raise ValueError(f"unknown quality model {model!r}; known: {', '.join(QUALITY_MODELS)}")
    n = t.size
    refused = rng.random(n) < np.minimum(p_refusal * refusal_scale, 1.0)
    empty = rng.random(n) < 0.005
    invalid = json_req & (rng.random(n) < p_invalid)
    # Goodput: the sample's TTFT bucket drawn from its arm's requests of the same seconds (±1 s).
    cum = np.cumsum(ttft, axis=0)
    lo, hi = np.clip(t - 1, 0, seconds - 1), np.clip(t + 1, 0, seconds - 1)
    near = cum[hi] - np.where((lo > 0)[:, None], cum[np.maximum(lo - 1, 0)], 0)
    above = near[:, edge + 1:].sum(axis=1)
    total = near.sum(axis=1)
    slow = rng.random(n) * np.maximum(total, 1) < above
    fails = np.zeros((seconds, len(CHECKS)), dtype=np.int64)
    totals = np.zeros((seconds, len(CHECKS)), dtype=np.int64)
    for j, (bad, counted) in enumerate(((refused, None), (empty, None), (invalid, json_req), (slow, total > 0))):
        mask = np.ones(n, dtype=bool) if counted is None else counted
        np.add.at(totals[:, j], t[mask], 1)
        np.add.at(fails[:, j], t[mask & bad], 1)
    return fails, totals


def _golden(rng: np.random.Generator, seconds: int, difficulty: np.ndarray, accuracy: float = 1.0
            ) -> tuple[tuple[int, int, int], ...]:
    rounds = []
    for t in range(0, seconds, GOLDEN_EVERY):
        passed = int((rng.random(difficulty.size) < difficulty * accuracy).sum())
        rounds.append((t + 120, passed, int(difficulty.size)))  # a round takes ~2 min to score
    return tuple(r for r in rounds if r[0] < seconds)


@dataclass(frozen=True)
class QualityStep:
    """Both arms' quality outcomes beside a latency step."""

    canary: ArmQuality
    baseline: ArmQuality
    drift_flags: np.ndarray  # (looks at 5-min cadence,) canary drift detected
    cost: tuple[float, float]

    def arm(self, which: str, data: ArmData, t: int, slice_seconds: int = 60) -> ArmData:
        """`data` (a latency window [0, t)) with this arm's quality outcomes over [0, t) added."""
        q = self.canary if which == "canary" else self.baseline
        live = {c: (int(q.fails[:t, j].sum()), int(q.totals[:t, j].sum())) for j, c in enumerate(CHECKS)}
        slices = tuple(
            ArmData(requests=s.requests, histograms=s.histograms, http_status=s.http_status,
                    live_checks={c: (int(q.fails[a:min(a + slice_seconds, t), j].sum()),
                                     int(q.totals[a:min(a + slice_seconds, t), j].sum()))
                                 for j, c in enumerate(CHECKS)})
            for s, a in zip(data.slices, range(0, t, slice_seconds), strict=False))
        golden = [(p, n) for ts, p, n in q.golden if ts < t]
        paired = {}
        if q.pairs is not None:
            w, lo, ti = (int(x) for x in q.pairs[:t].sum(axis=0))
            paired = {"judge": PairCounts(wins=w, losses=lo, ties=ti)}
        drift = {}
        if which == "canary" and t >= 300:
            flagged = bool(self.drift_flags[min(t // 300, len(self.drift_flags)) - 1])
            drift = {f: DriftObservation(drift=flagged, status="ok", p_value=0.001 if flagged else 0.4,
                                         n_current=200) for f in ("prompts", "outputs")}
        return ArmData(requests=data.requests, histograms=data.histograms, http_status=data.http_status,
                       slices=slices, replicas=data.replicas, prefix_cache_hit_ratio=data.prefix_cache_hit_ratio,
                       live_checks=live, golden={"": (sum(p for p, _ in golden), sum(n for _, n in golden))}
                       if golden else {}, paired=paired, drift=drift,
                       cost_per_million_tokens=self.cost[0] if which == "canary" else self.cost[1])


def quality_step(step: Step, *, seed: int, model: str, refusal_scale: float = 1.0, accuracy: float = 1.0
                 ) -> QualityStep:
    """Quality outcomes for both arms of `step` (A/A unless the canary refuses `refusal_scale`× as often or
    answers golden items right `accuracy`× as often)."""
    rng = np.random.default_rng(seed + 7_000_000)
    base = step.baseline.ttft.sum(axis=0)
    cdf = np.cumsum(base) / max(float(base.sum()), 1.0)
    edge = min(int(np.searchsorted(cdf, 0.95)), len(TTFT_EDGES) - 1)
    live_c = draw_arm(rng, step.canary.requests, step.canary.ttft, edge, model=model, refusal_scale=refusal_scale)
    live_b = draw_arm(rng, step.baseline.requests, step.baseline.ttft, edge, model=model)
    difficulty = rng.beta(4.0, 1.0, GOLDEN_ITEMS)
    pairs = np.zeros((step.seconds, 3), dtype=np.int64)
    n_pairs = rng.poisson(PAIRS_PER_SECOND, step.seconds)
    decided = rng.binomial(n_pairs, 1 / 3)
    pairs[:, 0] = rng.binomial(decided, 0.5)
    pairs[:, 1] = decided - pairs[:, 0]
    pairs[:, 2] = n_pairs - decided
    c = ArmQuality(*live_c, golden=_golden(rng, step.seconds, difficulty, accuracy), pairs=pairs)
    b = ArmQuality(*live_b, golden=_golden(rng, step.seconds, difficulty))
    drift_flags = rng.random(step.seconds // 300 + 1) < 0.01
    price = 2.0 * np.exp(rng.normal(0.0, 0.02, 2))
    return QualityStep(canary=c, baseline=b, drift_flags=drift_flags, cost=(float(price[0]), float(price[1])))
