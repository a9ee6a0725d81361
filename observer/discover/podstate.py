"""Why a pod of a version is not serving: the scheduler cannot place it, it is still starting, it fails to
start, or it runs without being Ready. Read from the Pod's own status (phase, conditions, container states),
so a canary stuck on "Insufficient nvidia.com/gpu" is a count with a reason, not a quiet small canary.

Every label value is from a bounded set: the scheduler's message names resources and node names freely.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

STATES = ("ready", "unschedulable", "starting", "failing", "not_ready")
"""The `state` label of observer_version_pods: `ready` serves; the others are the pods a version waits for."""
UNSCHEDULABLE_REASONS = ("insufficient_gpu", "insufficient_cpu", "insufficient_memory", "insufficient_other",
                         "node_affinity", "taint", "volume", "other")
FAILING_REASONS = {"CrashLoopBackOff": "crashloop", "ImagePullBackOff": "image_pull", "ErrImagePull": "image_pull",
                   "CreateContainerConfigError": "config", "CreateContainerError": "config",
                   "RunContainerError": "config", "InvalidImageName": "image_pull"}
_INSUFFICIENT = re.compile(r"Insufficient ([A-Za-z0-9./_-]+)")


def unschedulable_reason(message: str) -> str:
    """The bounded reason of a scheduler message such as "0/4 nodes are available: 4 Insufficient
    nvidia.com/gpu. preemption: ..." (the first that applies, GPUs first)."""
    resources = _INSUFFICIENT.findall(message)
    if any("gpu" in r.lower() for r in resources):
        return "insufficient_gpu"
    for r in resources:
        if r in ("cpu", "memory"):
            return f"insufficient_{r}"
    if resources:
        return "insufficient_other"
    lowered = message.lower()
    if "affinity" in lowered or "selector" in lowered:
        return "volume" if "volume node affinity" in lowered else "node_affinity"
    if "taint" in lowered:
        return "taint"
    if "persistentvolumeclaim" in lowered or "volume" in lowered:
        return "volume"
    return "other"


def _list(obj: Mapping[str, Any], key: str) -> Sequence[Any]:
    v = obj.get(key)
    return v if isinstance(v, list) else []


def pod_state(status: Mapping[str, Any], ready: bool) -> tuple[str, str]:
    """(state, reason) of a pod from its status; `ready` is its Ready condition (and phase Running). The reason
    is empty but for `unschedulable` and `failing`; a pod that ran to its end is `ended` (in no count)."""
    if ready:
        return "ready", ""
    if status.get("phase") in ("Succeeded", "Failed"):
        return "ended", ""  # its controller replaces it with a new pod, counted on its own
    conditions = [c for c in _list(status, "conditions") if isinstance(c, Mapping)]
    for c in conditions:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            message = c.get("message")
            return "unschedulable", unschedulable_reason(message if isinstance(message, str) else "")
    for cs in (*_list(status, "initContainerStatuses"), *_list(status, "containerStatuses")):
        state = cs.get("state") if isinstance(cs, Mapping) else None
        waiting = state.get("waiting") if isinstance(state, Mapping) else None
        why = waiting.get("reason") if isinstance(waiting, Mapping) else None
        if isinstance(why, str) and why in FAILING_REASONS:
            return "failing", FAILING_REASONS[why]
    if status.get("phase", "Pending") == "Pending":
        return "starting", ""
    return "not_ready", ""


def describe(waiting: Mapping[tuple[str, str], int]) -> str:
    """`2 unschedulable (insufficient_gpu), 1 starting` from counts by (state, reason), largest first."""
    parts = sorted(waiting.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n} {state}" + (f" ({reason})" if reason else "") for (state, reason), n in parts)
