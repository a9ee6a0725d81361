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
}
SHIPPED = ROOT / "deploy" / "k8s" / "primitives"


def validator(kind: str, api_version: str) -> jsonschema.Draft7Validator:
    group, version = api_version.split("/")
    crd = yaml.safe_load(reference(DIR + CRDS[kind]).read_text(encoding="utf-8"))
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
    for path in sorted(SHIPPED.glob("*.yaml")):
        if path.name.startswith("observer"):
            continue
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc["kind"] in CRDS:
                kinds.add(doc["kind"])
                assert problems(doc) == [], (path.name, doc["metadata"]["name"])
    assert kinds == set(CRDS), f"an example for every primitive kind: missing {set(CRDS) - kinds}"
    cfg = load_config(SHIPPED / "observer.yaml")
    assert cfg.discovery.kubernetes is not None
    kinds_configured = {m.primitive.kind for m in cfg.discovery.kubernetes.models if m.primitive is not None}
    assert kinds_configured == {"kserve_llmisvc", "kserve_isvc", "httproute_pools", "model_rewrite"}
