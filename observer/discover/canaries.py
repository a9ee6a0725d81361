"""Versions named by a Flagger `Canary` (flagger.app/v1beta1): the primary Deployment against its target.

Flagger copies the target Deployment to `<target>-primary` and rewrites one selector label on the copy's pods:
the first of its `-selector-labels` (default `app`, `name`, `app.kubernetes.io/name`) gets the value
`<value>-primary` (makePrimaryLabels in its canary controller); every other label is copied. So among the
model's pods the primary ones carry `<key>: <value>-primary` and the target's (the canary's) `<key>: <value>`.

The versions keep Flagger's own names, the target `<target>` and `<target>-primary` (with the model's
`version_prefix`), which are what `observer render flagger`'s templates and webhooks ask for; the Canary says
which is which and how much traffic each gets: while the analysis runs (`Progressing`, `WaitingPromotion`,
`status.lastAppliedSpec` differing from `status.lastPromotedSpec`) the target is the canary at
`status.canaryWeight` percent; otherwise the primary takes all traffic and a target pod still up is `other`
(Flagger scales the target to zero after a promotion or a rollback). A name reused by every revision is why
the webhooks window a revision from its checksum (observer/export/flagger_api.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from observer.discover.model import PodInfo, _dict
from observer.discover.plan import Member, Plan, Role, _Reading
from observer.discover.primitives import _known, _number, _own, _str

SELECTOR_LABELS = ("app", "name", "app.kubernetes.io/name")  # Flagger's -selector-labels default, in its order
PRIMARY_SUFFIX = "-primary"
ANALYSING = frozenset({"Progressing", "WaitingPromotion"})


def _selector(pods: Sequence[PodInfo], target: str) -> tuple[str, str] | None:
    """(label, value) of the target's pods: the first selector label some pod carries as `<value>-primary`,
    preferring the value named like the target."""
    for key in SELECTOR_LABELS:
        primaries = sorted({v[: -len(PRIMARY_SUFFIX)] for p in pods if (v := p.labels.get(key, ""))
                            .endswith(PRIMARY_SUFFIX) and len(v) > len(PRIMARY_SUFFIX)})
        if primaries:
            return key, target if target in primaries else primaries[0]
    return None


def flagger_plan(obj: Mapping[str, Any], pods: Sequence[PodInfo]) -> Plan:
    """The primary and the target of a Flagger Canary, told apart on the pods by Flagger's primary label."""
    reading = _Reading()
    name = _str(_dict(obj, "metadata"), "name") or "?"
    if not _known(obj, _own("flagger"), reading):
        return reading.plan("flagger", name, [])
    what = f"Flagger Canary {name}"
    target = _str(_dict(_dict(obj, "spec"), "targetRef"), "name")
    status = _dict(obj, "status")
    phase = _str(status, "phase") or ""
    applied, promoted = _str(status, "lastAppliedSpec"), _str(status, "lastPromotedSpec")
    if target is None or applied is None:
        reading.add("missing_field", f"{what}: no spec.targetRef.name or status.lastAppliedSpec (phase "
                                     f"{phase or 'none'}): Flagger has not initialised it yet")
        return reading.plan("flagger", name, [])
    selector = _selector(pods, target)
    if selector is None:
        reading.add("revision_without_pods", f"{what}: no pod of the model carries "
                                             f"{'/'.join(SELECTOR_LABELS)}: <value>{PRIMARY_SUFFIX} (the primary's "
                                             f"pods are gone, or the model's selector does not select them)")
        return reading.plan("flagger", name, [])
    key, value = selector
    primary, canary = {key: f"{value}{PRIMARY_SUFFIX}"}, {key: value}
    names = (f"{target}{PRIMARY_SUFFIX}", target)
    analysing = phase in ANALYSING and promoted is not None and applied != promoted
    if analysing:
        weight = _number(status.get("canaryWeight"))
        share = None if weight is None else min(weight, 100.0) / 100.0
        return reading.plan("flagger", name, [
            Member(identity=names[0], role="stable", weight=None if share is None else 1.0 - share, pod_labels=primary),
            Member(identity=names[1], role="canary", weight=share, pod_labels=canary)])
    members = [Member(identity=names[0], role="stable", weight=1.0, pod_labels=primary)]
    if any(p.labels.get(key) == value for p in pods):  # the target between analyses, or rolled back
        other: Role = "other"
        members.append(Member(identity=names[1], role=other, weight=0.0, pod_labels=canary))
    return reading.plan("flagger", name, members)
