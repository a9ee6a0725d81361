"""Versions named by a revision hash on the pods: OME's canary and Dynamo's worker generations.

Both stacks split requests by ready instances, not by a weight (OME routes by the canary step's `capacity`,
the new revision's share of ready instances, and records a `traffic` weight it does not route; Dynamo's
frontend serves from both generations while they are up), so their rows take the expected share from the
pods (observer/discover/planned.py). Pure functions over the raw objects and the model's pods.

* **OME** `InferenceService` (ome.io/v1beta1) with `spec.rollout`: the engine component's status names the
  revisions, `status.components.engine.canary` (`canaryRevisionHash`, `stableRevisionHash`) and its
  `traffic[]` (`revisionName` `<isvc>-engine-rev-<hash>`, tagged `stable`/`canary`); `rolloutPhase` says
  whether a canary is in flight. Pods carry `ome.io/revision-hash: <hash>`. The engine is read because its
  pods are the ones vLLM runs in; a group with a router keeps its canary status on the router, whose hashes
  name router pods, so the engine's `traffic` is read there.
* **Dynamo** `DynamoGraphDeployment` (nvidia.com/v1beta1, v1alpha1): worker generations by the 8-character
  worker hash on the pods (`nvidia.com/dynamo-worker-hash`). The DGD's annotations stay on the completed
  generation until a rollout ends (`nvidia.com/current-worker-hash-v2`, or the legacy
  `nvidia.com/current-worker-hash` whose suffix the active workers keep until the next rollout): that
  generation is stable; while `status.rollingUpdate.phase` is Pending or InProgress the newest other
  generation on the pods is the canary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from observer.discover.model import PodInfo, _dict, _list
from observer.discover.plan import Member, Plan, Role, _Reading
from observer.discover.primitives import _known, _own, _str

OME_REVISION_LABEL = "ome.io/revision-hash"
OME_COMPONENT = "engine"
OME_IN_FLIGHT = frozenset({"Pending", "Canarying", "Paused", "Promoting", "Failed"})  # Failed: held, still up
OME_BACK = frozenset({"RollingBack", "RolledBack"})
DYNAMO_HASH_LABEL = "nvidia.com/dynamo-worker-hash"
DYNAMO_HASH_V2 = "nvidia.com/current-worker-hash-v2"
DYNAMO_HASH_V1 = "nvidia.com/current-worker-hash"
DYNAMO_IN_FLIGHT = frozenset({"Pending", "InProgress"})


def _hash_of(revision: str | None) -> str | None:
    """A revision's hash: `<isvc>-<component>-rev-<hash>` or the hash itself."""
    if revision is None:
        return None
    return revision.rpartition("-rev-")[2] or None


def _on_pods(pods: Sequence[PodInfo], label: str) -> dict[str, float]:
    """hash → the earliest start of a pod carrying it (inf when unknown): which hashes the pods carry, by age."""
    out: dict[str, float] = {}
    for p in pods:
        h = p.labels.get(label)
        if h:
            start = p.started_at if p.started_at is not None else float("inf")
            out[h] = min(out.get(h, float("inf")), start)
    return out


def _plan(reading: _Reading, key: str, name: str, roles: Mapping[str, Role], label: str,
          carried: Mapping[str, float], what: str) -> Plan:
    """Members for the hashes named (`roles`) and the other hashes the pods carry (`carried`, `_on_pods`):
    `other`; a named hash that no pod carries is a counted problem, named."""
    for h, role in roles.items():
        if h not in carried:
            reading.add("revision_without_pods", f"{what}: the {role} revision {h} is on no pod of the model "
                                                 f"(no pod labelled {label}={h})")
    members = [Member(identity=h, role=role, weight=None, pod_labels={label: h}) for h, role in roles.items()]
    members += [Member(identity=h, role="other", weight=None, pod_labels={label: h})
                for h in sorted(carried) if h not in roles]
    return reading.plan(key, name, members)


def ome_plan(obj: Mapping[str, Any], pods: Sequence[PodInfo]) -> Plan:
    """The engine revisions of an OME InferenceService, its pods telling them apart by revision hash."""
    reading = _Reading()
    name = _str(_dict(obj, "metadata"), "name") or "?"
    if not _known(obj, _own("ome"), reading):
        return reading.plan("ome", name, [])
    what = f"OME InferenceService {name}"
    carried = _on_pods(pods, OME_REVISION_LABEL)
    component = _dict(_dict(_dict(obj, "status"), "components"), OME_COMPONENT)
    canary_status = _dict(component, "canary")
    phase = _str(component, "rolloutPhase")
    tagged = {_str(t, "tag"): _hash_of(_str(t, "revisionName")) for t in _list(component, "traffic")}
    stable = _hash_of(_str(canary_status, "stableRevisionHash")) or tagged.get("stable")
    canary = _hash_of(_str(canary_status, "canaryRevisionHash")) or tagged.get("canary")
    roles: dict[str, Role] = {}
    if phase in OME_IN_FLIGHT or phase in OME_BACK:
        if stable is None or canary is None:
            reading.add("missing_field", f"{what}: rolloutPhase {phase} but status.components.{OME_COMPONENT}"
                                         ".canary names no stableRevisionHash/canaryRevisionHash")
            return reading.plan("ome", name, [])
        roles[stable] = "stable"
        if canary != stable:
            roles[canary] = "canary" if phase in OME_IN_FLIGHT else "other"
    else:
        # No canary in flight (Stable, or no rollout yet): the revision the status calls stable, else the one
        # the only traffic entry names, else the pods' newest hash (a fresh service has no rollout status).
        settled = tagged.get("stable") or (next(iter(tagged.values())) if len(tagged) == 1 else None)
        if settled is None and phase == "Stable":
            settled = canary  # a promotion leaves the promoted revision in canaryRevisionHash
        if settled is None:
            settled = max(carried, key=lambda h: (carried[h], h)) if carried else None
        if settled is not None:
            roles[settled] = "stable"
    return _plan(reading, "ome", name, roles, OME_REVISION_LABEL, carried, what)


def dynamo_plan(obj: Mapping[str, Any], pods: Sequence[PodInfo]) -> Plan:
    """The worker generations of a DynamoGraphDeployment, by worker hash."""
    reading = _Reading()
    meta = _dict(obj, "metadata")
    name = _str(meta, "name") or "?"
    if not _known(obj, _own("dynamo"), reading):
        return reading.plan("dynamo", name, [])
    what = f"DynamoGraphDeployment {name}"
    notes = _dict(meta, "annotations")
    carried = _on_pods(pods, DYNAMO_HASH_LABEL)
    named = [h for h in (_str(notes, DYNAMO_HASH_V2), _str(notes, DYNAMO_HASH_V1)) if h is not None]
    phase = _str(_dict(_dict(obj, "status"), "rollingUpdate"), "phase")
    in_flight = phase in DYNAMO_IN_FLIGHT
    if not named:
        reading.add("missing_field", f"{what}: neither {DYNAMO_HASH_V2} nor {DYNAMO_HASH_V1} is set"
                                     + (f" (rollingUpdate {phase})" if phase else ""))
        return reading.plan("dynamo", name, [])
    # The active workers carry v2 once a v2 generation completed, else the legacy v1 suffix.
    stable = next((h for h in named if h in carried), named[0])
    roles: dict[str, Role] = {stable: "stable"}
    others = sorted((h for h in carried if h != stable), key=lambda h: (carried[h], h))
    if in_flight and others:
        roles[others[-1]] = "canary"
    return _plan(reading, "dynamo", name, roles, DYNAMO_HASH_LABEL, carried, what)
