"""The HPAs scaling a model's Rollout (observer/discover/autoscaling.py): bounds and counts as the HPA reports
them, KEDA read through its own HPA, other targets ignored, and a missing field counted, never read as 0."""

from __future__ import annotations

from collections import Counter
from typing import Any

from observer.discover.autoscaling import AutoscalerState, autoscaler_states
from observer.discover.model import RolloutInfo


def hpa(name: str, *, kind: str = "Rollout", target: str = "llm", status: dict[str, Any] | None = None,
        **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
            "spec": {"scaleTargetRef": {"apiVersion": "argoproj.io/v1alpha1", "kind": kind, "name": target},
                     **spec},
            **({"status": status} if status is not None else {})}


ROLLOUT = RolloutInfo(name="llm", stable_hash="a", current_hash="b", step_index=0, steps=2, weight=0.2,
                      aborted=False, replicas=4, workload="llm-deploy")


def test_the_hpas_of_the_rollout_with_their_bounds_and_counts() -> None:
    problems: Counter[str] = Counter()
    objs = [
        hpa("llm", minReplicas=2, maxReplicas=8, status={"currentReplicas": 8, "desiredReplicas": 8}),
        hpa("keda-hpa-llm", kind="Deployment", target="llm-deploy", maxReplicas=6,
            status={"currentReplicas": 3, "desiredReplicas": 4}),
        hpa("other", target="another-rollout", maxReplicas=3, status={"currentReplicas": 1, "desiredReplicas": 1}),
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "llm"},
         "spec": {"scaleTargetRef": {"kind": "Rollout", "name": "llm"}, "maxReplicaCount": 6}},
    ]
    got = autoscaler_states(ROLLOUT, objs, problems)
    # KEDA's HPA takes its ScaledObject's floor: 0 when unset (KEDA scales to zero itself).
    assert got == (AutoscalerState("HorizontalPodAutoscaler/keda-hpa-llm", 0, 6, 3, 4, (), 300),
                   AutoscalerState("HorizontalPodAutoscaler/llm", 2, 8, 8, 8, ("cpu",), 300))
    assert got[1].counts() == {"min": 2, "max": 8, "current": 8, "desired": 8}
    assert not problems
    assert autoscaler_states(None, objs, problems) == ()


def test_what_each_autoscaler_scales_on_and_how_long_it_waits_to_scale_down() -> None:
    problems: Counter[str] = Counter()
    metrics = [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization"}}},
               {"type": "Pods", "pods": {"metric": {"name": "vllm_num_requests_waiting"}}},
               {"type": "External", "external": {"metric": {"name": "queue"}}},
               {"type": "ContainerResource", "containerResource": {"name": "memory", "container": "vllm"}}]
    (state,) = autoscaler_states(ROLLOUT, [hpa("llm", maxReplicas=4, metrics=metrics,
                                               behavior={"scaleDown": {"stabilizationWindowSeconds": 60}})], problems)
    assert state.signals == ("cpu", "pods:vllm_num_requests_waiting", "external:queue", "memory")
    assert state.scale_down_stabilization == 60 and not state.resource_only
    (cpu,) = autoscaler_states(ROLLOUT, [hpa("llm", maxReplicas=4, metrics=metrics[:1])], problems)
    assert cpu.resource_only and cpu.scale_down_stabilization == 300  # Kubernetes' default wait
    assert autoscaler_states(ROLLOUT, [hpa("llm", maxReplicas=4)], problems)[0].signals == ("cpu",)  # v2 default
    many = [{"type": "Pods", "pods": {"metric": {"name": f"m{i}" + "x" * 80}}} for i in range(12)]
    (capped,) = autoscaler_states(ROLLOUT, [hpa("llm", maxReplicas=4, metrics=many)], problems)
    assert len(capped.signals) == 8 and all(len(s) <= 64 for s in capped.signals)


