"""Autoscaler game day: the scripted Kubernetes API plays an HPA beside two vLLM pods whose queues grow, the observer
discovers and scrapes them, and a real Prometheus evaluating the generated rules (time-compressed 120×) tells an
HPA that reacts from one that never does.

1. The HPA scales on the model's queue: it asks for a third replica, the queue drains. Nothing fires.
2. The HPA scales on CPU only (an `autoscaling/v2` HPA without metrics): the queue grows, desired replicas stay
   flat below the ceiling: `ObserverAutoscalerNotReacting` fires, and the signal gauge says why (`cpu`).
3. Its floor is lowered to 0: `ObserverAutoscalerColdStartRisk` fires with reason `scales_to_zero`.

The vLLM pods are stand-ins serving the simulator's exposition (observer_dev.sim) with a scripted waiting-queue
gauge: what the HPA alerts read is the queue, not the engine's answers.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from observer import conventions as names
from observer.config import parse_config
from observer.render import alerts
from observer.render.writer import write_files
from observer_dev.kubeapi import ScriptedKubeApi, pod, rollout
from observer_dev.sim.engine import SimEngine
from observer_dev.sim.profile import Profile
from observer_dev.sim.vllm_exposition import CONTENT_TYPE, build_registry, render
from tests.support.observer_proc import Route, TargetServer, run_observer, wait_until
from tests.support.prom import Prometheus, run_prometheus

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian package prometheus missing")]

PODS = "llm-serving/pods"
ROLLOUTS = "llm-serving/rollouts.argoproj.io"
HPAS = "llm-serving/horizontalpodautoscalers.autoscaling"
WATCHED = {names.ALERT_AUTOSCALER_NOT_REACTING, names.ALERT_AUTOSCALER_COLD_START, names.ALERT_AUTOSCALER_CEILING}


class QueuedEngine:
    """A vLLM pod stand-in: the simulator's exposition with `waiting` requests queued."""

    def __init__(self, seed: int) -> None:
        self.engine = SimEngine(model="llm", profile=Profile(), seed=seed)
        self.waiting = 0.0
        self.server = TargetServer().start()
        self.server.set("/metrics", Route(body=self.body, content_type=CONTENT_TYPE))

    def body(self) -> bytes:
        s = self.engine.snapshot()
        s = replace(s, gauges={**s.gauges, "num_requests_waiting": self.waiting})
        return render(build_registry(lambda: s))


def _hpa(*, desired: int, current: int, metrics: list[dict[str, Any]] | None, floor: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"scaleTargetRef": {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "llm"},
                            "minReplicas": floor, "maxReplicas": 4,
                            # long enough not to trip the cold-start alert on its own
                            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 3600}}}
    if metrics is not None:
        spec["metrics"] = metrics
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "llm", "namespace": "llm-serving"}, "spec": spec,
            "status": {"currentReplicas": current, "desiredReplicas": desired}}


QUEUE_METRIC = [{"type": "Pods", "pods": {"metric": {"name": "vllm_num_requests_waiting"},
                                          "target": {"type": "AverageValue", "averageValue": "4"}}}]


def _firing(prom: Prometheus) -> set[str]:
    return {a["labels"]["alertname"] for a in prom.alerts() if a["state"] == "firing"} & WATCHED


