"""The short cluster game day: versions discovered from a scripted Argo rollout (and, in the second test, from
KServe, Gateway API and llm-d rollout primitives), two `observer serve` replicas
on PostgreSQL, a real Prometheus the judge reads; one replica SIGKILLed and the other cut from PostgreSQL in
every scenario — and each scenario ends in the single-process game day's verdict class, through the verdict
endpoint and through Flagger's analysis loop."""

from __future__ import annotations

import shutil

import pytest

from observer_dev import pgserver
from observer_dev.gameday.cluster import CLUSTER_SCENARIOS
from observer_dev.gameday.runner import Kind, play
from observer_dev.gameday.scenarios import SCENARIOS

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs the prometheus binary"),
              pytest.mark.skipif(not pgserver.available(), reason="needs PostgreSQL (Debian package postgresql)")]


# 12 scenarios, two replicas and their faults in every one: 525 s on a slow CPU of this kind.
@pytest.mark.timeout(900)
def test_short_cluster_gameday_every_scenario_keeps_its_verdict_class() -> None:
    rows = play(Kind.CLUSTER, short=True, seed=7)
    embedder_based = {s.name for s in SCENARIOS if s.needs == "drift"}  # the full form plays them
    assert [r.scenario for r in rows] == [n for n in CLUSTER_SCENARIOS if n not in embedder_based]
    for row in rows:
        assert row.ok, f"{row.scenario}: {row.detail} (verdicts {row.verdicts})"
        assert any("SIGKILLed" in f for f in row.faults) and any("cut from PostgreSQL" in f for f in row.faults)
        assert "replica-b ready after the partition" in row.faults
        if row.expected not in ("alerts", "drift"):  # Flagger's loop played too, on the survivor's webhooks
            assert row.flagger, f"{row.scenario}: Flagger's loop did not run"


@pytest.mark.timeout(600)  # 8 rollouts: 222 s on a slow CPU of this kind, near the suite's 300 s for one test
def test_short_primitive_gameday_promotes_the_healthy_and_aborts_the_worse() -> None:
    # A rollout through each of KServe's LLMInferenceService, its InferenceService, an HTTPRoute across two
    # InferencePools, llm-d's InferenceModelRewrite (two adapters on the base model's pods, judged on the
    # endpoint picker's per-model series; the base untouched), an OME canary (gated by the rendered
    # RolloutPolicy's check) and a Dynamo worker generation: versions discovered from the objects, the weight
    # moved 5 → 25 → 50 % (OME, Dynamo: the pods' share), the exported roles and weight following the objects at
    # every step, promoted on pass or aborted on fail on the named metric.
    from observer.config.sources import PRIMITIVES
    from observer_dev.gameday.primitive_scenarios import PRIMITIVE_SCENARIOS, SHORT_PRIMITIVE_SCENARIOS

    rows = play(Kind.PRIMITIVES, short=True, seed=7)
    assert [r.scenario for r in rows] == [s.name for s in PRIMITIVE_SCENARIOS if s.name in SHORT_PRIMITIVE_SCENARIOS]
    assert {r.primitive for r in rows} == set(PRIMITIVES)
    for row in rows:
        assert row.ok, f"{row.scenario}: {row.detail} (steps {row.steps})"
        assert row.steps[-1] == ("promoted" if row.expected == "pass" else "aborted")