def test_keda_triggers_and_floor_come_from_the_scaled_object() -> None:
    problems: Counter[str] = Counter()

    def scaled(name: str, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": name},
                "spec": {"scaleTargetRef": {"name": "llm-deploy"}, **spec}}  # kind defaults to Deployment

    objs = [scaled("llm", minReplicaCount=1, triggers=[{"type": "prometheus", "metadata": {}}, {"type": "cpu"}]),
            hpa("keda-hpa-llm", kind="Deployment", target="llm-deploy", minReplicas=1, maxReplicas=6,
                metrics=[{"type": "External", "external": {"metric": {"name": "s0-prometheus"}}}])]
    (state,) = autoscaler_states(ROLLOUT, objs, problems)
    assert (state.signals, state.min_replicas) == (("keda:prometheus", "keda:cpu"), 1)
    # An HPA named in advanced.horizontalPodAutoscalerConfig; a ScaledObject without a floor scales to zero.
    objs = [scaled("llm", advanced={"horizontalPodAutoscalerConfig": {"name": "llm-hpa"}},
                   triggers=[{"type": "prometheus"}]),
            hpa("llm-hpa", kind="Deployment", target="llm-deploy", minReplicas=1, maxReplicas=6)]
    (state,) = autoscaler_states(ROLLOUT, objs, problems)
    assert (state.name, state.signals, state.min_replicas) == ("HorizontalPodAutoscaler/llm-hpa",
                                                               ("keda:prometheus",), 0)


def test_an_hpa_without_status_or_bounds_is_counted_and_its_counts_absent() -> None:
    problems: Counter[str] = Counter()
    (fresh,) = autoscaler_states(ROLLOUT, [hpa("llm", maxReplicas=4)], problems)
    assert fresh.counts() == {"min": 1, "max": 4} and problems == Counter({"autoscaler_no_status": 1})
    problems.clear()
    (bad,) = autoscaler_states(ROLLOUT, [hpa("llm", maxReplicas="many", status={"currentReplicas": 2,
                                                                                "desiredReplicas": -1})], problems)
    assert bad.counts() == {"min": 1, "current": 2}
    assert problems == Counter({"autoscaler_missing_field": 1, "autoscaler_no_status": 1})


def test_a_promotion_opens_the_rollback_window_and_counts_the_previous_versions_pods() -> None:
    from observer.discover.model import PodInfo
    from observer.discover.rollback import RollbackWindows
    from observer_dev.kubeapi import pod, rollout

    now = [1000.0]
    windows = RollbackWindows(lambda: now[0])
    obj = rollout("llm", steps=[{"setWeight": 20}], stable="aaa", current="bbb", step=0)
    obj["spec"]["strategy"]["canary"]["trafficRouting"] = {"nginx": {"stableIngress": "llm"}}
    assert RolloutInfo.parse(obj).scale_down_delay == 30  # Argo's default with traffic routing
    obj["spec"]["strategy"]["canary"]["scaleDownDelaySeconds"] = 600
    old = [PodInfo.parse(pod(f"llm-aaa-{i}", labels={"app": "llm", "rollouts-pod-template-hash": "aaa"}, port=1))
           for i in range(2)]
    label = "rollouts-pod-template-hash"
    assert windows.observe("llm", RolloutInfo.parse(obj), old, label) == 0  # first sight: no promotion seen
    obj["status"].update(stableRS="bbb", currentPodHash="bbb")
    promoted = RolloutInfo.parse(obj)
    assert windows.observe("llm", promoted, old, label, "m-") == 2
    w = windows.open("llm")
    assert w is not None and (w.version, w.pods, w.delay) == ("m-aaa", 2, 600.0)
    now[0] += 300
    assert windows.observe("llm", promoted, old[:1], label) == 1
    assert windows.observe("llm", promoted, [], label) == 0 and windows.windows["llm"].pods == 0  # scaled away
    now[0] += 301
    assert windows.open("llm") is None and windows.observe("llm", promoted, old, label) == 0  # window over
    basic = rollout("llm", steps=[{"setWeight": 20}], stable="aaa", current="bbb", step=0)
    assert RolloutInfo.parse(basic).scale_down_delay is None  # a basic canary scales the old pods by step
