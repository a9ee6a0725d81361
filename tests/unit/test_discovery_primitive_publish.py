"""Discovery's recompute (observer/discover/watch.py) for models named by a rollout primitive: the reflectors'
caches (filled here directly; the watch itself is tested against the scripted API) → the live fleet's versions,
roles, weights and pods, across a rollout 5 → 25 → 50 → 100, and the problems counted on the way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from observer.config.discovery import KubernetesDiscovery
from observer.discover.planned import resources
from observer.discover.watch import Discovery
from observer.fleetview import LiveFleet
from observer_dev import primitive_objects as po
from observer_dev.kubeapi import pod


@dataclass
class Cache:
    """What Discovery reads of a reflector: its objects by name."""

    resource: str
    objects: dict[str, Any] = field(default_factory=dict)
    synced: bool = True
    last_error: str | None = None
    on_change: Any = None

    def put(self, obj: dict[str, Any]) -> None:
        self.objects[obj["metadata"]["name"]] = obj

    def delete(self, name: str) -> None:
        self.objects.pop(name, None)


def discovery(models: list[dict[str, Any]]) -> tuple[Discovery, dict[str, Cache], dict[tuple[str, str], Cache]]:
    spec = KubernetesDiscovery.model_validate({"dcgm": None, "models": models, "remove_after_seconds": 0})
    pods = {m.name: Cache(f"pods ({m.name})") for m in spec.models}
    prims = {key: Cache(key[1]) for m in spec.models if m.primitive for key in resources(m.primitive)}
    d = Discovery(spec=spec, fleet=LiveFleet(), client=None, pods=pods, primitives=prims)  # type: ignore[arg-type]
    return d, pods, prims


def fleet(d: Discovery) -> dict[str, tuple[str, float | None, int, str | None]]:
    d.publish()
    return {v.name: (v.role, None if v.expected_traffic_weight is None else round(v.expected_traffic_weight, 6),
                     len(v.vllm), v.model) for v in d.fleet.versions()}


def problems(d: Discovery, group: str) -> dict[str, int]:
    return {p: n for (g, p), n in d.problems.items() if g == group}


LLMISVC = ("serving.kserve.io/v1alpha2", "llminferenceservices")


def _workload_pod(service: str, i: int) -> dict[str, Any]:
    return pod(f"{service}-{i}", labels=po.llmisvc_pod_labels(service), port=8000 + i)


def test_a_kserve_routing_group_rolled_out_5_25_50_100_keeps_identities_and_moves_roles() -> None:
    d, pods, prims = discovery([{"name": "llm", "selector": {"kserve.io/component": "workload"},
                                 "primitive": {"kind": "kserve_llmisvc", "name": "llm"}, "port": 8000}])
    for i in range(2):
        pods["llm"].put(_workload_pod("llm-v1", i))
    pods["llm"].put(_workload_pod("llm-v2", 0))
    cache = prims[LLMISVC]
    cache.put(po.llmisvc("llm-v1", group="llm", weight=100, created="2026-11-01T00:00:00Z"))
    assert fleet(d) == {"llm-v1": ("stable", 1.0, 2, None)}  # v2's pods serve no member yet
    for canary in (5, 25, 50):
        cache.put(po.llmisvc("llm-v1", group="llm", weight=100 - canary, created="2026-11-01T00:00:00Z"))
        cache.put(po.llmisvc("llm-v2", group="llm", weight=canary, created="2026-12-01T00:00:00Z"))
        assert fleet(d) == {"llm-v1": ("stable", 1 - canary / 100, 2, None),
                            "llm-v2": ("canary", canary / 100, 1, None)}
        assert d.states["llm"].canary_weight == pytest.approx(canary / 100)
    # 100: the controller stops v1; v2 keeps its identity (its windows) and becomes stable.
    members = {"llm-v1": 0, "llm-v2": 100}
    cache.put(po.llmisvc("llm-v1", group="llm", weight=0, created="2026-11-01T00:00:00Z", members=members,
                         stopped=("llm-v1",)))
    cache.put(po.llmisvc("llm-v2", group="llm", weight=100, created="2026-12-01T00:00:00Z", members=members,
                         stopped=("llm-v1",)))
    assert fleet(d) == {"llm-v1": ("other", 0.0, 2, None), "llm-v2": ("stable", 1.0, 1, None)}
    assert d.states["llm"].stale_revision_pods == 2
    for i in range(2):
        pods["llm"].delete(f"llm-v1-{i}")
    fleet(d)
    assert fleet(d) == {"llm-v2": ("stable", 1.0, 1, None)}  # v1's series end (grace 0 here)
    assert problems(d, "llm") == {}


def test_an_aborted_pool_canary_is_other_and_a_dangling_pool_is_named() -> None:
    d, pods, prims = discovery([{"name": "gemma", "selector": {"tier": "gemma"},
                                 "primitive": {"kind": "httproute_pools", "name": "gemma"}, "port": 8000}])
    for app in ("gemma-v1", "gemma-v2"):
        pods["gemma"].put(pod(f"{app}-0", labels={"tier": "gemma", "app": app}, port=8000))
    pools = prims[("inference.networking.k8s.io/v1", "inferencepools")]
    routes = prims[("gateway.networking.k8s.io/v1", "httproutes")]
    pools.put(po.inference_pool("gemma-v1", labels={"app": "gemma-v1"}, created="2026-11-01T00:00:00Z"))
    routes.put(po.httproute("gemma", pools={"gemma-v1": 90, "gemma-v2": 10}))
    assert fleet(d) == {"gemma-v1": ("stable", 1.0, 1, None)}
    assert problems(d, "gemma") == {"dangling_ref": 1}
    pools.put(po.inference_pool("gemma-v2", labels={"app": "gemma-v2"}, created="2026-12-01T00:00:00Z"))
    assert fleet(d) == {"gemma-v1": ("stable", 0.9, 1, None), "gemma-v2": ("canary", 0.1, 1, None)}
    routes.put(po.httproute("gemma", pools={"gemma-v1": 100, "gemma-v2": 0}))  # aborted
    assert fleet(d) == {"gemma-v1": ("stable", 1.0, 1, None), "gemma-v2": ("other", 0.0, 1, None)}
    assert problems(d, "gemma") == {"dangling_ref": 1}  # counted once, when it happened


def test_adapter_versions_share_the_pool_and_differ_by_model_name_beside_the_base_model() -> None:
    d, pods, prims = discovery([
        {"name": "lora", "selector": {"app": "base"}, "port": 8000,
         "primitive": {"kind": "model_rewrite", "name": "lora", "model": "support-lora"}},
        {"name": "base", "selector": {"app": "base"}, "served_model": "base", "port": 8000,
         "identity_label": "pod-template-hash"}])
    for i in range(2):
        for group in ("lora", "base"):
            pods[group].put(pod(f"base-{i}", labels={"app": "base", "pod-template-hash": "b1"}, port=8000 + i))
    prims[("inference.networking.k8s.io/v1", "inferencepools")].put(po.inference_pool("base", labels={"app": "base"}))
    rewrites = prims[("llm-d.ai/v1alpha2", "inferencemodelrewrites")]
    rewrites.put(po.model_rewrite("lora", model="support-lora", pool="base",
                                  targets={"support-lora-v1": 95, "support-lora-v2": 5}))
    got = fleet(d)
    assert got["support-lora-v1"] == ("stable", 0.95, 2, "support-lora-v1")
    assert got["support-lora-v2"] == ("canary", 0.05, 2, "support-lora-v2")
    assert got["b1"] == ("other", None, 2, "base")  # the base model's own version on the same pods, untouched
    assert problems(d, "lora") == {} and problems(d, "base") == {}
    assert d.states["lora"].canary_replica_share is None  # one pool: a replica share means nothing
    # The older API group is read too (llm-d's published weighted example uses it).
    rewrites.delete("lora")
    old = po.model_rewrite("lora", model="support-lora", pool="base", targets={"support-lora-v1": 50,
                                                                              "support-lora-v2": 50})
    old["apiVersion"] = "inference.networking.x-k8s.io/v1alpha2"
    prims[("inference.networking.x-k8s.io/v1alpha2", "inferencemodelrewrites")].put(old)
    assert fleet(d)["support-lora-v2"][:2] == ("canary", 0.5)


def test_two_claims_on_the_same_pods_and_model_leave_both_out_until_one_lets_go() -> None:
    d, pods, prims = discovery([
        {"name": "gemma", "selector": {"tier": "gemma"}, "port": 8000,
         "primitive": {"kind": "httproute_pools", "name": "gemma"}},
        {"name": "argo", "selector": {"tier": "gemma"}, "port": 8000}])  # every model on those pods, by role label
    for group in ("gemma", "argo"):
        pods[group].put(pod("gemma-v1-0", port=8000, labels={
            "tier": "gemma", "app": "gemma-v1", "rollouts-pod-template-hash": "h1", "observer.dev/role": "stable"}))
    prims[("inference.networking.k8s.io/v1", "inferencepools")].put(
        po.inference_pool("gemma-v1", labels={"app": "gemma-v1"}))
    prims[("gateway.networking.k8s.io/v1", "httproutes")].put(po.httproute("gemma", pools={"gemma-v1": 1}))
    assert fleet(d) == {}
    assert problems(d, "gemma") == {"claimed_twice": 1} and problems(d, "argo") == {"claimed_twice": 1}
    d.spec = d.spec.model_copy(update={"models": d.spec.models[:1]})
    del d.pods["argo"]
    assert fleet(d) == {"gemma-v1": ("stable", 1.0, 1, None)}


def test_unknown_api_versions_and_missing_objects_are_counted_and_never_make_versions() -> None:
    d, pods, prims = discovery([{"name": "chat", "selector": {"app": "chat"}, "port": 8080,
                                 "primitive": {"kind": "kserve_isvc", "name": "chat"}}])
    pods["chat"].put(pod("chat-0", labels={"app": "chat", "serving.knative.dev/revision": "chat-00001"},
                         port=8080))
    assert fleet(d) == {} and problems(d, "chat") == {"dangling_ref": 1}
    cache = prims[("serving.kserve.io/v1beta1", "inferenceservices")]
    future = po.isvc("chat", stable="chat-00001", latest="chat-00002", canary_percent=10)
    future["apiVersion"] = "serving.kserve.io/v2"
    cache.put(future)
    assert fleet(d) == {} and problems(d, "chat")["unknown_api_version"] == 1
    cache.put(po.isvc("chat", stable="chat-00001", latest="chat-00002", canary_percent=10))
    assert fleet(d) == {"chat-00001": ("stable", 0.9, 1, None)}  # the canary revision has no pod yet
