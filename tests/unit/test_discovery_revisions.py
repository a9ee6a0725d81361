"""The OME and Dynamo readers (observer/discover/revisions.py): revisions told apart by a hash on the pods.

OME has no published status example (SOURCES.md section 6 gives the fields from its Go types and docs), so
the status is put into the published `chat` InferenceService as the controller describes it; Dynamo's DGD is
the published disaggregated example with the annotations and rollout phase its worker-hash contract names.
Through discovery's recompute (watch.py) too: roles, the expected share from ready pods, the problems."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from observer.discover.model import PodInfo
from observer.discover.plan import Plan
from observer.discover.revisions import dynamo_plan, ome_plan
from observer_dev import primitive_objects as po
from observer_dev.kubeapi import pod
from tests.support.reference import reference
from tests.unit.test_discovery_primitive_publish import discovery, fleet, problems

DIR = "rollout-primitives/"


def published(name: str) -> Any:
    return yaml.safe_load(reference(DIR + name).read_text(encoding="utf-8"))


def pods(labels: dict[str, str], n: int, start: str = "2026-12-01T00:00:00Z") -> list[PodInfo]:
    return [PodInfo.parse(pod(f"p-{labels.get('ome.io/revision-hash', labels.get('nvidia.com/dynamo-worker-hash'))}"
                              f"-{i}", labels=labels, port=8000, start_time=start)) for i in range(n)]


def roles(plan: Plan) -> dict[str, str]:
    return {m.identity: m.role for m in plan.members}


def _ome(phase: str, *, canary: str | None = "b2c3d4e5", stable: str = "a1b2c3d4") -> dict[str, Any]:
    obj = copy.deepcopy(published("ome-isvc-canary-analysis-error-rate.yaml"))
    obj["status"] = po.ome_isvc("chat", stable=stable, canary=canary, phase=phase)["status"]
    return obj


OME_PODS = pods(po.ome_pod_labels("chat", "a1b2c3d4"), 3) + pods(po.ome_pod_labels("chat", "b2c3d4e5"), 1)


@pytest.mark.parametrize("phase", ["Pending", "Canarying", "Paused", "Promoting", "Failed"])
def test_ome_a_canary_in_flight_is_read_from_the_engines_canary_status(phase: str) -> None:
    plan = ome_plan(_ome(phase), OME_PODS)
    assert roles(plan) == {"a1b2c3d4": "stable", "b2c3d4e5": "canary"}
    assert not plan.problems
    assert plan.member("b2c3d4e5").pod_labels == {"ome.io/revision-hash": "b2c3d4e5"}  # type: ignore[union-attr]
    assert all(m.weight is None for m in plan.members)  # the split follows the pods, not the recorded traffic


def test_ome_hashes_from_the_traffic_table_when_the_canary_status_is_not_written_yet() -> None:
    obj = _ome("Canarying")
    del obj["status"]["components"]["engine"]["canary"]
    assert roles(ome_plan(obj, OME_PODS)) == {"a1b2c3d4": "stable", "b2c3d4e5": "canary"}


@pytest.mark.parametrize("phase", ["RollingBack", "RolledBack"])
def test_ome_a_rolled_back_canary_is_other_while_its_pods_drain(phase: str) -> None:
    assert roles(ome_plan(_ome(phase), OME_PODS)) == {"a1b2c3d4": "stable", "b2c3d4e5": "other"}


def test_ome_settled_the_promoted_revision_is_stable_and_old_pods_are_other() -> None:
    obj = _ome("Stable", canary=None, stable="b2c3d4e5")
    assert roles(ome_plan(obj, OME_PODS)) == {"b2c3d4e5": "stable", "a1b2c3d4": "other"}


def test_ome_a_status_naming_a_revision_no_pod_carries_is_a_counted_problem_with_a_line() -> None:
    plan = ome_plan(_ome("Canarying", canary="c3d4e5f6"), OME_PODS)
    assert plan.problems == {"revision_without_pods": 1}
    assert "canary revision c3d4e5f6 is on no pod" in plan.details[0]
    assert roles(plan)["b2c3d4e5"] == "other"  # pods of a revision the status no longer names: not the canary


def test_ome_in_flight_without_hashes_names_the_field_and_no_version() -> None:
    obj = _ome("Canarying")
    engine = obj["status"]["components"]["engine"]
    del engine["canary"], engine["traffic"]
    plan = ome_plan(obj, OME_PODS)
    assert plan.members == () and plan.problems == {"missing_field": 1}
    assert "status.components.engine.canary" in plan.details[0]


def test_ome_kserves_inference_service_is_not_read_as_omes() -> None:
    obj = _ome("Canarying")
    obj["apiVersion"] = "serving.kserve.io/v1beta1"
    assert ome_plan(obj, OME_PODS).problems == {"unknown_api_version": 1}


def _dgd(**kw: Any) -> dict[str, Any]:
    obj = copy.deepcopy(published("dynamo-dgd-vllm-disagg-v1beta1.yaml"))
    built = po.dgd("vllm-disagg", **kw)
    obj["metadata"]["annotations"] = built["metadata"].get("annotations", {})
    if "status" in built:
        obj["status"] = built["status"]
    return obj


OLD = pods(po.dynamo_pod_labels("0a1b2c3d"), 3, "2026-12-01T00:00:00Z")
NEW = pods(po.dynamo_pod_labels("9f8e7d6c"), 1, "2026-12-02T00:00:00Z")


def test_dynamo_mid_rollout_the_annotated_generation_is_stable_and_the_new_one_the_canary() -> None:
    plan = dynamo_plan(_dgd(current="0a1b2c3d", phase="InProgress"), OLD + NEW)
    assert roles(plan) == {"0a1b2c3d": "stable", "9f8e7d6c": "canary"}
    assert not plan.problems


def test_dynamo_the_legacy_suffix_is_stable_while_the_workers_still_carry_it() -> None:
    plan = dynamo_plan(_dgd(current="77777777", legacy="0a1b2c3d", phase="Pending"), OLD + NEW)
    assert roles(plan) == {"0a1b2c3d": "stable", "9f8e7d6c": "canary"}


def test_dynamo_after_the_rollout_old_workers_are_other_not_canary() -> None:
    plan = dynamo_plan(_dgd(current="9f8e7d6c", phase="Completed"), OLD + NEW)
    assert roles(plan) == {"9f8e7d6c": "stable", "0a1b2c3d": "other"}


def test_dynamo_faults_are_counted_with_a_line_and_never_a_canary() -> None:
    none = dynamo_plan(_dgd(current=None, phase="InProgress"), OLD + NEW)
    assert none.members == () and none.problems == {"missing_field": 1}
    assert "nvidia.com/current-worker-hash-v2" in none.details[0] and "InProgress" in none.details[0]
    ghost = dynamo_plan(_dgd(current="deadbeef", phase="InProgress"), OLD + NEW)
    assert ghost.problems == {"revision_without_pods": 1}
    assert "deadbeef" in ghost.details[0]
    # The stable generation has no pod, so no stable version is published: the canary has no baseline.
    assert roles(ghost) == {"deadbeef": "stable", "9f8e7d6c": "canary", "0a1b2c3d": "other"}


# --- through discovery's recompute ------------------------------------------------------------------------------

OME_KEY = ("ome.io/v1beta1", "inferenceservices")
DGD_KEY = ("nvidia.com/v1beta1", "dynamographdeployments")


def test_ome_through_discovery_the_expected_share_is_the_canarys_share_of_ready_pods() -> None:
    d, pod_cache, prims = discovery([{"name": "chat", "selector": {"ome.io/inferenceservice": "chat"},
                                      "primitive": {"kind": "ome", "name": "chat"}, "port": 8000}])
    assert set(prims) == {OME_KEY}  # not KServe's inferenceservices
    for h, n in (("a1b2c3d4", 3), ("b2c3d4e5", 1)):
        for i in range(n):
            pod_cache["chat"].put(pod(f"chat-{h}-{i}", labels=po.ome_pod_labels("chat", h), port=8000 + i))
    prims[OME_KEY].put(po.ome_isvc("chat", stable="a1b2c3d4", canary="b2c3d4e5", phase="Canarying"))
    assert fleet(d) == {"a1b2c3d4": ("stable", 0.75, 3, None), "b2c3d4e5": ("canary", 0.25, 1, None)}
    assert d.states["chat"].canary_weight == pytest.approx(0.25)
    prims[OME_KEY].put(po.ome_isvc("chat", stable="a1b2c3d4", canary="b2c3d4e5", phase="RolledBack"))
    assert fleet(d)["b2c3d4e5"][:2] == ("other", None)
    assert d.states["chat"].canary_weight is None and d.states["chat"].stale_revision_pods == 1


def test_dynamo_through_discovery_a_missing_dgd_is_a_dangling_ref_and_no_version() -> None:
    d, pod_cache, prims = discovery([{"name": "agg", "selector": {"nvidia.com/dynamo-component-type": "worker"},
                                      "primitive": {"kind": "dynamo", "name": "vllm-agg"}, "port": 8000}])
    pod_cache["agg"].put(pod("w-0", labels=po.dynamo_pod_labels("0a1b2c3d"), port=8000))
    assert fleet(d) == {}
    assert problems(d, "agg") == {"dangling_ref": 1}
    prims[DGD_KEY].put(po.dgd("vllm-agg", current="0a1b2c3d", phase="InProgress"))
    pod_cache["agg"].put(pod("w-1", labels=po.dynamo_pod_labels("9f8e7d6c"), port=8001,
                             start_time="2026-12-02T00:00:00Z"))
    assert fleet(d) == {"0a1b2c3d": ("stable", 0.5, 1, None), "9f8e7d6c": ("canary", 0.5, 1, None)}


def test_a_status_read_before_the_pods_are_listed_waits_and_counts_nothing() -> None:
    d, pod_cache, prims = discovery([{"name": "chat", "selector": {"ome.io/inferenceservice": "chat"},
                                      "primitive": {"kind": "ome", "name": "chat"}, "port": 8000}])
    prims[OME_KEY].put(po.ome_isvc("chat", stable="a1b2c3d4", canary="b2c3d4e5", phase="Canarying"))
    pod_cache["chat"].synced = False
    assert fleet(d) == {} and problems(d, "chat") == {}
    pod_cache["chat"].synced = True
    pod_cache["chat"].put(pod("chat-0", labels=po.ome_pod_labels("chat", "a1b2c3d4"), port=8000))
    assert fleet(d) == {"a1b2c3d4": ("stable", None, 1, None)}
    assert problems(d, "chat") == {"revision_without_pods": 1}  # the canary's pods: none, once listed
