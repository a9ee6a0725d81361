"""What a model's autoscaler says about its replicas, from the HorizontalPodAutoscalers that scale the model's
Rollout (or the Deployment it adopts): its bounds, its current and desired counts, what it scales on and how
long it waits before scaling down. KEDA's ScaledObjects are read through the HPA KEDA creates for each
(`keda-hpa-<name>`, or `advanced.horizontalPodAutoscalerConfig.name`), which carries the status; the
ScaledObject itself gives what that HPA cannot: its triggers and its floor (`minReplicaCount`, 0 unless set:
KEDA scales to zero itself, below the HPA's own floor of 1).

The ceiling alert (a queue rising at maxReplicas), the flapping alert (desired replicas back and forth), the
not-reacting alert (a queue while desired stays flat below the ceiling) and the cold-start alert (a floor of 0, or
a scale-down wait shorter than the model's cold start) read these; an HPA without the field a count needs is
counted as a discovery problem, its count absent, never 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from observer.discover.model import RolloutInfo, _dict, _list

HPA = "HorizontalPodAutoscaler"
SCALED_OBJECT = "ScaledObject"

HPA_SCALE_DOWN_STABILIZATION = 300
"""Seconds an HPA waits before it scales down when `spec.behavior.scaleDown` does not say (Kubernetes' default)."""

MAX_SIGNALS = 8
"""Signals exported per autoscaler (each a label value)."""

RESOURCE_SIGNALS = frozenset({"cpu", "memory"})
"""Signals that say nothing of a model server's load: vLLM's CPU and memory stay flat while its GPU queue grows."""


@dataclass(frozen=True)
class AutoscalerState:
    """One HPA scaling a model: `HorizontalPodAutoscaler/<name>` and its replica counts (None: not reported)."""

    name: str
    min_replicas: int | None
    max_replicas: int | None
    current: int | None
    desired: int | None
    signals: tuple[str, ...] = ()
    """What it scales on: `cpu`, `memory` (Resource metrics), `pods:<metric>`, `object:<metric>`,
    `external:<metric>`, or a KEDA trigger `keda:<type>`; bounded (MAX_SIGNALS, 64 characters each)."""
    scale_down_stabilization: int | None = None
    """Seconds it waits before scaling down (spec.behavior.scaleDown.stabilizationWindowSeconds, else 300)."""

    @property
    def resource_only(self) -> bool:
        """It scales on CPU or memory only: blind to a model server's queue."""
        return bool(self.signals) and set(self.signals) <= RESOURCE_SIGNALS

    def counts(self) -> dict[str, int]:
        """The reported counts by kind (min, max, current, desired)."""
        raw = {"min": self.min_replicas, "max": self.max_replicas, "current": self.current, "desired": self.desired}
        return {k: v for k, v in raw.items() if v is not None}


def _int(obj: Mapping[str, Any], key: str) -> int | None:
    v = obj.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _targets(spec: Mapping[str, Any], rollout: RolloutInfo, *, default_kind: str | None = None) -> bool:
    ref = _dict(spec, "scaleTargetRef")
    kind, target = ref.get("kind", default_kind), ref.get("name")
    return ((kind == "Rollout" and target == rollout.name)
            or (kind == "Deployment" and rollout.workload is not None and target == rollout.workload))


def _signal(metric: Mapping[str, Any]) -> str:
    """One HPA `spec.metrics[]` entry as a signal name."""
    kind = str(metric.get("type", "?"))
    body = _dict(metric, kind[:1].lower() + kind[1:])  # Resource → resource, ContainerResource → containerResource
    if kind in ("Resource", "ContainerResource"):
        return str(body.get("name", "?"))
    return f"{kind.lower()}:{_dict(body, 'metric').get('name', '?')}"


def _stabilization(behavior: Mapping[str, Any]) -> int:
    down = _dict(behavior, "scaleDown")
    v = _int(down, "stabilizationWindowSeconds")
    return HPA_SCALE_DOWN_STABILIZATION if v is None else v


def _keda(autoscalers: Iterable[Mapping[str, Any]], rollout: RolloutInfo) -> dict[str, Mapping[str, Any]]:
    """The ScaledObjects scaling `rollout`, by the name of the HPA KEDA makes for each."""
    out = {}
    for obj in autoscalers:
        spec = _dict(obj, "spec")
        if obj.get("kind") == SCALED_OBJECT and _targets(spec, rollout, default_kind="Deployment"):
            hpa = _dict(_dict(spec, "advanced"), "horizontalPodAutoscalerConfig").get("name")
            out[str(hpa or f"keda-hpa-{_dict(obj, 'metadata').get('name', '?')}")] = spec
    return out


def autoscaler_states(rollout: RolloutInfo | None, autoscalers: Iterable[Mapping[str, Any]],
                      problems: Counter[str]) -> tuple[AutoscalerState, ...]:
    """The HPAs scaling `rollout` (by kind Rollout and its name, or the Deployment it adopts); an HPA without
    `spec.maxReplicas` counts `autoscaler_missing_field`, one without a status yet `autoscaler_no_status`. An
    HPA that KEDA made for a ScaledObject takes the ScaledObject's triggers and floor."""
    if rollout is None:
        return ()
    autoscalers = list(autoscalers)
    keda = _keda(autoscalers, rollout)
    out = []
    for obj in autoscalers:
        if obj.get("kind", HPA) != HPA:
            continue  # a ScaledObject: its own HPA (keda-hpa-<name>) is read instead
        spec = _dict(obj, "spec")
        if not _targets(spec, rollout):
            continue
        status = _dict(obj, "status")
        name = str(_dict(obj, "metadata").get("name", "?"))
        # An HPA without metrics scales on 80% CPU (autoscaling/v2's default).
        metrics = _list(spec, "metrics") if "metrics" in spec else [{"type": "Resource", "resource": {"name": "cpu"}}]
        signals = [_signal(m) for m in metrics if isinstance(m, Mapping)]
        floor = _int(spec, "minReplicas") if "minReplicas" in spec else 1
        so = keda.get(name)
        if so is not None:
            signals = [f"keda:{t.get('type', '?')}" for t in _list(so, "triggers") if isinstance(t, Mapping)]
            floor = _int(so, "minReplicaCount") if "minReplicaCount" in so else 0
        state = AutoscalerState(name=f"{HPA}/{name}"[:128], min_replicas=floor,
                                max_replicas=_int(spec, "maxReplicas"), current=_int(status, "currentReplicas"),
                                desired=_int(status, "desiredReplicas"),
                                signals=tuple(dict.fromkeys(s[:64] for s in signals))[:MAX_SIGNALS],
                                scale_down_stabilization=_stabilization(_dict(spec, "behavior")))
        if state.max_replicas is None:
            problems["autoscaler_missing_field"] += 1
        if state.current is None or state.desired is None:
            problems["autoscaler_no_status"] += 1
        out.append(state)
    return tuple(sorted(out, key=lambda s: s.name)[:16])
