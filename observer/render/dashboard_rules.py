"""Recording rules for the dashboards: one per-version rate per per-pod series (observer.conventions.recording).

`sum without (pod, instance)` keeps every label a panel filters or groups by (namespace, version, model, le,
finished_reason) and drops what tells the pods apart; with `replica_labels` (two central observers exporting
the same series) each series is first reduced to one replica's rate, so the panels do not show twice the
traffic. Pure: config in, a rule group out.
"""

from __future__ import annotations

from collections.abc import Sequence

from observer.config.spec import ObserverConfig
from observer.conventions.recording import POD_LABELS, RATE_WINDOW, RECORDED, RULE_GROUP_DASHBOARDS, recorded
from observer.render.rulemodel import Group, Recording


def rate_expr(series: str, replica_labels: Sequence[str]) -> str:
    """The per-version rate of `series`: summed over pods, one replica's where replicas repeat it."""
    inner = f"rate({series}[{RATE_WINDOW}])"
    if replica_labels:
        inner = f"max without ({', '.join(replica_labels)}) ({inner})"
    return f"sum without ({', '.join(POD_LABELS)}) ({inner})"


def dashboard_group(config: ObserverConfig) -> Group:
    replicas = config.canary.prometheus.replica_labels
    return Group(RULE_GROUP_DASHBOARDS, tuple(Recording(recorded(s), rate_expr(s, replicas)) for s in RECORDED))
