"""OME's canary gate from the canary config: a RolloutPolicy (ome.io/v1beta1) whose every step's analysis reads
the observer's verdict series. Pure: config in, {path: YAML text} out.

OME evaluates a step's checks as instant PromQL queries: NaN and ±Inf values are dropped, and an empty result
is "no data", which is *inconclusive* and never counts toward `failureLimit`; otherwise the worst series (the
minimum for GT/GTE) is compared with the threshold. So the check asks for the verdict of the pair OME names
(`{{.CanaryRevision}}` against `{{.StableRevision}}`, the revision hashes, which are the version names discovery
gives an OME model) *without* its undecided value:

    max(observer_canary_verdict{canary="<hash>", baseline="<hash>"}) != 0   GT "0"

`pass` (1) passes and the step advances once its `pause.duration` bake is over; `fail` (-1) fails, and
`failureLimit: 1` rolls back at once (the judge's fail is sequentially valid, as Argo's gate's failureLimit 0
says); `inconclusive`/`nodata` (0) and a verdict series that is absent (the observer down, a Prometheus that
does not scrape it) are OME's no-data: the step holds, and after the stall timeout (`readyTimeout`) OME's
`onInconclusive: Hold` parks the canary as Failed with the stable revision serving — never a promotion.

The steps follow the Argo example's weights (capacity and recorded traffic both, since OME routes by
capacity); each step's bake is the planned step the judge spends its α at the end of (`canary.step_seconds`,
else the Argo gate's planned end), so set `canary.step_seconds` to the bake you run.
"""

from __future__ import annotations

from typing import Any

from observer import conventions as names
from observer.config.spec import ObserverConfig
from observer.conventions.promql import selector
from observer.render.argo import DEFAULT_PROMETHEUS, LABELS, WEIGHTS, planned_step_seconds
from observer.render.burnrate import duration
from observer.render.yamltext import dump_yaml

API = "ome.io/v1beta1"
NAME = "observer-canary-gate"
CHECK = "observer-verdict"
PATH = "deploy/ome/rolloutpolicy.yaml"


def verdict_query(prefix: str = "") -> str:
    """The verdict of OME's pair without its undecided value: empty (no data, inconclusive) unless decided."""
    pair = {names.CANARY: prefix + "{{.CanaryRevision}}", names.BASELINE: prefix + "{{.StableRevision}}"}
    return f"max({selector(names.CANARY_VERDICT, pair)}) != 0"


def _prefixes(config: ObserverConfig) -> dict[str, str]:
    """policy name → the version prefix of the OME models it gates (one policy per distinct prefix)."""
    k = config.discovery.kubernetes
    models = [m for m in (k.models if k is not None else []) if m.primitive is not None and m.primitive.kind == "ome"]
    prefixes = sorted({m.version_prefix for m in models}) or [""]
    return {NAME if not p else f"{NAME}-{p.rstrip('-').lower()}": p for p in prefixes}


def rollout_policy(config: ObserverConfig, name: str = NAME, prefix: str = "") -> dict[str, Any]:
    """The RolloutPolicy an OME InferenceService attaches (`spec.rollout.groups[].policyRef`)."""
    spec = config.canary
    bake = spec.step_seconds or planned_step_seconds(config)
    analysis = {"interval": spec.argo_interval, "failureLimit": 1, "onInconclusive": "Hold",
                "metrics": [{"name": CHECK, "query": verdict_query(prefix), "operator": "GT", "threshold": "0"}]}
    pause = {"duration": duration(bake, days=False)}  # Go's duration text: no `d` unit
    steps: list[dict[str, Any]] = [
        {"capacity": f"{w}%", "traffic": w, "pause": dict(pause), "analysis": dict(analysis)} for w in WEIGHTS]
    steps.append({"capacity": "100%", "traffic": 100})
    prometheus: dict[str, Any] = {"serverAddress": spec.prometheus_url or DEFAULT_PROMETHEUS}
    if spec.prometheus.headers:
        prometheus["headers"] = dict(sorted(spec.prometheus.headers.items()))
    # The stall timeout: an undecided step is parked (Hold) when the observer would page on it.
    ready = spec.end.after_seconds
    canary: dict[str, Any] = {"prometheus": prometheus, "steps": steps}
    if ready is not None:
        canary["readyTimeout"] = duration(ready, days=False)
    return {"apiVersion": API, "kind": "RolloutPolicy",
            "metadata": {"name": name, "namespace": spec.argo_namespace, "labels": dict(LABELS)},
            "spec": {"canary": canary}}


def policies(config: ObserverConfig) -> list[dict[str, Any]]:
    return [rollout_policy(config, name, prefix) for name, prefix in _prefixes(config).items()]


def render(config: ObserverConfig) -> dict[str, str]:
    """deploy/ome/rolloutpolicy.yaml for the config."""
    return {PATH: "---\n".join(dump_yaml(p) for p in policies(config))}
