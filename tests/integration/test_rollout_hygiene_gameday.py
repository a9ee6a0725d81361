"""Rollout hygiene game day: the scripted Kubernetes API plays three incidents, the observer discovers them,
and a real Prometheus evaluating the generated rules (time-compressed 120×) fires the matching alert — and
stays quiet on the healthy rollout before each incident.

1. replicas off weight: `setWeight: 5` with 1 canary pod of 4 (Argo's basic canary gives it 25%);
2. an old revision still serving after promotion;
3. an HPA scaling the canary's ReplicaSet instead of the Rollout;
4. a promotion with a long `scaleDownDelaySeconds`: the previous version's pods are kept (not stale), then
   scaled away inside that window;
5. a canary pod the scheduler cannot place (Insufficient nvidia.com/gpu);
6. the new version's replicas all scheduled onto one node (the spread is soft);
7. a pod of it started from `vllm/vllm-openai:latest`.

The healthy rollout's pods sit on three nodes.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from observer import conventions as names
from observer.config import parse_config
from observer.render import alerts
from observer.render.writer import write_files
from observer_dev.kubeapi import ScriptedKubeApi, pending, pod, rollout
from tests.support.observer_proc import run_observer, wait_until
from tests.support.prom import Prometheus, run_prometheus

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian package prometheus missing")]

PODS = "llm-serving/pods"
ROLLOUTS = "llm-serving/rollouts.argoproj.io"
HPAS = "llm-serving/horizontalpodautoscalers.autoscaling"
STEPS: list[dict[str, Any]] = [{"setWeight": 5}, {"pause": {}}, {"setWeight": 50}, {"pause": {}}]
HYGIENE = {names.ALERT_REPLICA_SHARE, names.ALERT_STALE_REVISION, names.ALERT_AUTOSCALER_CONFLICT,
           names.ALERT_ROLLBACK_WINDOW_LOST, names.ALERT_PODS_NOT_ARRIVING, names.ALERT_VERSION_ON_ONE_NODE,
           names.ALERT_MUTABLE_IMAGE}


def _firing(prom: Prometheus) -> set[str]:
    return {a["labels"]["alertname"] for a in prom.alerts() if a["state"] == "firing"} & HYGIENE


def _pod(h: str, i: int, node: str | None = None, image: str = "vllm/vllm-openai:v0.33.0") -> dict[str, Any]:
    return pod(f"llm-{h}-{i}", labels={"app": "llm", "rollouts-pod-template-hash": h}, port=9 + i,
               node=node or f"node-{i % 3}", image=image)


def test_each_hygiene_incident_fires_its_alert(tmp_path: Path) -> None:
    api = ScriptedKubeApi()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")
    data = {"discovery": {"kubernetes": {
        "namespace": "llm-serving", "kubeconfig": str(kubeconfig), "dcgm": None, "remove_after_seconds": 1.0,
        "backoff_seconds": 0.05, "max_backoff_seconds": 0.2,
        "models": [{"name": "llm", "selector": {"app": "llm"}, "rollout": "llm"}]}},
        "slo": {"time_scale": 1 / 120},
        "sampling": {"store": {"path": str(Path(tempfile.mkdtemp()) / "s.db")}}}
    config = parse_config(yaml.safe_dump(data), environ={})
    write_files(alerts.render(config), root=tmp_path)
    with api.running():
        # healthy: 20 pods, canary 1 of 20 at 5%
        for i in range(19):
            api.put(PODS, _pod("aaa", i))
        api.put(PODS, _pod("bbb", 0))
        api.put(ROLLOUTS, rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=0))
        with run_observer(config, areas=["discover"]) as obs:
            obs.wait_ready(timeout=20)
            with run_prometheus([obs.url.removeprefix("http://")], rule_files=[tmp_path / alerts.RULES_FILE]) as prom:
                prom.wait_for(f"{names.ROLLOUT_CANARY_REPLICA_SHARE} == 0.05", timeout=30)
                # held for longer than the alerts' (compressed) `for`: nothing fires on the healthy rollout
                wait_until(lambda: float(prom.query(
                    f"count_over_time({names.ROLLOUT_CANARY_WEIGHT}[1m])")[0]["value"][1]) >= 8, timeout=30)
                assert _firing(prom) == set()
                assert {a["labels"]["alertname"] for a in prom.alerts()} & HYGIENE == set()  # not even pending

                # 1. 4 replicas, 1 canary pod: 25% of the pods at setWeight 5
                for i in range(3, 19):
                    api.delete(PODS, f"llm-aaa-{i}")
                wait_until(lambda: names.ALERT_REPLICA_SHARE in _firing(prom), timeout=60,
                           message=lambda: f"firing {_firing(prom)}")
                assert _firing(prom) == {names.ALERT_REPLICA_SHARE}

                # 2. promoted, but the old revision's pods still serve
                api.put(ROLLOUTS, rollout("llm", steps=STEPS, stable="bbb", current="bbb", step=4))
                wait_until(lambda: names.ALERT_STALE_REVISION in _firing(prom), timeout=60,
                           message=lambda: f"firing {_firing(prom)}")

                # 3. an HPA aimed at the ReplicaSet the Rollout owns
                api.put(HPAS, {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                               "metadata": {"name": "llm-canary", "namespace": "llm-serving"},
                               "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                           "name": "llm-bbb"}}})
                wait_until(lambda: names.ALERT_AUTOSCALER_CONFLICT in _firing(prom), timeout=60,
                           message=lambda: f"firing {_firing(prom)}")
                # the old pods go: that alert resolves
                for i in range(3):
                    api.delete(PODS, f"llm-aaa-{i}")
                wait_until(lambda: names.ALERT_STALE_REVISION not in _firing(prom), timeout=60,
                           message=lambda: f"firing {_firing(prom)}")

                # 4. ccc promoted with a 1 h scale-down delay: bbb's pod is kept for a fast rollback, not stale;
                # then scaled away inside the window
                def promote(stable: str, current: str, step: int) -> dict[str, Any]:
                    obj = rollout("llm", steps=STEPS, stable=stable, current=current, step=step)
                    obj["spec"]["strategy"]["canary"].update(scaleDownDelaySeconds=3600,
                                                             trafficRouting={"nginx": {"stableIngress": "llm"}})
                    return obj

                api.put(PODS, _pod("ccc", 0))
                api.put(ROLLOUTS, promote("bbb", "ccc", 2))
                prom.wait_for(f"{names.ROLLOUT_CANARY_WEIGHT} == 0.5", timeout=30)
                api.put(ROLLOUTS, promote("ccc", "ccc", 4))
                prom.wait_for(f"{names.ROLLBACK_WINDOW_PODS}{{version=\"bbb\"}} == 1", timeout=30)
                wait_until(lambda: float(prom.query(
                    f"count_over_time({names.ROLLBACK_WINDOW_PODS}[1m])")[0]["value"][1]) >= 12, timeout=30)
                assert names.ALERT_STALE_REVISION not in _firing(prom)  # held past its `for`: kept on purpose
                assert names.ALERT_ROLLBACK_WINDOW_LOST not in _firing(prom)
                api.delete(PODS, "llm-bbb-0")
                wait_until(lambda: names.ALERT_ROLLBACK_WINDOW_LOST in _firing(prom), timeout=60,
                           message=lambda: f"firing {_firing(prom)}")

                # 5. a second canary pod the scheduler cannot place
                assert names.ALERT_PODS_NOT_ARRIVING not in _firing(prom)
                api.put(PODS, pending("llm-ccc-1", labels={"app": "llm", "rollouts-pod-template-hash": "ccc"},
                                      port=20))
                wait_until(lambda: names.ALERT_PODS_NOT_ARRIVING in _firing(prom), timeout=60,
                           message=lambda: f"firing {_firing(prom)}")
                (fired,) = [a for a in prom.alerts() if a["labels"]["alertname"] == names.ALERT_PODS_NOT_ARRIVING]
                assert (fired["labels"]["state"], fired["labels"]["reason"]) == ("unschedulable", "insufficient_gpu")

                # 6. two more pods of ccc land beside its first: every replica on one node
                assert names.ALERT_VERSION_ON_ONE_NODE not in _firing(prom)
                for i in (2, 3):
                    api.put(PODS, _pod("ccc", i, node="node-0"))
                wait_until(lambda: names.ALERT_VERSION_ON_ONE_NODE in _firing(prom), timeout=60,
                           message=lambda: f"firing {_firing(prom)}")
                (fired,) = [a for a in prom.alerts() if a["labels"]["alertname"] == names.ALERT_VERSION_ON_ONE_NODE]
                assert fired["labels"]["version"] == "ccc"

                # 7. one more pod of ccc, from an image by a tag that moves
                assert names.ALERT_MUTABLE_IMAGE not in _firing(prom)
                api.put(PODS, _pod("ccc", 4, image="vllm/vllm-openai:latest"))
                wait_until(lambda: names.ALERT_MUTABLE_IMAGE in _firing(prom), timeout=60,
                           message=lambda: f"firing {_firing(prom)}")
                (fired,) = [a for a in prom.alerts() if a["labels"]["alertname"] == names.ALERT_MUTABLE_IMAGE]
                assert (fired["labels"]["version"], fired["labels"]["image"]) == ("ccc", "vllm/vllm-openai:latest")
