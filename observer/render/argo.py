"""Argo Rollouts analysis from the canary config: a web gate on the verdict endpoint, a background
guardrail, Prometheus-provider metrics on the observer's gauges, ClusterAnalysisTemplate variants and an
example Rollout. Pure: config in, {path: YAML text} out (the writer adds the do-not-edit header).

Limits are deliberate (Argo defaults are failureLimit 0, inconclusiveLimit 0, consecutiveErrorLimit 4):
* gate: failureLimit 0 — the judge's fail is sequentially valid, one is enough to abort;
  inconclusiveLimit count−1 — early looks are inconclusive until the minimum samples are in, but a step
  whose every look was inconclusive (or nodata) ends Inconclusive and pauses for a human, never passes;
  consecutiveErrorLimit 2 — the endpoint answers 200 with a verdict unless the judge itself is broken.
* guardrail: failure-only condition on `critical_failed`; runs for the whole rollout.
* Prometheus metrics: every condition is guarded with `len(result) > 0` and `isNaN`, so an empty vector
  is Inconclusive (verdict) or not a failure (per-dimension guards) instead of an Error that aborts;
  dimensions without a critical metric and advisory drift go in `dryRun` (shown, never abort).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

from observer import conventions as names
from observer.config.canary import CanaryMetricSpec, MetricKind, go_seconds
from observer.config.spec import ObserverConfig
from observer.conventions.labels import POD_ROLE_LABEL
from observer.conventions.promql import selector
from observer.conventions.ratios import RATIOS
from observer.render.proxy_sidecar import IMAGE, VLLM_PORT, proxy_container, sidecar_objects, volumes
from observer.render.vllm_pod import GRACE_SECONDS, disruption_budget, placement, vllm_container, vllm_volumes
from observer.render.yamltext import dump_yaml

API = "argoproj.io/v1alpha1"
GATE = "observer-canary-gate"
GUARDRAIL = "observer-canary-guardrail"
PROMETHEUS = "observer-canary-prometheus"
LABELS = {"app.kubernetes.io/managed-by": "observer", "app.kubernetes.io/part-of": "observer-canary"}
DEFAULT_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"


def guarded(expr: str) -> str:
    """An Argo expression on `result[0]` that is false (never an error) for an empty vector or NaN."""
    return f"len(result) > 0 && !isNaN(result[0]) && {expr}"


@dataclass(frozen=True)
class PromMetric:
    """One Prometheus-provider metric as the game day evaluates it (query with {{args.*}} placeholders)."""

    name: str
    query: str
    success: str | None
    failure: str | None
    dry_run: bool


def _pair() -> dict[str, str]:
    return {names.CANARY: "{{args.canary}}", names.BASELINE: "{{args.baseline}}"}


def _group_query(metrics: Sequence[CanaryMetricSpec]) -> str:
    regex = "|".join(m.name for m in metrics)
    return f"min({selector(names.CANARY_METRIC_RESULT, _pair(), regex={names.METRIC: regex})})"


def argo_group(m: CanaryMetricSpec) -> str:
    """The Prometheus-provider metric a canary metric counts in: latency, errors, quality, cost or drift."""
    match m.kind:
        case MetricKind.LATENCY:
            return "latency"
        case MetricKind.RATIO:  # the engine's own counters gate like errors; sampled live checks like quality
            assert m.counts is not None
            return RATIOS[m.counts].argo_dimension
        case MetricKind.QUALITY | MetricKind.PAIRED | MetricKind.FEEDBACK:  # users' feedback judges the answers
            return "quality"
        case MetricKind.COST:
            return "cost"
        case MetricKind.DRIFT:
            return "drift"
        case _:
            assert_never(m.kind)


def prometheus_metrics(config: ObserverConfig) -> list[PromMetric]:
    """The Prometheus-provider metrics (verdict, latency, errors, quality, cost, drift) of the config."""
    metrics = [m for m in config.canary.metrics if not m.advisory]
    out = [PromMetric(name="verdict", query=f"max({selector(names.CANARY_VERDICT, _pair())})",
                      success=guarded("result[0] == 1"), failure=guarded("result[0] == -1"), dry_run=False)]
    groups: dict[str, list[CanaryMetricSpec]] = {"latency": [], "errors": [], "quality": []}
    for m in metrics:
        if (group := argo_group(m)) in groups:
            groups[group].append(m)
    for name, ms in groups.items():
        if not ms:
            continue
        critical = [m for m in ms if m.critical]
        out.append(PromMetric(name=name, query=_group_query(critical or ms), success=None,
                              failure=guarded("result[0] < 0"), dry_run=not critical))
    cost = [m for m in config.canary.metrics if argo_group(m) == "cost"]
    if cost:  # advisory by default: visible in the AnalysisRun (dryRun), never an abort
        critical = [m for m in cost if m.critical]
        out.append(PromMetric(name="cost", query=_group_query(critical or cost), success=None,
                              failure=guarded("result[0] < 0"), dry_run=not critical))
    drift = [m for m in config.canary.metrics if argo_group(m) == "drift"]
    if drift:
        fields = "|".join(sorted({m.field or "" for m in drift}))
        sel = selector(names.DRIFT_DETECTED, {names.VERSION: "{{args.canary}}"}, regex={names.FIELD: fields})
        out.append(PromMetric(name="drift", query=f"max({sel})", success=None,
                              failure=guarded("result[0] >= 1"),
                              dry_run=not any(m.critical for m in drift)))
    return out


def _args(*extra: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "canary"}, {"name": "baseline"}, *[dict(e) for e in extra]]


TOKEN_ARG = "prometheus-token"


def prometheus_provider(config: ObserverConfig, query: str) -> dict[str, Any]:
    """Argo's Prometheus provider for `query`, with the observer's tenant headers, bearer token (from a
    Secret, via an argument) and timeout, so Argo asks Thanos/Mimir what the judge asks."""
    client = config.canary.prometheus
    provider: dict[str, Any] = {"address": "{{args.prometheus-address}}", "query": query,
                                "timeout": max(1, round(client.timeout_seconds))}
    headers = [{"key": k, "value": v} for k, v in sorted(client.headers.items())]
    if client.argo_token_secret is not None:
        headers.append({"key": "Authorization", "value": "Bearer {{args." + TOKEN_ARG + "}}"})
    if headers:
        provider["headers"] = headers
    return {"prometheus": provider}


def _prometheus_args(config: ObserverConfig, address: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": "prometheus-address", "value": address}]
    secret = config.canary.prometheus.argo_token_secret
    if secret is not None:
        out.append({"name": TOKEN_ARG, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}})
    return out


WEIGHT_ARG = "canary-weight"


def verdict_url(config: ObserverConfig, *, weight: str, step_seconds: float | None = None) -> str:
    """The verdict endpoint with Argo argument placeholders; `weight` is the split the judge expects,
    `step_seconds` the step's planned length (the sliced tests spend most of their α at its end)."""
    base = config.canary.observer_url.rstrip("/")
    step = "" if step_seconds is None else f"&step_seconds={step_seconds:g}"
    return (f"{base}/api/v1/canary/verdict?canary={{{{args.canary}}}}&baseline={{{{args.baseline}}}}"
            f"&weight={weight}{step}")


