"""Whether the two arms can be compared: engines asleep, unhealthy or hung, environments that differ, and
latency or cost that unequal per-pod load or a warming canary would bias. Pure: ArmData in, reasons out."""

from __future__ import annotations

from collections.abc import Sequence

from observer import conventions as names
from observer.analyse.canary import absolute
from observer.analyse.canary.results import ArmData, MetricResult, Outcome
from observer.config.canary import CanarySpec, FairnessSpec
from observer.conventions.labels import EngineState


def all_asleep(a: ArmData) -> bool:
    """Every replica of the arm sleeps (a partly asleep arm still serves, and is judged)."""
    asleep = a.in_state(EngineState.ASLEEP)
    return asleep > 0 and (a.replicas is None or asleep >= a.replicas)


def engine_trouble(c: ArmData, b: ArmData) -> list[str]:
    """Unhealthy or hung engines in either arm: a comparison that cannot pass (what it measured was not serving)."""
    out = []
    for arm, a in (("canary", c), ("baseline", b)):
        if n := a.in_state(EngineState.UNHEALTHY):
            out.append(f"{n} {arm} replica(s) report an unhealthy engine (vLLM engine_healthy 0)")
        if n := a.in_state(EngineState.HUNG):
            out.append(f"{n} {arm} replica(s) hung: requests running, none finished")
    return out


def pods_missing(c: ArmData) -> str:
    """Why the canary is not all there: pods its controller asked for that do not serve (the scheduler found no
    GPU, a container crashes, it still loads the model). Judged on the pods that arrived, a pass would promote
    a version the cluster cannot run at its weight; a failure on them still stands."""
    if not c.pods_waiting:
        return ""
    waiting = sum(c.pods_waiting.values())
    parts = sorted(c.pods_waiting.items(), key=lambda kv: (-kv[1], kv[0]))
    why = ", ".join(f"{n} {key.replace(':', ' (', 1)}{')' if ':' in key else ''}" for key, n in parts)
    serving = "" if c.replicas is None else f" ({c.replicas} serving)"
    return f"the canary waits for {waiting} pod(s){serving}: {why}"


def environment_mismatch(spec: CanarySpec, c: ArmData, b: ArmData) -> list[str]:
    """The `fairness.same_environment` facts both arms report and that differ."""
    out = []
    for key in spec.fairness.same_environment:
        vc, vb = c.environment.get(key), b.environment.get(key)
        if vc and vb and vc != vb:
            out.append(f"{key} differs: canary {vc[:80]!r} vs baseline {vb[:80]!r}" + (
                f" (an engine rollout: drop {key} from canary.fairness.same_environment to judge it as one)"
                if key == names.ENGINE_VERSION else ""))
    return out


def mute_unfair_latency(spec: CanarySpec, results: Sequence[MetricResult], c: ArmData, b: ArmData
                        ) -> list[MetricResult]:
    """Latency results that unequal per-pod load or a warming canary would bias, made inconclusive."""
    f = spec.fairness
    mute: dict[Outcome, str] = {}
    if f.warmup_hit_ratio_gap is not None and c.prefix_cache_hit_ratio is not None \
            and b.prefix_cache_hit_ratio is not None \
            and b.prefix_cache_hit_ratio - c.prefix_cache_hit_ratio > f.warmup_hit_ratio_gap:
        why = (f"canary still warming up: prefix-cache hit ratio {c.prefix_cache_hit_ratio:.2f} vs baseline "
               f"{b.prefix_cache_hit_ratio:.2f}")
        mute[Outcome.FAIL] = mute[Outcome.PASS] = why
    ratio = per_pod_load_ratio(f, c, b)
    n_c, n_b = c.total_requests or 0, b.total_requests or 0
    if ratio is not None and n_c + n_b >= spec.split_min_requests:
        load = (f"per-pod load canary {ratio:.2g}× baseline ({n_c} requests on {c.replicas} pod(s) vs {n_b} "
                f"on {b.replicas})")
        assert f.per_pod_load_tolerance is not None
        if ratio > 1.0 + f.per_pod_load_tolerance:
            mute.setdefault(Outcome.FAIL, load)
        elif ratio < 1.0 / (1.0 + f.per_pod_load_tolerance):
            mute.setdefault(Outcome.PASS, load)
    # Cost per token depends on load per pod at any sample size (a canary pod at a low weight idles).
    cost_reason = None
    if ratio is not None and f.per_pod_load_tolerance is not None \
            and not 1.0 / (1.0 + f.per_pod_load_tolerance) <= ratio <= 1.0 + f.per_pod_load_tolerance:
        cost_reason = f"per-pod load canary {ratio:.2g}× baseline: cost per token depends on it"
    if not mute and cost_reason is None:
        return list(results)
    out = []
    for r in results:
        if r.kind == "cost" and cost_reason is not None and r.outcome in (Outcome.PASS, Outcome.FAIL):
            out.append(MetricResult(**{**r.__dict__, "outcome": Outcome.INCONCLUSIVE,
                                       "detail": f"{r.detail}; not judged: {cost_reason}"}))
            continue
        # An SLO check on latency is muted alike: an overloaded canary pod is over the objective by its load.
        latency = r.kind == "latency" or (r.kind == absolute.KIND and r.group == "latency")
        reason = mute.get(r.outcome) if latency else None
        out.append(r if reason is None else MetricResult(
            **{**r.__dict__, "outcome": Outcome.INCONCLUSIVE, "detail": f"{r.detail}; not judged: {reason}"}))
    return out


def per_pod_load_ratio(f: FairnessSpec, c: ArmData, b: ArmData) -> float | None:
    """Requests per pod, canary ÷ baseline; None when the check is off or either arm lacks pods or requests."""
    n_c, n_b = c.total_requests, b.total_requests
    if f.per_pod_load_tolerance is None or not (c.replicas and b.replicas and n_c and n_b):
        return None
    return (n_c / c.replicas) / (n_b / b.replicas)
