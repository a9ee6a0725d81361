"""Pods and Rollouts → versions: identity, roles, weights, caps, the DCGM join, bad objects."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from observer.config.discovery import KubernetesDiscovery, ModelDiscovery
from observer.discover.model import PodInfo, RolloutInfo, autoscaler_conflicts, dcgm_by_node, model_state
from observer_dev.kubeapi import pod, rollout

STEPS: list[dict[str, Any]] = [{"setWeight": 5}, {"pause": {}}, {"setWeight": 25}, {"pause": {}},
                               {"setWeight": 50}, {"pause": {}}]
M = ModelDiscovery(name="llm", selector={"app": "llm"}, rollout="llm")
SPEC = KubernetesDiscovery(models=[M], max_pods_per_version=3, max_versions_per_model=3)


def _pods(hash_: str, n: int, *, start: int = 0, **kw: Any) -> list[PodInfo]:
    return [PodInfo.parse(pod(f"llm-{hash_}-{i}", labels={"app": "llm", "rollouts-pod-template-hash": hash_},
                              port=8000 + i, **kw)) for i in range(start, start + n)]


def _state(pods: list[PodInfo], ro: dict[str, Any] | None, problems: Counter[str] | None = None,
           dcgm: dict[str, list[str]] | None = None) -> Any:
    return model_state(SPEC, M, pods, RolloutInfo.parse(ro) if ro else None, dcgm or {},
                       problems if problems is not None else Counter())


@pytest.mark.parametrize(("step", "weight"), [(0, 0.05), (1, 0.05), (2, 0.25), (3, 0.25), (5, 0.5), (6, 1.0)])
def test_the_canary_weight_is_the_last_set_weight_at_or_before_the_current_step(step: int, weight: float) -> None:
    r = RolloutInfo.parse(rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=step))
    assert r.weight == pytest.approx(weight)


def test_no_canary_in_progress_has_no_weight_and_an_abort_has_weight_zero() -> None:
    assert RolloutInfo.parse(rollout("llm", steps=STEPS, stable="aaa", current="aaa", step=6)).weight is None
    assert RolloutInfo.parse(rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=2,
                                     aborted=True)).weight == 0.0


def test_argo_routed_weight_wins_over_the_step() -> None:
    obj = rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=2)
    obj["status"]["canary"] = {"weights": {"canary": {"weight": 7}}}
    assert RolloutInfo.parse(obj).weight == pytest.approx(0.07)


def test_roles_and_weights_follow_the_rollout_status_and_promotion_keeps_the_identity() -> None:
    pods = _pods("aaa", 2) + _pods("bbb", 1, start=2)
    during = _state(pods, rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=2))
    by = {v.name: v for v in during.versions}
    assert {n: v.role for n, v in by.items()} == {"aaa": "stable", "bbb": "canary"}
    assert by["bbb"].expected_traffic_weight == pytest.approx(0.25)
    assert by["aaa"].expected_traffic_weight == pytest.approx(0.75)
    assert by["aaa"].vllm == ["http://127.0.0.1:8000/metrics", "http://127.0.0.1:8001/metrics"]
    assert during.canary_replica_share == pytest.approx(1 / 3)
    after = _state(pods, rollout("llm", steps=STEPS, stable="bbb", current="bbb", step=6))
    roles = {v.name: v.role for v in after.versions}
    assert roles == {"bbb": "stable", "aaa": "other"}   # same name: windows and counters kept
    assert after.stale_revision_pods == 2                      # old revision still serving
    assert all(v.expected_traffic_weight is None for v in after.versions)


def test_without_a_rollout_roles_come_from_the_role_label() -> None:
    pods = [PodInfo.parse(pod("p1", labels={"app": "llm", "rollouts-pod-template-hash": "aaa",
                                            "observer.dev/role": "stable"}, port=1)),
            PodInfo.parse(pod("p2", labels={"app": "llm", "rollouts-pod-template-hash": "bbb",
                                            "observer.dev/role": "canary"}, port=2))]
    st = _state(pods, None)
    assert {v.name: v.role for v in st.versions} == {"aaa": "stable", "bbb": "canary"}
    assert st.stale_revision_pods == 0


def test_not_ready_terminating_and_ipless_pods_do_not_serve_and_bad_ones_are_counted() -> None:
    problems: Counter[str] = Counter()
    good = _pods("aaa", 1)
    not_ready = _pods("aaa", 1, start=1, ready=False)
    no_ip = _pods("aaa", 1, start=2, ip=None)
    deleting = pod("llm-aaa-9", labels={"app": "llm", "rollouts-pod-template-hash": "aaa"}, port=9)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    no_id = PodInfo.parse(pod("x", labels={"app": "llm"}, port=1))
    bad_id = PodInfo.parse(pod("y", labels={"app": "llm", "rollouts-pod-template-hash": "Has_Under"}, port=1))
    no_port = PodInfo.parse(pod("z", labels={"app": "llm", "rollouts-pod-template-hash": "ccc"}, port=1,
                                port_name="grpc"))
    st = _state([*good, *not_ready, *no_ip, PodInfo.parse(deleting), no_id, bad_id, no_port], None, problems)
    assert [(v.name, len(v.vllm)) for v in st.versions] == [("aaa", 1)]
    assert problems == Counter({"no_ip": 1, "no_identity": 1, "invalid_identity": 1, "no_port": 1})


def test_caps_bound_pods_per_version_and_versions_per_model() -> None:
    problems: Counter[str] = Counter()
    pods = _pods("aaa", 5) + _pods("bbb", 1, start=5) + _pods("ccc", 1, start=6) + _pods("ddd", 1, start=7)
    st = _state(pods, rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=0), problems)
    assert [v.name for v in st.versions] == ["aaa", "bbb", "ccc"]  # stable, canary, then others
    assert len(st.versions[0].vllm) == 3
    assert problems == Counter({"pods_over_cap": 2, "versions_over_cap": 1})


def test_malformed_objects_raise_a_value_error_not_a_crash() -> None:
    with pytest.raises(ValueError):
        PodInfo.parse({"metadata": {"labels": {"a": 1}, "name": "p"}})
    with pytest.raises(ValueError):
        PodInfo.parse({"metadata": "nope"})
    with pytest.raises(ValueError):
        RolloutInfo.parse({"status": {}})


def test_dcgm_exporters_join_by_node() -> None:
    exporters = [PodInfo.parse(pod(f"dcgm-{n}", labels={"app": "dcgm"}, port=9400, node=n)) for n in ("a", "b")]
    by_node = dcgm_by_node(SPEC.dcgm, exporters)
    assert by_node == {"a": ["http://127.0.0.1:9400/metrics"], "b": ["http://127.0.0.1:9400/metrics"]}
    pods = _pods("aaa", 1, node="a")
    st = _state(pods, None, dcgm={"a": ["http://10.0.0.1:9400/metrics"], "b": ["http://10.0.0.2:9400/metrics"]})
    assert st.versions[0].dcgm == ["http://10.0.0.1:9400/metrics"]
    assert [(p.namespace, p.pod) for p in st.versions[0].pods] == [("llm-serving", "llm-aaa-0")]


def test_an_autoscaler_aimed_at_a_rollout_replicaset_is_a_conflict_one_at_the_rollout_is_not() -> None:
    r = RolloutInfo.parse(rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=0))
    hpas = [{"kind": "HorizontalPodAutoscaler", "metadata": {"name": "bad"},
             "spec": {"scaleTargetRef": {"kind": "ReplicaSet", "name": "llm-bbb"}}},
            {"kind": "HorizontalPodAutoscaler", "metadata": {"name": "good"},
             "spec": {"scaleTargetRef": {"kind": "Rollout", "name": "llm"}}},
            {"kind": "ScaledObject", "metadata": {"name": "other"},
             "spec": {"scaleTargetRef": {"name": "unrelated"}}}]
    assert autoscaler_conflicts(r, hpas) == ["HorizontalPodAutoscaler/bad"]


def test_a_version_prefix_goes_before_the_identity() -> None:
    m = ModelDiscovery(name="llm", selector={"app": "llm"}, version_prefix="llm-")
    st = model_state(SPEC, m, _pods("aaa", 1), None, {}, Counter())
    assert [v.name for v in st.versions] == ["llm-aaa"] and st.versions[0].group == "llm"


def test_pod_start_time_reaches_the_version_for_the_cold_start() -> None:
    [p] = _pods("abc123", 1, start_time="2026-12-01T10:00:00Z")
    assert p.started_at == 1_796_119_200.0
    assert PodInfo.parse(pod("x", labels={}, port=1, start_time="yesterday")).started_at is None
    assert PodInfo.parse(pod("x", labels={}, port=1)).started_at is None
    state = _state(_pods("abc123", 2, start_time="2026-12-01T10:00:00Z"), None)
    assert [r.started_at for r in state.versions[0].pods] == [1_796_119_200.0] * 2


def test_a_discovered_version_gets_an_openai_url_template_first_then_the_rollouts_service_then_a_pod() -> None:
    pods = _pods("aaa", 2) + _pods("bbb", 1, start=2)
    ro = rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=2)
    by = {v.name: v for v in _state(pods, ro).versions}
    # No Service named: the first ready pod's own address (exact, but moves with the pod).
    assert by["aaa"].openai == "http://127.0.0.1:8000/v1" and by["bbb"].openai == "http://127.0.0.1:8002/v1"
    ro["spec"]["strategy"]["canary"].update(canaryService="llm-canary", stableService="llm-stable")
    by = {v.name: v for v in _state(pods, ro).versions}
    assert by["aaa"].openai == "http://llm-stable.llm-serving.svc:80/v1"
    assert by["bbb"].openai == "http://llm-canary.llm-serving.svc:80/v1"
    templ = M.model_copy(update={"openai_url": "http://gw.{namespace}/{model}/{role}/{version}/v1"})
    st = model_state(SPEC, templ, pods, RolloutInfo.parse(ro), {}, Counter())
    assert {v.name: v.openai for v in st.versions} == {"aaa": "http://gw.llm-serving/llm/stable/aaa/v1",
                                                       "bbb": "http://gw.llm-serving/llm/canary/bbb/v1"}


def test_a_version_whose_pods_expose_no_openai_port_has_no_url_and_is_counted() -> None:
    problems: Counter[str] = Counter()
    m = M.model_copy(update={"openai_port": "openai"})
    st = model_state(SPEC, m, _pods("aaa", 2), None, {}, problems)
    assert [v.openai for v in st.versions] == [None]
    assert problems["no_openai_url"] == 1


def test_an_openai_url_template_with_an_unknown_field_is_refused() -> None:
    with pytest.raises(ValueError, match=r"only \{version\}"):
        ModelDiscovery(name="llm", selector={"app": "llm"}, openai_url="http://{host}/v1")
    with pytest.raises(ValueError, match="must start with http"):
        ModelDiscovery(name="llm", selector={"app": "llm"}, openai_url="gw/{role}")


@pytest.mark.parametrize(("message", "reason"), [
    ("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes.", "insufficient_gpu"),
    ("0/4 nodes are available: 1 Insufficient cpu, 3 Insufficient memory.", "insufficient_cpu"),
    ("0/2 nodes are available: 2 Insufficient example.com/fpga.", "insufficient_other"),
    ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.", "node_affinity"),
    ("0/3 nodes are available: 3 node(s) had untolerated taint {nvidia.com/gpu: present}.", "taint"),
    ("0/3 nodes are available: 3 node(s) had volume node affinity conflict.", "volume"),
    ("pod has unbound immediate PersistentVolumeClaims.", "volume"),
    ("something new the scheduler says", "other"),
])
def test_the_schedulers_message_becomes_a_bounded_reason(message: str, reason: str) -> None:
    from observer.discover.podstate import UNSCHEDULABLE_REASONS
    from observer_dev.kubeapi import pending

    p = PodInfo.parse(pending("llm-bbb-9", labels={"app": "llm"}, port=8000, message=message))
    assert (p.state, p.state_reason, p.waiting) == ("unschedulable", reason, f"unschedulable:{reason}")
    assert reason in UNSCHEDULABLE_REASONS and not p.serving


def test_pods_that_do_not_serve_are_counted_by_why_per_version_never_as_ready() -> None:
    from observer_dev.kubeapi import pending

    labels = {"app": "llm", "rollouts-pod-template-hash": "bbb"}
    crash = pod("llm-bbb-3", labels=labels, port=8003, ready=False)
    crash["status"]["containerStatuses"] = [{"name": "vllm", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
    starting = pod("llm-bbb-4", labels=labels, port=8004, ready=False)
    starting["status"]["phase"] = "Pending"
    ended = pod("llm-bbb-5", labels=labels, port=8005, ready=False)
    ended["status"]["phase"] = "Failed"
    gone = pod("llm-bbb-6", labels=labels, port=8006, ready=False)
    gone["metadata"]["deletionTimestamp"] = "2026-12-05T10:00:00Z"
    only_pending = pending("llm-ccc-0", labels={"app": "llm", "rollouts-pod-template-hash": "ccc"}, port=8010)
    pods = [PodInfo.parse(o) for o in (
        pending("llm-bbb-1", labels=labels, port=8001), pending("llm-bbb-2", labels=labels, port=8002),
        crash, starting, ended, gone, pod("llm-bbb-7", labels=labels, port=8007, ready=False), only_pending)]
    st = _state(_pods("aaa", 2) + _pods("bbb", 1) + pods,
                rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=2))
    assert st.pods == {"aaa": 2, "bbb": 1}
    assert st.waiting == {"bbb": {"unschedulable:insufficient_gpu": 2, "failing:crashloop": 1, "starting": 1,
                                  "not_ready": 1},
                          "ccc": {"unschedulable:insufficient_gpu": 1}}  # no serving pod: waits all the same
    by = {v.name: v for v in st.versions}
    assert by["bbb"].pods_waiting == st.waiting["bbb"] and by["aaa"].pods_waiting == {}
    assert "ccc" not in by  # a version comes with its first serving pod


def test_the_version_pods_series_carry_ready_and_waiting_pods_by_state_and_reason() -> None:
    import asyncio

    import httpx
    from prometheus_client import CollectorRegistry, generate_latest

    from observer.discover.collector import DiscoveryCollector
    from observer.discover.watch import Discovery
    from observer.fleetview import LiveFleet
    from observer_dev.kubeapi import pending

    labels = {"app": "llm", "rollouts-pod-template-hash": "bbb"}
    st = _state(_pods("aaa", 2) + _pods("bbb", 1) + [PodInfo.parse(pending("llm-bbb-1", labels=labels, port=1))],
                rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=2))
    d = Discovery(spec=SPEC, fleet=LiveFleet([]), client=httpx.AsyncClient(), pods={})
    d.states["llm"] = st
    reg = CollectorRegistry()
    reg.register(DiscoveryCollector(d))
    text = generate_latest(reg).decode()
    asyncio.run(d.client.aclose())
    assert 'observer_version_pods{group="llm",reason="",state="ready",version="aaa"} 2.0' in text
    assert 'observer_version_pods{group="llm",reason="",state="ready",version="bbb"} 1.0' in text
    assert ('observer_version_pods{group="llm",reason="insufficient_gpu",state="unschedulable",version="bbb"} 1.0'
            in text)
