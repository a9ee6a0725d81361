"""Each primitive row's reader (observer.config.sources): the collections it is read from, and its objects (and
the model's pods) → its plan, which observer/discover/model.py `build_state` makes versions of, as it does the
Argo reader's. Each version's pods are those its labels select among the model's pods; versions of an adapter
rewrite share every pod and differ by model name: the scrape counts only that model's series, and golden and
shadow replays ask for that model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from observer.config.discovery import PrimitiveRef
from observer.config.sources import POOLS
from observer.discover.canaries import flagger_plan
from observer.discover.model import ModelState, PodInfo
from observer.discover.plan import Plan
from observer.discover.primitives import httproute_plan, isvc_plan, llmisvc_plan, rewrite_plan
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
    "flagger": _one(lambda ref, obj, pools, pods: flagger_plan(obj, pods)),
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
