"""The rollout-primitive readers (observer/discover/primitives.py) on the objects upstream published: KServe's
canary guides and status examples, the Inference Extension's weighted two-pool conformance test, llm-d's
blue-green and LoRA examples (../shared/reference/rollout-primitives/, SOURCES.md there). Where a published
file is a fragment (a status block), it is put into its object as the controller would."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from observer.discover.plan import Plan
from observer.discover.primitives import (
    httproute_plan,
    isvc_plan,
    llmisvc_plan,
    pool_selector,
    rewrite_plan,
)
from tests.support.reference import reference

DIR = "rollout-primitives/"


def published(name: str) -> Any:
    return yaml.safe_load(reference(DIR + name).read_text(encoding="utf-8"))


def view(plan: Plan) -> dict[str, tuple[str, float | None]]:
    return {m.identity: (m.role, None if m.weight is None else round(m.weight, 6)) for m in plan.members}


def _with_status(obj: dict[str, Any], group: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["status"] = {"router": {"group": group}}
    return out


# --- KServe LLMInferenceService -------------------------------------------------------------------------------

def test_llmisvc_group_from_the_canary_guide_specs() -> None:
    v1, v2 = published("kserve-llmisvc-canary-v1.yaml"), published("kserve-llmisvc-canary-v2.yaml")
    plan = llmisvc_plan("my-model", [v1, v2])
    assert view(plan) == {"my-model-v1": ("stable", 0.9), "my-model-v2": ("canary", 0.1)}
    assert not plan.problems
    assert plan.member("my-model-v2").pod_labels == {  # type: ignore[union-attr]
        "app.kubernetes.io/name": "my-model-v2", "kserve.io/component": "workload"}


def test_llmisvc_pod_labels_match_the_published_workload_pod_and_pool_template() -> None:
    pod = published("kserve-llmisvc-workload-pod-labels.TRANSCRIBED.yaml")
    plan = llmisvc_plan("g", [{"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
                               "metadata": {"name": "qwen-instruct"},
                               "spec": {"router": {"route": {"group": "g", "weight": 1}}}}])
    labels = plan.members[0].pod_labels
    assert labels.items() <= pod["metadata"]["labels"].items()
    template = reference(DIR + "kserve-llmisvcconfig-scheduler-inferencepool-template.yaml").read_text()
    for key in labels:
        assert key in template  # the controller's own pool selects the workload pods by the same keys


def test_llmisvc_status_wins_over_specs_and_promotion_keeps_identity() -> None:
    v1, v2 = published("kserve-llmisvc-canary-v1.yaml"), published("kserve-llmisvc-canary-v2.yaml")
    step2 = published("kserve-llmisvc-canary-group-status-step2.yaml")
    plan = llmisvc_plan("my-model", [_with_status(v1, step2), _with_status(v2, step2)])
    assert view(plan) == {"my-model-v1": ("stable", 0.9), "my-model-v2": ("canary", 0.1)}
    # Step 5: v2 promoted to weight 9, v1 stopped. v2 keeps its identity (its windows) and becomes stable.
    promoted = published("kserve-llmisvc-canary-group-status-step5-promoted.yaml")
    v2_promoted = copy.deepcopy(v2)
    v2_promoted["spec"]["router"]["route"]["weight"] = 9
    plan = llmisvc_plan("my-model", [_with_status(v1, promoted), _with_status(v2_promoted, promoted)])
    assert view(plan) == {"my-model-v1": ("other", 0.0), "my-model-v2": ("stable", 1.0)}


def test_llmisvc_status_block_with_pool_backend_refs() -> None:
    status = published("kserve-llmisvc-status-router-group.yaml")["status"]
    v1, v2 = published("kserve-llmisvc-canary-v1.yaml"), published("kserve-llmisvc-canary-v2.yaml")
    objs = []
    for obj in (v1, v2):
        o = copy.deepcopy(obj)
        o["status"] = status
        objs.append(o)
    assert view(llmisvc_plan("my-model", objs)) == {"my-model-v1": ("stable", 0.9), "my-model-v2": ("canary", 0.1)}
    # A member the status names but that does not exist is a named problem.
    plan = llmisvc_plan("my-model", objs[:1])
    assert plan.problems == {"dangling_ref": 1} and "my-model-v2" in plan.details[0]


def test_llmisvc_ages_decide_roles_at_equal_weights() -> None:
    v1, v2 = published("kserve-llmisvc-canary-v1.yaml"), published("kserve-llmisvc-canary-v2.yaml")
    v1, v2 = copy.deepcopy(v1), copy.deepcopy(v2)
    v1["metadata"]["creationTimestamp"] = "2026-11-01T10:00:00Z"
    v2["metadata"]["creationTimestamp"] = "2026-12-01T10:00:00Z"
    v1["spec"]["router"]["route"]["weight"] = v2["spec"]["router"]["route"]["weight"] = 5
    # Listed newest first, as an API server may: the older service is still stable at 50/50.
    assert view(llmisvc_plan("my-model", [v2, v1])) == {"my-model-v2": ("canary", 0.5), "my-model-v1": ("stable", 0.5)}


def test_llmisvc_bad_input_is_named() -> None:
    v1 = published("kserve-llmisvc-canary-v1.yaml")
    future = copy.deepcopy(v1)
    future["apiVersion"] = "serving.kserve.io/v9"
    assert llmisvc_plan("my-model", [future]).problems == {"unknown_api_version": 1}
    unweighted = copy.deepcopy(v1)
    del unweighted["spec"]["router"]["route"]["weight"]
    plan = llmisvc_plan("my-model", [unweighted])
    assert plan.problems == {"missing_field": 1} and "spec.router.route.weight" in plan.details[0]
    zero = copy.deepcopy(v1)
    zero["spec"]["router"]["route"]["weight"] = 0
    assert llmisvc_plan("my-model", [zero]).problems == {"weights_zero": 1}
    assert llmisvc_plan("other-group", [v1]).problems == {"no_members": 1}


# --- KServe InferenceService -----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec_file,status_file,stable,canary", [
    ("kserve-isvc-canary-10pct.yaml", "kserve-isvc-canary-status-components-predictor.yaml",
     "sklearn-iris-predictor-default-00001", "sklearn-iris-predictor-default-00003"),
    ("kserve-isvc-rollout-sample-canary.yaml", "kserve-isvc-rollout-readme-status-components-predictor.yaml",
     "my-model-predictor-default-00001", "my-model-predictor-default-00003"),
])
def test_isvc_revisions_from_the_published_status(spec_file: str, status_file: str, stable: str,
                                                  canary: str) -> None:
    obj = copy.deepcopy(published(spec_file))
    obj["status"] = {"components": {"predictor": published(status_file)}}
    plan = isvc_plan(obj)
    assert view(plan) == {stable: ("stable", 0.9), canary: ("canary", 0.1)}
    assert plan.member(canary).pod_labels == {"serving.knative.dev/revision": canary}  # type: ignore[union-attr]
    assert not plan.problems


def test_isvc_pinned_to_zero_and_not_reconciled() -> None:
    obj = copy.deepcopy(published("kserve-isvc-canary-pinned-0pct.yaml"))
    plan = isvc_plan(obj)
    assert plan.members == () and plan.problems == {"missing_field": 1}  # no status yet: nothing to judge
    status = published("kserve-isvc-canary-status-components-predictor.yaml")
    status = copy.deepcopy(status)
    status["traffic"][0]["percent"], status["traffic"][1]["percent"] = 100, 0
    obj["status"] = {"components": {"predictor": status}}
    assert view(isvc_plan(obj)) == {"sklearn-iris-predictor-default-00001": ("stable", 1.0),
                                    "sklearn-iris-predictor-default-00003": ("other", 0.0)}


# --- HTTPRoute across InferencePools -----------------------------------------------------------------------------

def test_the_weighted_two_pool_conformance_route() -> None:
    route = published("gie-conformance-httproute-weighted-two-pools.yaml")
    pools = [published("gie-conformance-inferencepool-primary.yaml"),
             published("gie-conformance-inferencepool-secondary.yaml")]
    plan = httproute_plan(route, pools)
    assert view(plan) == {"primary-inference-pool": ("stable", 0.7), "secondary-inference-pool": ("canary", 0.3)}
    assert plan.member("secondary-inference-pool").pod_labels == {  # type: ignore[union-attr]
        "app": "secondary-inference-model-server"}
    assert not plan.problems


def test_the_llmd_blue_green_route_names_pools_that_must_exist() -> None:
    route = published("llmd-httproute-blue-green-two-inferencepools-90-10.yaml")
    plan = httproute_plan(route, [])
    assert plan.members == () and plan.problems == {"dangling_ref": 2}
    pools = [_pool("vllm-qwen3-32b", "2026-11-01T00:00:00Z"), _pool("vllm-qwen3-32b-new", "2026-12-01T00:00:00Z")]
    assert view(httproute_plan(route, pools)) == {"vllm-qwen3-32b": ("stable", 0.9),
                                                  "vllm-qwen3-32b-new": ("canary", 0.1)}
    # At 50/50 the older pool stays stable; at 0/100 the new one is the only stable and the old one `other`.
    for weights, want in (((50, 50), ("stable", "canary")), ((0, 100), ("other", "stable"))):
        moved = copy.deepcopy(route)
        for ref, w in zip(moved["spec"]["rules"][0]["backendRefs"], weights, strict=True):
            ref["weight"] = w
        got = view(httproute_plan(moved, list(reversed(pools))))
        assert (got["vllm-qwen3-32b"][0], got["vllm-qwen3-32b-new"][0]) == want


def _pool(name: str, created: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"selector": {"matchLabels": labels or {"app": name}}, "targetPorts": [{"number": 8000}],
                     "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}}}}


def test_pool_selectors_of_both_api_versions() -> None:
    assert pool_selector(published("gie-conformance-inferencepool-primary.yaml")) == {
        "app": "primary-inference-model-server"}
    assert pool_selector({"spec": {"selector": {"app": "x"}}}) == {"app": "x"}  # v1alpha2's plain map
    assert pool_selector({"spec": {}}) is None


# --- InferenceModelRewrite --------------------------------------------------------------------------------------

def test_the_lora_canary_rewrite_splits_one_model_name_on_shared_pods() -> None:
    rewrite = published("llmd-inferencemodelrewrite-lora-canary-90-10.yaml")  # the older API group
    pool = _pool("vllm-qwen3-32b", "2026-11-01T00:00:00Z", {"app": "vllm-qwen3-32b"})
    plan = rewrite_plan(rewrite, "small-segment-lora", [pool])
    assert view(plan) == {"small-segment-lora-v1": ("stable", 0.9), "small-segment-lora-v2": ("canary", 0.1)}
    assert {m.model for m in plan.members} == {"small-segment-lora-v1", "small-segment-lora-v2"}
    assert {tuple(m.pod_labels.items()) for m in plan.members} == {(("app", "vllm-qwen3-32b"),)}  # shared
    assert rewrite_plan(rewrite, "another-model", [pool]).problems == {"no_members": 1}


def test_the_router_testdata_rewrite_has_one_unweighted_target() -> None:
    rewrite = published("llmd-router-inferencemodelrewrite-testdata-unweighted.yaml")  # llm-d.ai/v1alpha2
    pool = _pool("vllm-qwen3-32b-pool", "2026-11-01T00:00:00Z")
    assert view(rewrite_plan(rewrite, "model-to-be-rewritten", [pool])) == {"rewritten-model": ("stable", 1.0)}
    assert rewrite_plan(rewrite, "model-to-be-rewritten", []).problems == {"dangling_ref": 1}


def test_rewrite_weights_on_some_targets_only_are_named() -> None:
    rewrite = copy.deepcopy(published("llmd-inferencemodelrewrite-lora-canary-90-10.yaml"))
    del rewrite["spec"]["rules"][0]["targets"][1]["weight"]
    plan = rewrite_plan(rewrite, "small-segment-lora", [_pool("vllm-qwen3-32b", "2026-11-01T00:00:00Z")])
    assert plan.problems == {"missing_field": 1} and "some targets only" in plan.details[0]
