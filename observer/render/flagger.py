"""Flagger analysis from the canary config: MetricTemplates (Prometheus provider) over the observer's verdict and
per-dimension series, and an example Canary that gates with them and with the observer's webhooks
(observer/export/flagger_api.py). Pure: config in, {path: YAML text} out.

Flagger has no "inconclusive": a metric check either passes its thresholdRange or counts toward the Canary's
failure `threshold`, and an empty query result is an error that counts too. So the metrics only catch a
failure (the verdict at -1, a dimension below 0, drift detected), read 0 when the series is absent (`or
vector(0)`: the judge has not looked yet), and promotion is held by the confirm-promotion webhook, which
answers 2xx only on `pass`. An undecided canary therefore neither fails early nor promotes: it waits at its
weight until the verdict is decided, as the Argo gate's inconclusive step pauses.
"""

from __future__ import annotations

from typing import Any

from observer.config.spec import ObserverConfig
from observer.render.argo import DEFAULT_PROMETHEUS, LABELS, prometheus_metrics
from observer.render.yamltext import dump_yaml

API = "flagger.app/v1beta1"
PREFIX = "observer-"
TARGET = "llm"
"""The example Canary's target Deployment: Flagger names its copies `llm` (the canary) and `llm-primary`."""
HOOKS = ("rollout", "confirm-promotion", "rollback")


def _query(query: str) -> str:
    """An Argo-template query as a Flagger one: the pair from the Canary's templateVariables, 0 when absent."""
    q = query.replace("{{args.canary}}", "{{ variables.canary }}").replace("{{args.baseline}}",
                                                                          "{{ variables.baseline }}")
    return f"({q}) or vector(0)"


def metric_templates(config: ObserverConfig) -> list[dict[str, Any]]:
    """One MetricTemplate per Prometheus metric the Argo templates read (verdict, latency, errors, ...)."""
    spec = config.canary
    provider: dict[str, Any] = {"type": "prometheus", "address": spec.prometheus_url or DEFAULT_PROMETHEUS}
    if spec.prometheus.headers:
        provider["headers"] = {k: [v] for k, v in sorted(spec.prometheus.headers.items())}
    # No bearer token: Flagger's provider takes basic-auth credentials from a Secret (`secretRef`, keys username
    # and password), not the token the Argo templates pass; add one by hand where Prometheus needs it.
    return [{"apiVersion": API, "kind": "MetricTemplate",
             "metadata": {"name": PREFIX + m.name, "namespace": spec.argo_namespace, "labels": dict(LABELS)},
             "spec": {"provider": dict(provider), "query": _query(m.query)}}
            for m in prometheus_metrics(config)]


def threshold(name: str) -> dict[str, float]:
    """The range a metric must stay in: only a failure leaves it."""
    return {"max": 0.5} if name == "drift" else {"min": 0}


ANALYSIS = {"interval_seconds": 60, "maxWeight": 50, "stepWeight": 5}
"""The example Canary's analysis: a one-minute interval, 5 % steps to 50 %."""


def canary(config: ObserverConfig) -> dict[str, Any]:
    """An example Canary for the Deployment `llm`: 5 % steps to 50 %, a check a minute, five failed checks roll
    back; the critical dimensions' metrics and the verdict gate each step, the webhooks hold promotion until
    `pass` and roll back on `fail`."""
    spec = config.canary
    variables = {"canary": TARGET, "baseline": f"{TARGET}-primary"}
    metrics = [{"name": m.name, "templateRef": {"name": PREFIX + m.name, "namespace": spec.argo_namespace},
                "thresholdRange": threshold(m.name), "interval": "1m", "templateVariables": dict(variables)}
               for m in prometheus_metrics(config) if not m.dry_run]
    base = spec.observer_url.rstrip("/")
    # The analysis reaches maxWeight after maxWeight ÷ stepWeight intervals, where confirm-promotion decides: the
    # verdict's planned end (10 one-minute slices, the least a planned end needs).
    step = {"step_seconds": str(ANALYSIS["interval_seconds"] * ANALYSIS["maxWeight"] // ANALYSIS["stepWeight"])
            } if spec.planned_end else {}
    webhooks = [{"name": f"observer-{hook}", "type": hook, "url": f"{base}/api/v1/flagger/{hook}", "timeout": "15s",
                 "metadata": {**variables, **step}} for hook in HOOKS]
    return {
        "apiVersion": API, "kind": "Canary",
        "metadata": {"name": TARGET, "namespace": spec.argo_namespace, "labels": dict(LABELS)},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": TARGET},
            "service": {"port": 8000, "targetPort": "http"},
            "analysis": {"interval": "1m", "threshold": 5, "maxWeight": ANALYSIS["maxWeight"],
                         "stepWeight": ANALYSIS["stepWeight"],
                         "metrics": metrics, "webhooks": webhooks},
        },
    }


def render(config: ObserverConfig) -> dict[str, str]:
    """deploy/flagger/*.yaml for the config."""
    return {
        "deploy/flagger/metric-templates.yaml": "---\n".join(dump_yaml(t) for t in metric_templates(config)),
        "deploy/flagger/canary-example.yaml": dump_yaml(canary(config)),
    }