def planned_step_seconds(config: ObserverConfig) -> float:
    """When the gate's last measurement is taken: Argo measures at the analysis start, then every interval, so
    `count` measurements end (count − 1) × interval after it. The verdict's final test is made there."""
    spec = config.canary
    return (spec.argo_count - 1) * go_seconds(spec.argo_interval)


GATE_PATH = "{$.gate}"
"""The web metrics read the verdict body's `gate` object (verdict, critical_failed, reason, report): Argo
stores the selected value as the measurement's value, so the AnalysisRun says why and where to look."""
GATE_SUCCESS = 'result.verdict == "pass"'
GATE_FAILURE = 'result.verdict == "fail"'
GUARDRAIL_FAILURE = "result.critical_failed == true"


def gate_spec(config: ObserverConfig) -> dict[str, Any]:
    """The gate: the web verdict *and* the same verdict through Prometheus; pass needs both.

    Argo ≤ v1.9.x marks a web measurement Successful, without evaluating its conditions, when the answer is
    a 2xx whose body is not JSON or is empty (an ingress default backend, a login page, a wrong port). A run
    is only as good as its worst metric, so the Prometheus twin, which reads `observer_canary_verdict`,
    leaves such a step Inconclusive (no series) or Failed instead of promoting."""
    spec = config.canary
    address = spec.prometheus_url or DEFAULT_PROMETHEUS
    # Each analysis step passes its setWeight as canary-weight (empty: the config's expected weight).
    web = {
        "name": "canary-verdict",
        "interval": spec.argo_interval,
        "count": spec.argo_count,
        "successCondition": GATE_SUCCESS,
        "failureCondition": GATE_FAILURE,
        "failureLimit": 0,
        "inconclusiveLimit": spec.argo_count - 1,
        "consecutiveErrorLimit": 2,
        "provider": {"web": {"url": verdict_url(config, weight="{{args." + WEIGHT_ARG + "}}",
                                                step_seconds=planned_step_seconds(config)
                                                if spec.planned_end else None),
                             "jsonPath": GATE_PATH, "timeoutSeconds": 10}},
    }
    verdict = prometheus_metrics(config)[0]
    twin = {
        "name": "canary-verdict-prometheus",
        "interval": spec.argo_interval,
        "count": spec.argo_count,
        "successCondition": verdict.success,
        "failureCondition": verdict.failure,
        "failureLimit": 0,
        "inconclusiveLimit": spec.argo_count - 1,
        "consecutiveErrorLimit": 3,
        "provider": prometheus_provider(config, verdict.query),
    }
    return {"args": _args({"name": WEIGHT_ARG, "value": ""}, *_prometheus_args(config, address)),
            "metrics": [web, twin]}


