"""The rollout-primitive objects the project builds (observer_dev/primitive_objects.py: the scripted API's, the
tests' and the benches') and ships (deploy/k8s/primitives/) validate against the upstream CRDs in
../shared/reference/rollout-primitives/, with unknown fields rejected; so do the published objects the readers'
unit tests use (a check that the reference files are what SOURCES.md says)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from observer.config import load_config
from observer.config.sources import PRIMITIVES
from observer.render import ome as ome_render
from observer_dev import primitive_objects as po
from tests.support.reference import crd_validator, reference

ROOT = Path(__file__).resolve().parents[2]
DIR = "rollout-primitives/"
CRDS = {
    "LLMInferenceService": "crd-kserve-llminferenceservices.yaml",
    "InferenceService": "crd-kserve-inferenceservices.yaml",
    "HTTPRoute": "crd-gateway-api-httproutes-standard.yaml",
    "InferencePool": "crd-gie-inferencepools-v1.yaml",
    "InferenceModelRewrite": "crd-llmd-inferencemodelrewrites.yaml",
    "Canary": "crd-flagger-canaries.yaml",
}
SHIPPED = ROOT / "deploy" / "k8s" / "primitives"


def validator(kind: str, api_version: str) -> jsonschema.Draft7Validator:
    group, version = api_version.split("/")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the CRDs are large
    crd = yaml.load(reference(DIR + CRDS[kind]).read_text(encoding="utf-8"), Loader=loader)
    assert crd["spec"]["group"] == group, (kind, api_version)
    return crd_validator(DIR + CRDS[kind], version)


def problems(obj: dict[str, Any]) -> list[str]:
    v = validator(obj["kind"], obj["apiVersion"])
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(obj)]


BUILT = {
    "llmisvc": po.llmisvc("my-model-v2", group="my-model", weight=1, created="2026-12-01T00:00:00Z",
                          members={"my-model-v1": 9, "my-model-v2": 1}, stopped=("my-model-v1",)),
    "isvc": po.isvc("llm", stable="llm-predictor-00001", latest="llm-predictor-00002", canary_percent=25),
    "pool": po.inference_pool("llm-v2", labels={"app": "llm-v2"}, created="2026-12-01T00:00:00Z"),
    "route": po.httproute("llm", pools={"llm-v1": 75, "llm-v2": 25}),
    "rewrite": po.model_rewrite("lora", model="lora", pool="llm", targets={"lora-v1": 95, "lora-v2": 5}),
    "flagger": po.flagger_canary("llm", phase="Progressing", weight=25),
}


@pytest.mark.parametrize("name", sorted(BUILT))
def test_every_builder_makes_an_object_the_crd_accepts(name: str) -> None:
    assert problems(BUILT[name]) == []


def test_the_strict_check_refuses_a_field_the_crd_does_not_have() -> None:
    bad = po.httproute("llm", pools={"a": 1})
    bad["spec"]["rules"][0]["backendRefs"][0]["weigth"] = 3
    assert any("weigth" in p for p in problems(bad))


@pytest.mark.parametrize("file", [
    "kserve-llmisvc-canary-v1.yaml", "kserve-llmisvc-canary-v2.yaml", "kserve-isvc-canary-10pct.yaml",
    "gie-conformance-httproute-weighted-two-pools.yaml", "gie-conformance-inferencepool-primary.yaml",
    "llmd-httproute-blue-green-two-inferencepools-90-10.yaml",
    "llmd-router-inferencemodelrewrite-testdata-unweighted.yaml",
])
def test_the_published_objects_validate(file: str) -> None:
    assert problems(yaml.safe_load(reference(DIR + file).read_text(encoding="utf-8"))) == []


def test_every_shipped_primitive_example_validates_and_the_observer_config_beside_it_loads() -> None:
    kinds = set()
    dgd = crd_validator(DIR + "crd-dynamo-dynamographdeployments.yaml", "v1beta1")
    ome_crd = yaml.safe_load(reference(DIR + "crd-ome-inferenceservices-minimal.yaml").read_text(encoding="utf-8"))
    for path in sorted(SHIPPED.glob("*.yaml")):
        if path.name.startswith("observer"):
            continue
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not doc:
                continue
            group = doc["apiVersion"].split("/")[0]
            if group == "ome.io":  # OME's full CRD is not copied; the minimal one is schema-less (SOURCES.md 6)
                kinds.add("ome")
                assert (doc["kind"], doc["apiVersion"]) == (ome_crd["spec"]["names"]["kind"],
                                                           f"ome.io/{ome_crd['spec']['versions'][0]['name']}")
                [group_spec] = doc["spec"]["rollout"]["groups"]
                assert group_spec["policyRef"]["name"] == ome_render.NAME  # what `observer render ome` writes
            elif doc["kind"] == "DynamoGraphDeployment":
                kinds.add("dynamo")
                assert [e.message for e in dgd.iter_errors(doc)] == [], path.name
            elif doc["kind"] in CRDS:
                kinds.add(doc["kind"])
                assert problems(doc) == [], (path.name, doc["metadata"]["name"])
    assert kinds == {*CRDS, "ome", "dynamo"}, f"an example for every source: missing {set(CRDS) - kinds}"
    cfg = load_config(SHIPPED / "observer.yaml")
    assert cfg.discovery.kubernetes is not None
    kinds_configured = {m.primitive.kind for m in cfg.discovery.kubernetes.models if m.primitive is not None}
    assert kinds_configured == set(PRIMITIVES)


def _rollout_policy(canary: dict[str, Any]) -> list[str]:
    """OME's InferenceService CRD is schema-less in the copy there is; its `spec.rollout.groups[].canary` is the
    RolloutPolicy's `spec.canary` type (SOURCES.md section 6), checked strictly there."""
    v = crd_validator(DIR + "crd-ome-rolloutpolicies.yaml", "v1beta1")
    obj = {"apiVersion": "ome.io/v1beta1", "kind": "RolloutPolicy", "metadata": {"name": "x"},
           "spec": {"canary": canary}}
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(obj)]


def test_the_ome_builder_and_the_published_ome_service_have_canaries_omes_crd_accepts() -> None:
    built = po.ome_isvc("chat", stable="a1b2c3d4", canary="b2c3d4e5", phase="Canarying")
    published = yaml.safe_load(reference(DIR + "ome-isvc-canary-analysis-error-rate.yaml").read_text())
    for obj in (built, published):
        assert obj["apiVersion"] == "ome.io/v1beta1" and obj["kind"] == "InferenceService"
        assert _rollout_policy(obj["spec"]["rollout"]["groups"][0]["canary"]) == []
    bad = po.ome_isvc("chat", stable="a", canary="b", phase="Canarying")["spec"]["rollout"]["groups"][0]["canary"]
    bad["steps"][0]["analysis"]["failureLimits"] = 3
    assert any("failureLimits" in p for p in _rollout_policy(bad))


def test_the_dynamo_builder_makes_a_graph_deployment_the_crd_accepts() -> None:
    v = crd_validator(DIR + "crd-dynamo-dynamographdeployments.yaml", "v1beta1")
    for obj in (po.dgd("vllm-agg", current="0a1b2c3d", phase="InProgress"),
                yaml.safe_load(reference(DIR + "dynamo-dgd-vllm-disagg-v1beta1.yaml").read_text())):
        assert [e.message for e in v.iter_errors(obj)] == []
    bad = po.dgd("vllm-agg", current="0a1b2c3d")
    bad["spec"]["components"][1]["replica"] = 2
    assert list(v.iter_errors(bad))
