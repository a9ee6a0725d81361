"""Grafana dashboards from the observer config, built with the official grafana-foundation-sdk.

`render(config)` is pure: it returns {repo-relative path: file text} for `dashboards/<slug>.json` and one
Grafana-provisioning ConfigMap per dashboard under `deploy/grafana/` (labelled for the Grafana sidecar).
The writer (observer.render.writer) puts them on disk or compares them with the committed files.
"""

from __future__ import annotations

import json

from observer.config.dashboards import DashboardsSpec
from observer.config.spec import ObserverConfig
from observer.render.dashboards import canary, cost, fleet, gpu, quality
from observer.render.dashboards.common import DashboardSpec, build_dashboard, to_json
from observer.render.dashboards.objectives import objectives
from observer.render.yamltext import dump_yaml


def dashboard_specs(config: ObserverConfig) -> list[DashboardSpec]:
    """The dashboards the config asks for, before rendering (fleet, GPU, canary, quality & drift, cost)."""
    obj = objectives(config)
    out = [fleet.dashboard(obj), gpu.dashboard(obj), canary.dashboard(obj, config), quality.dashboard(obj)]
    if config.cost.enabled:
        out.append(cost.dashboard(obj))
    return out


def configmap(spec: DashboardsSpec, *, slug: str, dashboard_json: str) -> str:
    """A ConfigMap the Grafana sidecar provisions `dashboard_json` from."""
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{spec.uid_prefix}{slug}-dashboard".strip("-").lower(),
            "namespace": spec.configmap_namespace,
            "labels": dict(spec.configmap_labels),
            "annotations": {spec.folder_annotation: spec.folder},
        },
        "data": {f"{spec.uid_prefix}{slug}.json": dashboard_json},
    }
    # Multi-line strings as `|` blocks, so the embedded dashboard JSON stays readable in the ConfigMap.
    return dump_yaml(doc, width=10_000)


def render(config: ObserverConfig) -> dict[str, str]:
    """Return {path: text} for every dashboard JSON and its ConfigMap; empty when dashboards are disabled."""
    spec = config.dashboards
    if not spec.enabled:
        return {}
    out: dict[str, str] = {}
    obj = objectives(config)
    for d in dashboard_specs(config):
        text = to_json(build_dashboard(d, spec, runbook_links=obj.runbook_links))
        json.loads(text)  # the SDK's encoder must produce plain JSON; fail here rather than in Grafana
        out[f"{spec.output_dir.rstrip('/')}/{d.slug}.json"] = text
        out[f"{spec.configmap_dir.rstrip('/')}/{d.slug}-configmap.yaml"] = configmap(
            spec, slug=d.slug, dashboard_json=text)
    return out


__all__ = ["configmap", "dashboard_specs", "render"]