def guardrail_spec(config: ObserverConfig) -> dict[str, Any]:
    """The background guardrail: fails only when a critical metric failed.

    It spans every step, so no single weight applies: it asks with `weight=any` (no split check)."""
    return {"args": _args(), "metrics": [{
        "name": "critical-failure",
        "interval": config.canary.argo_interval,
        "failureCondition": GUARDRAIL_FAILURE,
        "failureLimit": 0,
        "consecutiveErrorLimit": 4,
        "provider": {"web": {"url": verdict_url(config, weight="any"), "jsonPath": GATE_PATH,
                             "timeoutSeconds": 10}},
    }]}


def prometheus_spec(config: ObserverConfig) -> dict[str, Any]:
    """Prometheus-provider metrics on the observer's gauges, each guarded against empty results and NaN."""
    spec = config.canary
    address = spec.prometheus_url or DEFAULT_PROMETHEUS
    metrics: list[dict[str, Any]] = []
    for pm in prometheus_metrics(config):
        # Every metric has a count, so the template also works as a step analysis (it completes).
        m: dict[str, Any] = {"name": pm.name, "interval": spec.argo_interval, "count": spec.argo_count}
        if pm.success is not None:
            m["successCondition"] = pm.success
        if pm.failure is not None:
            m["failureCondition"] = pm.failure
        m["failureLimit"] = 0
        if pm.success is not None:
            m["inconclusiveLimit"] = spec.argo_count - 1
        m["consecutiveErrorLimit"] = 3
        m["provider"] = prometheus_provider(config, pm.query)
        metrics.append(m)
    out: dict[str, Any] = {"args": _args(*_prometheus_args(config, address)), "metrics": metrics}
    dry = [{"metricName": pm.name} for pm in prometheus_metrics(config) if pm.dry_run]
    if dry:
        out["dryRun"] = dry
    return out


REPORT_ANNOTATION = "observer.dev/report-url"
"""Where the on-call looks when a run fails: the pair's report page, with the template's own arguments (the web
metric's verdict JSON carries the resolved URL as `report`)."""


