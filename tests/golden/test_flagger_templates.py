"""deploy/flagger/*.yaml: generated from deploy/observer.yaml, committed, and valid against Flagger v1.44's CRDs
(../shared/reference/rollout-primitives/) with unknown fields rejected; their queries are the Argo templates'
with Flagger's template variables, and they catch only a failure (the gate is the confirm-promotion webhook)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from observer.config import load_config
from observer.render import argo, flagger, writer
from tests.support.reference import crd_validator

ROOT = Path(__file__).resolve().parents[2]
CRDS = {"Canary": "crd-flagger-canaries.yaml", "MetricTemplate": "crd-flagger-metrictemplates.yaml"}


def validator(kind: str) -> jsonschema.Draft7Validator:
    return crd_validator("rollout-primitives/" + CRDS[kind], "v1beta1")


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return flagger.render(load_config(ROOT / "deploy" / "observer.yaml"))


def test_committed_files_equal_render(rendered: dict[str, str]) -> None:
    for rel, text in rendered.items():
        assert (ROOT / rel).read_text(encoding="utf-8") == writer.with_header(rel, text), \
            f"{rel} is stale: run `observer render flagger`"


def test_every_object_validates_strictly_against_flaggers_crds(rendered: dict[str, str]) -> None:
    docs = [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]
    assert {d["kind"] for d in docs} == {"Canary", "MetricTemplate"}
    for d in docs:
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(d["kind"]).iter_errors(d)]
        assert errors == [], (d["kind"], d["metadata"]["name"])


def test_the_canary_references_what_is_rendered_and_gates_promotion_with_the_webhook(rendered: dict[str, str]) -> None:
    templates = {d["metadata"]["name"]: d for d in yaml.safe_load_all(rendered["deploy/flagger/metric-templates.yaml"])}
    canary: dict[str, Any] = yaml.safe_load(rendered["deploy/flagger/canary-example.yaml"])
    analysis = canary["spec"]["analysis"]
    for m in analysis["metrics"]:
        assert m["templateRef"]["name"] in templates
        assert m["templateVariables"] == {"canary": "llm", "baseline": "llm-primary"}
    hooks = {h["type"]: h for h in analysis["webhooks"]}
    assert set(hooks) == {"confirm-promotion", "rollback", "rollout"}
    assert hooks["confirm-promotion"]["url"].endswith("/api/v1/flagger/confirm-promotion")
    # The planned end: 5 % steps to 50 % every minute reach maxWeight, where confirm-promotion decides, at 600 s.
    assert hooks["confirm-promotion"]["metadata"] == {"canary": "llm", "baseline": "llm-primary",
                                                      "step_seconds": "600"}
    # The verdict's range fails only at -1: inconclusive (0) and an absent series (`or vector(0)`) are not
    # failures that roll a healthy canary back, and nothing but the webhook promotes.
    verdict = next(m for m in analysis["metrics"] if m["name"] == "verdict")
    assert verdict["thresholdRange"] == {"min": 0}
    assert templates["observer-verdict"]["spec"]["query"].endswith(" or vector(0)")


def test_queries_are_the_argo_queries_with_flaggers_variables() -> None:
    config = load_config(ROOT / "deploy" / "observer.yaml")
    argo_queries = {m.name: m.query for m in argo.prometheus_metrics(config)}
    for t in flagger.metric_templates(config):
        name = t["metadata"]["name"].removeprefix("observer-")
        q = t["spec"]["query"]
        assert "{{args." not in q and "{{ variables.canary }}" in q
        assert q == "(" + argo_queries[name].replace("{{args.canary}}", "{{ variables.canary }}").replace(
            "{{args.baseline}}", "{{ variables.baseline }}") + ") or vector(0)"
