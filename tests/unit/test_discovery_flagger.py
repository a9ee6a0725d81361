"""The Flagger row's reader (observer/discover/canaries.py): a Canary's primary and target, told apart on the pods
by the selector label Flagger rewrites to `<value>-primary`; the Canary says which is the canary and its weight.
Objects validate against Flagger's Canary CRD (v1.44); through discovery's recompute too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from observer.discover.canaries import flagger_plan
from observer.discover.model import PodInfo
from observer.discover.plan import Plan
from observer_dev import primitive_objects as po
from observer_dev.kubeapi import pod
from tests.support.reference import crd_validator
from tests.unit.test_discovery_primitive_publish import discovery, fleet, problems

CANARIES = ("flagger.app/v1beta1", "canaries")
ROOT = Path(__file__).resolve().parents[2]


def pods(value: str, *, primary: int, target: int, key: str = "app") -> list[PodInfo]:
    out = [PodInfo.parse(pod(f"{value}-primary-{i}", labels=po.flagger_pod_labels(value, primary=True, key=key),
                             port=8000)) for i in range(primary)]
    return out + [PodInfo.parse(pod(f"{value}-{i}", labels=po.flagger_pod_labels(value, primary=False, key=key),
                                    port=8000)) for i in range(target)]


def members(plan: Plan) -> dict[str, tuple[str, float | None, dict[str, str]]]:
    return {m.identity: (m.role, m.weight, dict(m.pod_labels)) for m in plan.members}


@pytest.mark.parametrize("phase", ["Progressing", "WaitingPromotion"])
def test_while_the_analysis_runs_the_target_is_the_canary_at_the_canarys_weight(phase: str) -> None:
    plan = flagger_plan(po.flagger_canary("llm", phase=phase, weight=10), pods("llm", primary=3, target=1))
    assert members(plan) == {"llm-primary": ("stable", pytest.approx(0.9), {"app": "llm-primary"}),
                             "llm": ("canary", pytest.approx(0.1), {"app": "llm"})}
    assert not plan.problems


@pytest.mark.parametrize(("phase", "applied", "promoted"), [
    ("Succeeded", "5f8fd4f546", "5f8fd4f546"), ("Failed", "5f8fd4f546", "7d9c8b6a54"),
    ("Initialized", "5f8fd4f546", "5f8fd4f546"), ("Promoting", "5f8fd4f546", "7d9c8b6a54"),
    ("Progressing", "5f8fd4f546", "5f8fd4f546"),  # nothing new to analyse: the same spec on both
])
def test_outside_an_analysis_the_primary_takes_all_traffic_and_a_target_pod_left_is_other(
        phase: str, applied: str, promoted: str) -> None:
    plan = flagger_plan(po.flagger_canary("llm", phase=phase, applied=applied, promoted=promoted),
                        pods("llm", primary=2, target=1))
    assert members(plan) == {"llm-primary": ("stable", 1.0, {"app": "llm-primary"}),
                             "llm": ("other", 0.0, {"app": "llm"})}
    no_target = flagger_plan(po.flagger_canary("llm", phase=phase, applied=applied, promoted=promoted),
                             pods("llm", primary=2, target=0))
    assert list(members(no_target)) == ["llm-primary"]  # the target scaled to zero: no version


def test_the_rewritten_label_is_found_among_flaggers_selector_labels_whatever_its_value() -> None:
    # Deployment `llm` whose pods select on app.kubernetes.io/name: chat (not the Deployment's name).
    plan = flagger_plan(po.flagger_canary("llm", phase="Progressing", weight=25),
                        pods("chat", primary=1, target=1, key="app.kubernetes.io/name"))
    assert members(plan) == {"llm-primary": ("stable", 0.75, {"app.kubernetes.io/name": "chat-primary"}),
                             "llm": ("canary", 0.25, {"app.kubernetes.io/name": "chat"})}


def test_faults_are_counted_with_a_line_and_never_a_canary() -> None:
    fresh = po.flagger_canary("llm", phase="Initializing")
    del fresh["status"]["lastAppliedSpec"]
    plan = flagger_plan(fresh, pods("llm", primary=1, target=1))
    assert plan.members == () and plan.problems == {"missing_field": 1}
    assert "status.lastAppliedSpec" in plan.details[0] and "Canary llm" in plan.details[0]
    gone = flagger_plan(po.flagger_canary("llm", phase="Progressing"), pods("llm", primary=0, target=2))
    assert gone.members == () and gone.problems == {"revision_without_pods": 1}
    assert "-primary" in gone.details[0]
    other_api = dict(po.flagger_canary("llm", phase="Progressing"), apiVersion="flagger.app/v1alpha3")
    assert flagger_plan(other_api, pods("llm", primary=1, target=1)).problems == {"unknown_api_version": 1}
    # The example `observer render flagger` ships has no status until Flagger initialises it.
    shipped = yaml.safe_load((ROOT / "deploy/flagger/canary-example.yaml").read_text(encoding="utf-8"))
    assert flagger_plan(shipped, pods("llm", primary=1, target=0)).problems == {"missing_field": 1}


def test_the_builder_makes_a_canary_flaggers_crd_accepts() -> None:
    v = crd_validator("rollout-primitives/crd-flagger-canaries.yaml", "v1beta1")
    for phase in ("Progressing", "Succeeded", "Failed"):
        obj: dict[str, Any] = po.flagger_canary("llm", phase=phase)
        assert not list(v.iter_errors(obj)), phase
    assert list(v.iter_errors(dict(po.flagger_canary("llm", phase="Progressing"), spec={"targetRef": {}})))


def test_through_discovery_names_roles_weights_and_pods_follow_the_canary() -> None:
    d, pod_cache, prims = discovery([{"name": "llm", "selector": {"observer.dev/model": "llm"}, "version_prefix": "",
                                      "primitive": {"kind": "flagger", "name": "llm"}, "port": 8000}])
    assert set(prims) == {CANARIES}
    for i in range(3):
        pod_cache["llm"].put(pod(f"llm-primary-{i}", labels=po.flagger_pod_labels("llm", primary=True),
                                 port=8000 + i))
    pod_cache["llm"].put(pod("llm-0", labels=po.flagger_pod_labels("llm", primary=False), port=8010))
    prims[CANARIES].put(po.flagger_canary("llm", phase="Progressing", weight=20))
    assert fleet(d) == {"llm-primary": ("stable", 0.8, 3, None), "llm": ("canary", 0.2, 1, None)}
    assert d.states["llm"].canary_weight == pytest.approx(0.2)
    prims[CANARIES].put(po.flagger_canary("llm", phase="Failed", weight=0))  # rolled back, target not yet at 0
    assert fleet(d)["llm"][:2] == ("other", 0.0)
    assert d.states["llm"].canary_weight is None and problems(d, "llm") == {}
