"""From a rollout primitive's plan (observer/discover/primitives.py) and the model's pods to versions.

The Argo path (observer/discover/model.py) groups pods by their pod-template hash; here the primitive names
the versions and each version's pods are those its labels select among the model's pods. Versions of an
adapter rewrite share every pod and differ by model name: the scrape counts only that model's series, and
golden and shadow replays ask for that model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from observer.config.discovery import KubernetesDiscovery, ModelDiscovery, PrimitiveRef
from observer.config.fleet import VERSION_NAME, PodRef, VersionSpec
from observer.config.sources import BY_KEY, POOLS
from observer.discover.model import ModelState, PodInfo, count_waiting, openai_url, router_for, serving_pods
from observer.discover.primitives import Plan, httproute_plan, isvc_plan, llmisvc_plan, rewrite_plan
from observer.discover.revisions import dynamo_plan, ome_plan

Obj = Mapping[str, Any]
Reader = Callable[[PrimitiveRef, Sequence[Obj], Sequence[Obj], Sequence[PodInfo]], Plan]


def _named(objs: Iterable[Obj], name: str) -> Obj | None:
    return next((o for o in objs if isinstance(o.get("metadata"), Mapping) and o["metadata"].get("name") == name),
                None)


def _one(read: Callable[[PrimitiveRef, Obj, Sequence[Obj], Sequence[PodInfo]], Plan]) -> Reader:
    """A reader of the one object the ref names: a missing one is a dangling ref, counted and named."""
    def reader(ref: PrimitiveRef, own: Sequence[Obj], pools: Sequence[Obj], pods: Sequence[PodInfo]) -> Plan:
        named = _named(own, ref.name)
        if named is None:
            plural = ref.source.own.plural if ref.source.own is not None else ref.kind
            return Plan(ref.kind, ref.name, (), {"dangling_ref": 1},
                        (f"dangling_ref: no {plural} named {ref.name} in the namespace",))
        return read(ref, named, pools, pods)
    return reader


# Each primitive row's reader (observer.config.sources): the objects of its collections → its plan.
READERS: Mapping[str, Reader] = {
    "kserve_llmisvc": lambda ref, own, pools, pods: llmisvc_plan(ref.name, own),
    "kserve_isvc": _one(lambda ref, obj, pools, pods: isvc_plan(obj)),
    "httproute_pools": _one(lambda ref, obj, pools, pods: httproute_plan(obj, pools)),
    "model_rewrite": _one(lambda ref, obj, pools, pods: rewrite_plan(obj, ref.model or "", pools)),
    "ome": _one(lambda ref, obj, pools, pods: ome_plan(obj, pods)),
    "dynamo": _one(lambda ref, obj, pools, pods: dynamo_plan(obj, pods)),
}


def resources(ref: PrimitiveRef) -> list[tuple[str, str]]:
    """(apiVersion, plural) of every collection the primitive's plan is read from."""
    row = ref.source
    assert row.own is not None  # a primitive names its versions in an object
    out = [(api, row.own.plural) for api in row.own.watched(ref.api_version)]
    out += [(api, c.plural) for c in row.also for api in c.watched()]
    if row.pools:
        out.append((ref.pool_api_version, POOLS.plural))
    return out


def plan_for(ref: PrimitiveRef, objects: Mapping[tuple[str, str], Sequence[Obj]],
             pods: Sequence[PodInfo] = ()) -> Plan:
    """The primitive's plan from the watched collections' objects ((apiVersion, plural) → objects) and the
    model's pods (sources whose versions are told apart on the pods, by a hash label)."""
    watched = resources(ref)
    own_plural = ref.source.own.plural if ref.source.own is not None else ""
    own = [o for key, objs in objects.items() if key[1] == own_plural and key in watched for o in objs]
    pools = [o for (api, plural), objs in objects.items() if plural == POOLS.plural and api == ref.pool_api_version
             for o in objs]
    return READERS[ref.kind](ref, own, pools, pods)


