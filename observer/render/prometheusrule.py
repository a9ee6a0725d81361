"""The PrometheusRule custom resource (prometheus-operator) carrying the same rule groups."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from observer.render.objectives import Alerting
from observer.render.rulemodel import Group, groups_data

API_VERSION = "monitoring.coreos.com/v1"
KIND = "PrometheusRule"


def prometheus_rule(groups: Sequence[Group], alerting: Alerting) -> dict[str, Any]:
    """The PrometheusRule object (plain data) for `groups`."""
    metadata: dict[str, Any] = {"name": alerting.rule_name}
    if alerting.rule_namespace:
        metadata["namespace"] = alerting.rule_namespace
    if alerting.rule_labels:
        metadata["labels"] = dict(alerting.rule_labels)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata,
            "spec": {"groups": groups_data(groups, alerting.runbook_base_url)}}
