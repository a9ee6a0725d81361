"""What a model's autoscaler says about its replicas, from the HorizontalPodAutoscalers that scale the model's
Rollout (or the Deployment it adopts): its bounds and its current and desired counts. KEDA's ScaledObjects are
read through the HPA KEDA creates for each (`keda-hpa-<name>`), which carries the same bounds and status.

The ceiling alert (a queue rising at maxReplicas) and the flapping alert (desired replicas back and forth) read
these; an HPA without the field a count needs is counted as a discovery problem, its count absent, never 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from observer.discover.model import RolloutInfo, _dict

HPA = "HorizontalPodAutoscaler"


@dataclass(frozen=True)
class AutoscalerState:
    """One HPA scaling a model: `HorizontalPodAutoscaler/<name>` and its replica counts (None: not reported)."""

    name: str
    min_replicas: int | None
    max_replicas: int | None
    current: int | None
    desired: int | None

    def counts(self) -> dict[str, int]:
        """The reported counts by kind (min, max, current, desired)."""
        raw = {"min": self.min_replicas, "max": self.max_replicas, "current": self.current, "desired": self.desired}
        return {k: v for k, v in raw.items() if v is not None}


def _int(obj: Mapping[str, Any], key: str) -> int | None:
    v = obj.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def autoscaler_states(rollout: RolloutInfo | None, autoscalers: Iterable[Mapping[str, Any]],
                      problems: Counter[str]) -> tuple[AutoscalerState, ...]:
    """The HPAs scaling `rollout` (by kind Rollout and its name, or the Deployment it adopts); an HPA without
    `spec.maxReplicas` counts `autoscaler_missing_field`, one without a status yet `autoscaler_no_status`."""
    if rollout is None:
        return ()
    out = []
    for obj in autoscalers:
        if obj.get("kind", HPA) != HPA:
            continue  # a ScaledObject: its own HPA (keda-hpa-<name>) is read instead
        spec = _dict(obj, "spec")
        ref = _dict(spec, "scaleTargetRef")
        kind, target = ref.get("kind"), ref.get("name")
        if not ((kind == "Rollout" and target == rollout.name)
                or (kind == "Deployment" and rollout.workload is not None and target == rollout.workload)):
            continue
        status = _dict(obj, "status")
        state = AutoscalerState(name=f"{HPA}/{_dict(obj, 'metadata').get('name', '?')}"[:128],
                                min_replicas=_int(spec, "minReplicas") if "minReplicas" in spec else 1,
                                max_replicas=_int(spec, "maxReplicas"), current=_int(status, "currentReplicas"),
                                desired=_int(status, "desiredReplicas"))
        if state.max_replicas is None:
            problems["autoscaler_missing_field"] += 1
        if state.current is None or state.desired is None:
            problems["autoscaler_no_status"] += 1
        out.append(state)
    return tuple(sorted(out, key=lambda s: s.name)[:16])