def plan_state(spec: KubernetesDiscovery, m: ModelDiscovery, pods: Iterable[PodInfo], plan: Plan,
               dcgm: Mapping[str, Sequence[str]], problems: Counter[str]) -> ModelState:
    """The versions of model `m` its primitive's `plan` names, each with the pods its labels select."""
    problems.update(plan.problems)
    pods = list(pods)
    serving = serving_pods(pods, problems)
    order = {"stable": 0, "canary": 1, "other": 2}
    ranked = sorted(plan.members, key=lambda x: order[x.role])
    if len(ranked) > spec.max_versions_per_model:
        problems["versions_over_cap"] += len(ranked) - spec.max_versions_per_model
        ranked = ranked[: spec.max_versions_per_model]
    versions: list[VersionSpec] = []
    counted: dict[str, int] = {}
    members = [(f"{m.version_prefix}{x.identity}", x) for x in ranked]
    waiting = count_waiting([(name, p) for name, x in members if VERSION_NAME.match(name) for p in pods
                             if x.pod_labels.items() <= p.labels.items()], spec.max_versions_per_model)
    for name, member in members:
        if not VERSION_NAME.match(name):
            problems["invalid_identity"] += 1
            continue
        chosen = [p for p in serving if member.pod_labels.items() <= p.labels.items()]
        if len(chosen) > spec.max_pods_per_version:
            problems["pods_over_cap"] += len(chosen) - spec.max_pods_per_version
            chosen = chosen[: spec.max_pods_per_version]
        if not chosen:
            continue  # no serving pod (yet, or any more): as on the Argo path, the version comes with its pods
        urls = [u for p in chosen if (u := p.url(m.port, m.metrics_path)) is not None]
        if not urls:
            problems["no_port"] += 1
            continue
        openai = openai_url(m, spec.namespace, name, member.role, None, chosen)  # no Rollout Service here
        if openai is None:
            problems["no_openai_url"] += 1
        nodes = sorted({p.node for p in chosen if p.node is not None})
        counted[name] = len(chosen)
        model = member.model or m.served_model
        versions.append(VersionSpec(
            name=name, role=member.role, model=model, vllm=urls, openai=openai, router=router_for(m, model),
            dcgm=sorted({u for n in nodes for u in dcgm.get(n, ())}),
            pods=[PodRef(namespace=p.namespace or spec.namespace, pod=p.name, started_at=p.started_at)
                  for p in chosen],
            expected_traffic_weight=member.weight, group=m.name, pods_waiting=dict(waiting.get(name, {}))))
    row = BY_KEY[plan.primitive]
    pods_in = {role: sum(counted[v.name] for v in versions if v.role == role) for role in ("stable", "canary", "other")}
    share = (pods_in["canary"] / (pods_in["canary"] + pods_in["stable"])
             if pods_in["canary"] and pods_in["stable"] and not row.shared_pods else None)
    canary = next((x for x in plan.members if x.role == "canary"), None)
    weight = canary.weight if canary is not None else None
    if row.split == "pods" and canary is not None:
        # Requests follow the ready instances (OME's capacity, Dynamo's generations): the share of pods is the
        # expected split; none until both have a serving pod.
        weight = share
        versions = [v.model_copy(update={"expected_traffic_weight": None if share is None else
                                         share if v.role == "canary" else 1 - share if v.role == "stable" else None})
                    for v in versions]
    stale = 0 if row.shared_pods else pods_in["other"]
    return ModelState(model=m.name, versions=tuple(versions), pods=counted, canary_weight=weight,
                      canary_replica_share=share, stale_revision_pods=stale, waiting=waiting)


def claimed_twice(states: Mapping[str, ModelState], primitive_groups: Iterable[str]) -> dict[str, set[str]]:
    """model → its versions that claim what another model's version claims, where one of the two models is
    read from a primitive: a pod serving the same model name (a version without a model name claims every
    model on its pods). Two adapter rewrites, or an adapter and its base model, share pods by design and
    differ by model name; the versions of one rewrite are never counted against each other."""
    primitive = set(primitive_groups)
    claims: dict[str, list[tuple[str, str, str | None]]] = {}  # pod → (group, version, model)
    for group, st in states.items():
        for v in st.versions:
            for p in v.pods:
                claims.setdefault(f"{p.namespace}/{p.pod}", []).append((group, v.name, v.model))
    out: dict[str, set[str]] = {}
    for on_pod in claims.values():
        for i, (g1, v1, m1) in enumerate(on_pod):
            for g2, v2, m2 in on_pod[i + 1:]:
                if g1 == g2 or not ({g1, g2} & primitive):
                    continue
                if m1 is None or m2 is None or m1 == m2:
                    out.setdefault(g1, set()).add(v1)
                    out.setdefault(g2, set()).add(v2)
    return out
