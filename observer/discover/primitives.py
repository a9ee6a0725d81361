"""Versions from the rollout primitives LLM stacks use besides Argo Rollouts.

Each reader turns the objects a controller already keeps into a `Plan`: the versions of one model, each with
its identity, role, expected traffic share and the pods that serve it, the same facts the Argo path reads
from a Rollout. Pure functions over raw API objects, so each rule is tested on the objects upstream published.

* KServe `LLMInferenceService` (serving.kserve.io/v1alpha1, v1alpha2): the services of one routing group
  (`spec.router.route.group`) are its versions, weighted by `spec.router.route.weight`; the group's status
  (`status.router.group.members`, which marks a member `stopped`) wins over the specs when present. A
  member's pods carry `app.kubernetes.io/name: <service>` and `kserve.io/component: workload`.
* KServe `InferenceService` (serving.kserve.io/v1beta1) with `canaryTrafficPercent`: the predictor's
  revisions in `status.components.predictor.traffic`; `latestRolledoutRevision` is stable, the latest
  revision with traffic is the canary. Pods carry `serving.knative.dev/revision: <revision>`.
* Gateway API `HTTPRoute` weighted across `InferencePool`s: each pool is a version, its weight the
  backendRef's (Gateway API's default 1), its pods the pool's selector.
* llm-d `InferenceModelRewrite` (llm-d.ai/v1alpha2, and the older inference.networking.x-k8s.io/v1alpha2):
  the weighted `targets` of the rule matching one model name are versions that share the pool's pods and
  differ by model name.

Identity is the member's own name (service, revision, pool, target model), so a promotion moves the role
and never the identity: the promoted version keeps its windows. Roles, where the objects do not say them:
of the members with traffic, the oldest (creationTimestamp; for rewrite targets, the order listed) is
stable and the newest the canary; a member without traffic is `other`. So 5 → 25 → 50 → 100 keeps the old
member stable until it has no traffic left, and an aborted canary (weight 0) is `other`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from observer.config.sources import BY_KEY, POOLS, Collection

# The discovery model's readers of raw API objects (a missing or mistyped field reads as empty).
from observer.discover.model import _dict, _list, _timestamp
from observer.discover.plan import Member, Plan, Role, _Reading


def _own(key: str) -> Collection:
    own = BY_KEY[key].own
    assert own is not None
    return own


# What each reader accepts: its row's collection (observer.config.sources), the same the config may watch.
_LLMISVC, _ISVC, _ROUTE, _REWRITE = (_own(k) for k in ("kserve_llmisvc", "kserve_isvc", "httproute_pools",
                                                       "model_rewrite"))
POOL_GROUPS = frozenset(POOLS.groups)
LLMISVC_GROUP_LABEL = "serving.kserve.io/routing-group"
LLMISVC_POD_LABELS = {"kserve.io/component": "workload"}  # and app.kubernetes.io/name: <service>
ISVC_REVISION_LABEL = "serving.knative.dev/revision"
# Bounded values of observer_discovery_problems_total's `problem` label that the readers add.
PROBLEMS = ("unknown_api_version", "missing_field", "weights_zero", "dangling_ref", "no_members",
            "claimed_twice", "revision_without_pods")
FIXES = {
    "unknown_api_version": "the object's apiVersion is one this observer does not read: upgrade the observer, "
                           "or serve the version it knows (see docs/kubernetes.md)",
    "missing_field": "a field the version needs is missing: see the log line for which, and the object's CRD",
    "weights_zero": "no member has a positive weight: the observer cannot tell stable from canary",
    "dangling_ref": "a backendRef, poolRef or group member names an object that does not exist",
    "no_members": "the primitive names no version yet (no status, no member with this group or model)",
    "revision_without_pods": "the object names a revision (or worker hash) no pod of the model carries: its pods "
                             "are gone, or the model's selector does not select them",
    "claimed_twice": "two primitives (or a primitive and an Argo Rollout) claim the same pods or model name; "
                     "both are left out until one lets go",
}


def _str(obj: Any, key: str) -> str | None:
    v = obj.get(key) if isinstance(obj, Mapping) else None
    return v if isinstance(v, str) and v else None


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 else None


def _created(obj: Mapping[str, Any]) -> float | None:
    return _timestamp(_dict(obj, "metadata").get("creationTimestamp"))


def _known(obj: Mapping[str, Any], collection: Collection, reading: _Reading) -> bool:
    api = obj.get("apiVersion")
    name = _str(_dict(obj, "metadata"), "name") or "?"
    if api not in collection.api_versions:
        reading.add("unknown_api_version", f"{collection.kind} {name}: apiVersion {api!r}, known: "
                                           f"{', '.join(sorted(collection.api_versions))}")
        return False
    return True


def assign_roles(members: Sequence[Member]) -> list[Member]:
    """Roles by age among the members with traffic (oldest stable, newest canary); the rest `other`. A member
    whose weight is unknown counts as having traffic. Stable order: `created`, then the order given."""
    live = [(m.created if m.created is not None else float("inf"), i) for i, m in enumerate(members)
            if m.weight is None or m.weight > 0]
    live.sort()
    roles: dict[int, Role] = {}
    if live:
        roles[live[0][1]] = "stable"
    if len(live) > 1:
        roles[live[-1][1]] = "canary"
    return [replace(m, role=roles.get(i, "other")) for i, m in enumerate(members)]


def _shares(raw: Sequence[float | None], reading: _Reading, what: str) -> list[float | None]:
    known = [w for w in raw if w is not None]
    total = sum(known)
    if known and total <= 0:
        reading.add("weights_zero", f"{what}: every weight is 0")
        return [None] * len(raw)
    return [None if w is None or not known else w / total for w in raw]


def llmisvc_plan(group: str, services: Iterable[Mapping[str, Any]]) -> Plan:
    """The versions of KServe routing group `group`, from the namespace's LLMInferenceServices."""
    reading = _Reading()
    chosen: list[Mapping[str, Any]] = []
    status_members: dict[str, Mapping[str, Any]] = {}
    for obj in services:
        if obj.get("kind", "LLMInferenceService") != "LLMInferenceService":
            continue
        meta = _dict(obj, "metadata")
        route = _dict(_dict(_dict(obj, "spec"), "router"), "route")
        in_group = route.get("group") == group or _dict(meta, "labels").get(LLMISVC_GROUP_LABEL) == group
        if not in_group or not _known(obj, _LLMISVC, reading):
            continue
        if _str(meta, "name") is None:
            reading.add("missing_field", "an LLMInferenceService without metadata.name")
            continue
        chosen.append(obj)
        status_group = _dict(_dict(_dict(obj, "status"), "router"), "group")
        if status_group.get("name") == group:
            for m in _list(status_group, "members"):
                if _str(m, "name") is not None:
                    status_members[m["name"]] = m
    names = {_dict(o, "metadata")["name"] for o in chosen}
    for missing in sorted(set(status_members) - names):
        reading.add("dangling_ref", f"routing group {group}: status names member {missing}, which does not exist")
    raw: list[float | None] = []
    for obj in chosen:
        name = _dict(obj, "metadata")["name"]
        st = status_members.get(name)
        if st is not None and st.get("stopped") is True:
            raw.append(0.0)
            continue
        weight = _number((st or {}).get("weight", _dict(_dict(_dict(obj, "spec"), "router"), "route").get("weight")))
        if weight is None:
            reading.add("missing_field", f"LLMInferenceService {name}: spec.router.route.weight")
        raw.append(weight)
    members = [Member(identity=_dict(o, "metadata")["name"], role="other", weight=w,
                      pod_labels={"app.kubernetes.io/name": _dict(o, "metadata")["name"], **LLMISVC_POD_LABELS},
                      created=_created(o))
               for o, w in zip(chosen, _shares(raw, reading, f"routing group {group}"), strict=True)]
    return reading.plan("kserve_llmisvc", group, assign_roles(members))


