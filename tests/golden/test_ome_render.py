"""`observer render ome` (observer/render/ome.py): the RolloutPolicy validates against OME's CRD with unknown
fields refused, every canary step reads the verdict of OME's pair, and each OME model's version prefix is in
its policy's query (the version names discovery gives are prefix + revision hash)."""

from __future__ import annotations

from typing import Any

from observer.config import parse_config
from observer.render import ome as ome_render
from tests.support.reference import crd_validator

CRD = "rollout-primitives/crd-ome-rolloutpolicies.yaml"


def problems(obj: dict[str, Any]) -> list[str]:
    v = crd_validator(CRD, "v1beta1")
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(obj)]


def test_the_rendered_policy_validates_and_gates_every_canary_step_on_the_verdict() -> None:
    config = parse_config("canary: {prometheus: {headers: {X-Scope-OrgID: llm}}}\n", environ={})
    [policy] = ome_render.policies(config)
    assert problems(policy) == []
    steps = policy["spec"]["canary"]["steps"]
    assert [s["capacity"] for s in steps] == ["5%", "25%", "50%", "100%"]
    for s in steps[:-1]:
        [check] = s["analysis"]["metrics"]
        assert check["query"] == ('max(observer_canary_verdict{canary="{{.CanaryRevision}}",'
                                  'baseline="{{.StableRevision}}"}) != 0')
        assert (check["operator"], check["threshold"], s["analysis"]["failureLimit"]) == ("GT", "0", 1)
        assert s["analysis"]["onInconclusive"] == "Hold" and s["traffic"] == int(s["capacity"][:-1])
    assert "analysis" not in steps[-1]
    assert policy["spec"]["canary"]["prometheus"]["headers"] == {"X-Scope-OrgID": "llm"}
    bad = ome_render.rollout_policy(config)
    bad["spec"]["canary"]["steps"][0]["analysis"]["failureLimits"] = 2
    assert any("failureLimits" in p for p in problems(bad))


def test_each_ome_models_version_prefix_gets_its_own_policy() -> None:
    config = parse_config("""
discovery:
  kubernetes:
    dcgm: null
    models:
      - {name: chat, selector: {app: chat}, primitive: {kind: ome, name: chat}}
      - {name: code, selector: {app: code}, version_prefix: code-, primitive: {kind: ome, name: code}}
      - {name: llm, selector: {app: llm}, rollout: llm}
canary: {step_seconds: 1200}
""", environ={})
    by_name = {p["metadata"]["name"]: p for p in ome_render.policies(config)}
    assert set(by_name) == {"observer-canary-gate", "observer-canary-gate-code"}
    code = by_name["observer-canary-gate-code"]["spec"]["canary"]["steps"][0]
    assert 'canary="code-{{.CanaryRevision}}",baseline="code-{{.StableRevision}}"' in \
        code["analysis"]["metrics"][0]["query"]
    assert code["pause"] == {"duration": "20m"}
    assert all(problems(p) == [] for p in by_name.values())