def _template(kind: str, name: str, spec: Mapping[str, Any], namespace: str | None,
              report: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(LABELS)
    if report is not None:
        meta["annotations"] = {REPORT_ANNOTATION: report}
    return {"apiVersion": API, "kind": kind, "metadata": meta, "spec": dict(spec)}


def templates(config: ObserverConfig, *, cluster: bool) -> list[dict[str, Any]]:
    """The three templates as AnalysisTemplates or ClusterAnalysisTemplates."""
    kind = "ClusterAnalysisTemplate" if cluster else "AnalysisTemplate"
    ns = None if cluster else config.canary.argo_namespace
    spec = config.canary
    report = spec.report_url("{{args.canary}}", "{{args.baseline}}") if spec.report.enabled else None
    return [_template(kind, GATE, gate_spec(config), ns, report),
            _template(kind, GUARDRAIL, guardrail_spec(config), ns, report),
            _template(kind, PROMETHEUS, prometheus_spec(config), ns)]


OFFLINE_GATE = "observer-offline-gate"


def offline_gate(config: ObserverConfig) -> dict[str, Any]:
    """An AnalysisTemplate whose one `job` metric runs `observer eval gate`: the candidate against stable on
    the golden sets before any traffic moves (the Rollout's first step). The Job's exit code is the result:
    0 pass; fail (1), inconclusive (3) or nothing scored (4) fail the metric, so the rollout aborts before
    the first weight."""
    spec = config.canary
    container = {
        "name": "gate", "image": IMAGE,
        "args": ["eval", "gate", "--config", "/etc/observer/observer.yaml", "--candidate", "{{args.candidate}}",
                 "--candidate-url", "{{args.candidate-url}}", "--baseline", "{{args.baseline}}",
                 "--margin", "{{args.margin}}", "--json"],
        "env": [{"name": "OBSERVER_JUDGE_API_KEY",
                 "valueFrom": {"secretKeyRef": {"name": "observer-judge", "key": "api-key", "optional": True}}}],
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/observer", "readOnly": True}],
    }
    job = {"backoffLimit": 0, "activeDeadlineSeconds": 1800, "ttlSecondsAfterFinished": 86400,
           "template": {"spec": {"restartPolicy": "Never", "containers": [container],
                                 "volumes": [{"name": "config", "configMap": {"name": "observer-config"}}]}}}
    body = {"args": [{"name": "candidate"}, {"name": "baseline"},
                     {"name": "candidate-url", "value": f"http://llm-canary-preview.{spec.argo_namespace}.svc:8000/v1"},
                     {"name": "margin", "value": "0.05"}],
            "metrics": [{"name": "offline-gate", "count": 1, "failureLimit": 0,
                         "provider": {"job": {"spec": job}}}]}
    return _template("AnalysisTemplate", OFFLINE_GATE, body, spec.argo_namespace)


WEIGHTS = (5, 25, 50)
ROLE_LABEL = POD_ROLE_LABEL


def replicas_for(weights: Sequence[int]) -> int:
    """The fewest replicas for which Argo's basic canary (no traffic routing: the split is the share of
    pods, ceil(weight × replicas) canary pods) gives every weight exactly: the least common multiple of
    100/gcd(w, 100)."""
    return math.lcm(*(100 // math.gcd(w, 100) for w in weights))


def rollout(config: ObserverConfig) -> dict[str, Any]:
    """An example Rollout: 5% → 25% → 50% with a gate after each weight and a background guardrail.

    No traffic routing, so the replica count is chosen to make the canary's pod share equal each setWeight
    (20 pods: 1, 5, 10). The analysis args are the pod-template hashes (`podTemplateHashValue`: Latest is
    the canary, Stable the stable), which are the version names Kubernetes discovery gives — so the web
    gate and its Prometheus twin name the same series, and promotion needs no rename.

    Each pod carries the sampling proxy (`observer proxy`) in front of vLLM: it reads its version (the pod's
    template hash) from the downward API, so the same template serves every revision, and posts its samples
    to the central observer. Clients reach the pods through the Service `llm` (rollout-sidecar.yaml), i.e.
    through the proxy; the observer scrapes and replays golden sets on vLLM's own port."""
    args: list[dict[str, Any]] = [
        {"name": "canary", "valueFrom": {"podTemplateHashValue": "Latest"}},
        {"name": "baseline", "valueFrom": {"podTemplateHashValue": "Stable"}}]
    steps: list[dict[str, Any]] = []
    for weight in WEIGHTS:
        steps.append({"setWeight": weight})
        steps.append({"analysis": {"templates": [{"templateName": GATE}],
                                   "args": [*args, {"name": WEIGHT_ARG, "value": str(weight)}]}})
    labels = {"app": "llm"}
    vllm = vllm_container(served_model_name="llm", port=VLLM_PORT, port_name="http")
    return {
        "apiVersion": API, "kind": "Rollout",
        "metadata": {"name": "llm", "namespace": config.canary.argo_namespace, "labels": dict(LABELS)},
        "spec": {
            "replicas": replicas_for(WEIGHTS),
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"terminationGracePeriodSeconds": GRACE_SECONDS, "containers": [vllm, proxy_container()],
                         "volumes": [*vllm_volumes(), *volumes()],
                         **placement(labels, "rollouts-pod-template-hash")},
            },
            "strategy": {"canary": {
                "canaryMetadata": {"labels": {ROLE_LABEL: "canary"}},
                "stableMetadata": {"labels": {ROLE_LABEL: "stable"}},
                "analysis": {"templates": [{"templateName": GUARDRAIL}], "args": args, "startingStep": 1},
                "steps": steps,
            }},
        },
    }


def _docs(items: Sequence[Mapping[str, Any]]) -> str:
    return "---\n".join(dump_yaml(dict(i)) for i in items)


def render(config: ObserverConfig) -> dict[str, str]:
    """deploy/argo/*.yaml for the config."""
    return {
        "deploy/argo/analysis-templates.yaml": _docs(templates(config, cluster=False)),
        "deploy/argo/cluster-analysis-templates.yaml": _docs(templates(config, cluster=True)),
        "deploy/argo/rollout-example.yaml": dump_yaml(rollout(config)),
        "deploy/argo/rollout-disruption-budget.yaml": dump_yaml(disruption_budget(
            "llm", config.canary.argo_namespace, {"app": "llm"})),
        "deploy/argo/rollout-sidecar.yaml": _docs(sidecar_objects(config, LABELS)),
        "deploy/argo/offline-gate.yaml": dump_yaml(offline_gate(config)),
    }