def isvc_plan(obj: Mapping[str, Any]) -> Plan:
    """The predictor revisions of a KServe InferenceService with `canaryTrafficPercent` (serverless mode)."""
    reading = _Reading()
    name = _str(_dict(obj, "metadata"), "name") or "?"
    if not _known(obj, _ISVC, reading):
        return reading.plan("kserve_isvc", name, [])
    predictor = _dict(_dict(_dict(obj, "status"), "components"), "predictor")
    stable = _str(predictor, "latestRolledoutRevision")
    traffic = [t for t in _list(predictor, "traffic") if _str(t, "revisionName") is not None]
    if not traffic:
        if predictor or _dict(_dict(obj, "spec"), "predictor").get("canaryTrafficPercent") is not None:
            reading.add("missing_field", f"InferenceService {name}: status.components.predictor.traffic "
                                         "(not reconciled yet?)")
        return reading.plan("kserve_isvc", name, [])
    percents: dict[str, float] = {}
    latest: str | None = None
    for t in traffic:
        rev = t["revisionName"]
        percents[rev] = percents.get(rev, 0.0) + (_number(t.get("percent")) or 0.0)
        if t.get("latestRevision") is True:
            latest = rev
    shares = _shares(list(percents.values()), reading, f"InferenceService {name}")
    members = []
    for (rev, _), share in zip(percents.items(), shares, strict=True):
        role: Role = "stable" if rev == stable else "canary" if rev == latest and (share or 0) > 0 else "other"
        members.append(Member(identity=rev, role=role, weight=share, pod_labels={ISVC_REVISION_LABEL: rev}))
    if stable is None or stable not in percents:
        # Before the first roll-out completes, or a status without it: fall back to traffic order.
        members = assign_roles(members)
    return reading.plan("kserve_isvc", name, members)