def test_an_hpa_that_never_reacts_to_the_queue_is_told_from_one_that_does(tmp_path: Path) -> None:
    api = ScriptedKubeApi()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")
    engines = [QueuedEngine(seed=i) for i in range(3)]
    data = {"discovery": {"kubernetes": {
        "namespace": "llm-serving", "kubeconfig": str(kubeconfig), "dcgm": None, "remove_after_seconds": 1.0,
        "backoff_seconds": 0.05, "max_backoff_seconds": 0.2,
        "models": [{"name": "llm", "selector": {"app": "llm"}, "rollout": "llm"}]}},
        "scrape": {"interval_seconds": 1.0, "timeout_seconds": 1.0, "window_seconds": 5.0},
        "slo": {"time_scale": 1 / 120},
        "sampling": {"store": {"path": str(Path(tempfile.mkdtemp()) / "s.db")}}}
    config = parse_config(yaml.safe_dump(data), environ={})
    write_files(alerts.render(config), root=tmp_path)

    def serve(i: int) -> None:
        api.put(PODS, pod(f"llm-aaa-{i}", labels={"app": "llm", "rollouts-pod-template-hash": "aaa"},
                          port=engines[i].server.port, node=f"node-{i}"))

    try:
        with api.running():
            for i in range(2):
                serve(i)
            api.put(ROLLOUTS, rollout("llm", steps=[{"setWeight": 50}, {"pause": {}}], stable="aaa",
                                      current="aaa", step=2))
            api.put(HPAS, _hpa(desired=2, current=2, metrics=QUEUE_METRIC))
            with run_observer(config, areas=["discover", "scrape"]) as obs:
                obs.wait_ready(timeout=20)
                with run_prometheus([obs.url.removeprefix("http://")],
                                    rule_files=[tmp_path / alerts.RULES_FILE]) as prom:
                    prom.wait_for(f'{names.AUTOSCALER_SIGNAL}{{signal="pods:vllm_num_requests_waiting"}} == 1',
                                  timeout=30)

                    # 1. the queue grows; the HPA asks for a third pod, which serves; the queue drains
                    for e in engines:
                        e.waiting = 20.0
                    prom.wait_for(f"max({names.QUEUE_DEPTH_PER_REPLICA}) > 4", timeout=30)
                    api.put(HPAS, _hpa(desired=3, current=2, metrics=QUEUE_METRIC))
                    serve(2)
                    api.put(HPAS, _hpa(desired=3, current=3, metrics=QUEUE_METRIC))
                    for e in engines:
                        e.waiting = 0.0
                    prom.wait_for(f"max({names.QUEUE_DEPTH_PER_REPLICA}) < 1", timeout=30)
                    # held for longer than the window and `for` (5 s each, compressed): nothing fired
                    wait_until(lambda: float(prom.query(
                        f"count_over_time({names.AUTOSCALER_REPLICAS}{{kind=\"desired\"}}[1m])")[0]["value"][1]) >= 15,
                        timeout=40)
                    assert {a["labels"]["alertname"] for a in prom.alerts()} & WATCHED == set()

                    # 2. CPU only: the queue grows again and the HPA wants nothing more
                    api.put(HPAS, _hpa(desired=3, current=3, metrics=None))
                    for e in engines:
                        e.waiting = 20.0
                    wait_until(lambda: names.ALERT_AUTOSCALER_NOT_REACTING in _firing(prom), timeout=90,
                               message=lambda: f"firing {_firing(prom)}")
                    (fired,) = [a for a in prom.alerts() if a["labels"]["alertname"] ==
                                names.ALERT_AUTOSCALER_NOT_REACTING]
                    assert fired["labels"]["autoscaler"] == "HorizontalPodAutoscaler/llm"
                    assert prom.query(f"{names.AUTOSCALER_SIGNAL}")[0]["metric"]["signal"] == "cpu"
                    assert names.ALERT_AUTOSCALER_CEILING not in _firing(prom)

                    # 3. a floor of 0
                    api.put(HPAS, _hpa(desired=3, current=3, metrics=None, floor=0))
                    wait_until(lambda: names.ALERT_AUTOSCALER_COLD_START in _firing(prom), timeout=90,
                               message=lambda: f"firing {_firing(prom)}")
                    (fired,) = [a for a in prom.alerts() if a["labels"]["alertname"] ==
                                names.ALERT_AUTOSCALER_COLD_START]
                    assert fired["labels"][names.REASON] == "scales_to_zero"
    finally:
        for e in engines:
            e.server.stop()