def pool_selector(pool: Mapping[str, Any]) -> dict[str, str] | None:
    """An InferencePool's pod selector: v1's `selector.matchLabels`, v1alpha2's `selector` map."""
    sel = _dict(_dict(pool, "spec"), "selector")
    labels = sel.get("matchLabels") if "matchLabels" in sel else sel
    if not isinstance(labels, Mapping) or not labels:
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        return None
    return dict(labels)


def _pools_by_name(pools: Iterable[Mapping[str, Any]], reading: _Reading) -> dict[str, Mapping[str, Any]]:
    out = {}
    for p in pools:
        name = _str(_dict(p, "metadata"), "name")
        if name is not None and _known(p, POOLS, reading):
            out[name] = p
    return out


def httproute_plan(route: Mapping[str, Any], pools: Iterable[Mapping[str, Any]]) -> Plan:
    """The InferencePools an HTTPRoute weighs against each other (its first rule with pool backends)."""
    reading = _Reading()
    name = _str(_dict(route, "metadata"), "name") or "?"
    if not _known(route, _ROUTE, reading):
        return reading.plan("httproute_pools", name, [])
    refs: Sequence[Mapping[str, Any]] = []
    for rule in _list(_dict(route, "spec"), "rules"):
        refs = [r for r in _list(rule, "backendRefs")
                if isinstance(r, Mapping) and r.get("kind") == "InferencePool" and r.get("group") in POOL_GROUPS]
        if refs:
            break
    by_name = _pools_by_name(pools, reading)
    members = []
    raw: list[float | None] = []
    for ref in refs:
        pool_name = _str(ref, "name")
        pool = by_name.get(pool_name or "")
        if pool is None:
            reading.add("dangling_ref", f"HTTPRoute {name}: backendRef {pool_name!r} names no InferencePool")
            continue
        selector = pool_selector(pool)
        if selector is None:
            reading.add("missing_field", f"InferencePool {pool_name}: spec.selector.matchLabels")
            continue
        raw.append(_number(ref.get("weight", 1)))
        members.append(Member(identity=str(pool_name), role="other", weight=None, pod_labels=selector,
                              created=_created(pool)))
    shares = _shares(raw, reading, f"HTTPRoute {name}")
    members = [replace(m, weight=w) for m, w in zip(members, shares, strict=True)]
    return reading.plan("httproute_pools", name, assign_roles(members))


def rewrite_plan(rewrite: Mapping[str, Any], model: str, pools: Iterable[Mapping[str, Any]]) -> Plan:
    """The weighted targets an InferenceModelRewrite sends model name `model` to: versions on the same pods."""
    reading = _Reading()
    name = _str(_dict(rewrite, "metadata"), "name") or "?"
    if not _known(rewrite, _REWRITE, reading):
        return reading.plan("model_rewrite", model, [])
    spec = _dict(rewrite, "spec")
    pool_name = _str(_dict(spec, "poolRef"), "name")
    pool = _pools_by_name(pools, reading).get(pool_name or "")
    if pool is None:
        reading.add("dangling_ref", f"InferenceModelRewrite {name}: poolRef {pool_name!r} names no InferencePool")
        return reading.plan("model_rewrite", model, [])
    selector = pool_selector(pool)
    if selector is None:
        reading.add("missing_field", f"InferencePool {pool_name}: spec.selector.matchLabels")
        return reading.plan("model_rewrite", model, [])
    targets: Sequence[Any] = []
    for rule in _list(spec, "rules"):
        if any(_str(_dict(m, "model"), "value") == model for m in _list(rule, "matches")):
            targets = _list(rule, "targets")
            break
    kept: list[tuple[Mapping[str, Any], str]] = []
    for t in targets:
        target = _str(t, "modelRewrite")
        if target is None:
            reading.add("missing_field", f"InferenceModelRewrite {name}: a target without modelRewrite")
        else:
            kept.append((t, target))
    # An unweighted list splits evenly (one target: all of it), as the endpoint picker does; the CRD wants
    # weights on every target or on none.
    weighted = [t for t, _ in kept if "weight" in t]
    if weighted and len(weighted) != len(kept):
        reading.add("missing_field", f"InferenceModelRewrite {name} ({model}): weights on some targets only")
    raw = [_number(t.get("weight", 1)) for t, _ in kept]
    shares = _shares(raw, reading, f"InferenceModelRewrite {name} ({model})")
    members = [Member(identity=target, role="other", weight=w, pod_labels=selector, model=target)
               for (_, target), w in zip(kept, shares, strict=True)]
    return reading.plan("model_rewrite", model, assign_roles(members))
