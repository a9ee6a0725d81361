"""Each rollout primitive discovered end to end: the scripted Kubernetes API (observer_dev/kubeapi.py) serves an
Argo Rollout, a KServe LLMInferenceService routing group, an InferenceService canary, an HTTPRoute across two
InferencePools, an llm-d InferenceModelRewrite, an OME InferenceService canary, a Dynamo graph rolling its
workers and a Flagger Canary on a Deployment, each with its pods, in one namespace; one `observer serve`
watches them through the API (list and watch), and its exported versions, roles and canary weight must equal
what the objects say, at the 25 % step and again after promotion (same identities, roles moved).

Used by `tests/integration/test_primitive_discovery.py` and `bench/topology.py` (`primitives_discovered`).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from observer.config import parse_config
from observer_dev import primitive_objects as po
from observer_dev.gameday.primitive_scenarios import exported
from observer_dev.kubeapi import ScriptedKubeApi, pod, rollout
from tests.support.observer_proc import run_observer
from tests.support.prom import free_port

NS = "llm-serving"
PODS = f"{NS}/pods"
PRIMITIVES = ("argo", "kserve_llmisvc", "kserve_isvc", "httproute_pools", "model_rewrite", "ome", "dynamo",
              "flagger")
GROUPS = {"argo": "argo", "kserve_llmisvc": "llm", "kserve_isvc": "chat", "httproute_pools": "gemma",
          "model_rewrite": "lora", "ome": "omechat", "dynamo": "agg", "flagger": "podinfo"}
OME_OLD, OME_NEW, GEN_OLD, GEN_NEW = "a1b2c3d4", "b2c3d4e5", "0a1b2c3d", "9f8e7d6c"
Want = dict[str, tuple[dict[str, str], float | None]]  # group → ({version: role}, canary weight)


@dataclass(frozen=True)
class Outcome:
    discovered: dict[str, bool]  # primitive → versions, roles and weights equal to the objects', both phases
    got: dict[str, Any]          # phase → what the observer exported
    want: dict[str, Any]


def _models() -> list[dict[str, Any]]:
    return [
        {"name": "argo", "selector": {"model": "argo"}, "rollout": "argo"},
        {"name": "llm", "selector": {"model": "llm"}, "primitive": {"kind": "kserve_llmisvc", "name": "llm"}},
        {"name": "chat", "selector": {"model": "chat"}, "primitive": {"kind": "kserve_isvc", "name": "chat"}},
        {"name": "gemma", "selector": {"model": "gemma"}, "primitive": {"kind": "httproute_pools", "name": "gemma"}},
        {"name": "lora", "selector": {"model": "lora"},
         "primitive": {"kind": "model_rewrite", "name": "lora", "model": "support-lora"}},
        {"name": "omechat", "selector": {"model": "omechat"}, "primitive": {"kind": "ome", "name": "omechat"}},
        {"name": "agg", "selector": {"model": "agg"}, "primitive": {"kind": "dynamo", "name": "vllm-agg"}},
        {"name": "podinfo", "selector": {"model": "podinfo"}, "primitive": {"kind": "flagger", "name": "podinfo"}},
    ]


def _pods(api: ScriptedKubeApi) -> None:
    port = free_port()  # nothing listens: discovery is under test, not scraping
    for h in ("a1", "b2"):
        api.put(PODS, pod(f"argo-{h}-0", labels={"model": "argo", "rollouts-pod-template-hash": h}, port=port))
    for svc in ("llm-v1", "llm-v2"):
        api.put(PODS, pod(f"{svc}-0", labels={"model": "llm", **po.llmisvc_pod_labels(svc)}, port=port))
    for rev in ("chat-00001", "chat-00002"):
        api.put(PODS, pod(f"{rev}-0", labels={"model": "chat", "serving.knative.dev/revision": rev}, port=port))
    for app in ("gemma-v1", "gemma-v2"):
        api.put(PODS, pod(f"{app}-0", labels={"model": "gemma", "app": app}, port=port))
    for i in range(2):
        api.put(PODS, pod(f"base-{i}", labels={"model": "lora", "app": "base"}, port=port))
    # Requests follow ready pods there: 3 old and 1 new is the 25 % step.
    for h, n in ((OME_OLD, 3), (OME_NEW, 1)):
        for i in range(n):
            api.put(PODS, pod(f"omechat-{h}-{i}", labels={"model": "omechat", **po.ome_pod_labels("omechat", h)},
                              port=port))
    for h, n, start in ((GEN_OLD, 3, "2026-12-01T00:00:00Z"), (GEN_NEW, 1, "2026-12-02T00:00:00Z")):
        for i in range(n):
            api.put(PODS, pod(f"agg-worker-{h}-{i}", labels={"model": "agg", **po.dynamo_pod_labels(h)}, port=port,
                              start_time=start))
    for primary in (True, False):  # Flagger's primary copy and its target Deployment
        api.put(PODS, pod(f"podinfo{'-primary' if primary else ''}-0",
                          labels={"model": "podinfo", **po.flagger_pod_labels("podinfo", primary=primary)}, port=port))


def _objects(api: ScriptedKubeApi, canary: int) -> Want:
    """The primitives at the canary's weight `canary` (100: promoted, the old version without traffic)."""
    steps: list[dict[str, Any]] = [{"setWeight": 25}, {"pause": {}}]
    if canary < 100:
        api.put(f"{NS}/rollouts.argoproj.io", rollout("argo", steps=steps, stable="a1", current="b2", step=1))
    else:
        api.put(f"{NS}/rollouts.argoproj.io", rollout("argo", steps=steps, stable="b2", current="b2", step=2))
    old, new = 100 - canary, canary
    members = {"llm-v1": old, "llm-v2": new} if canary == 100 else None
    stopped = ("llm-v1",) if canary == 100 else ()
    api.put(f"{NS}/llminferenceservices.serving.kserve.io",
            po.llmisvc("llm-v1", group="llm", weight=old, created="2026-11-01T00:00:00Z", members=members,
                       stopped=stopped))
    api.put(f"{NS}/llminferenceservices.serving.kserve.io",
            po.llmisvc("llm-v2", group="llm", weight=new, created="2026-12-01T00:00:00Z", members=members,
                       stopped=stopped))
    if canary < 100:
        api.put(f"{NS}/inferenceservices.serving.kserve.io",
                po.isvc("chat", stable="chat-00001", latest="chat-00002", canary_percent=canary))
    else:  # rolled out: the new revision is the rolled-out one and takes everything
        api.put(f"{NS}/inferenceservices.serving.kserve.io",
                po.isvc("chat", stable="chat-00002", latest="chat-00002", canary_percent=100))
    for app, created in (("gemma-v1", "2026-11-01T00:00:00Z"), ("gemma-v2", "2026-12-01T00:00:00Z")):
        api.put(f"{NS}/inferencepools.inference.networking.k8s.io",
                po.inference_pool(app, labels={"app": app}, created=created))
    api.put(f"{NS}/inferencepools.inference.networking.k8s.io", po.inference_pool("base", labels={"app": "base"}))
    api.put(f"{NS}/httproutes.gateway.networking.k8s.io", po.httproute("gemma", pools={"gemma-v1": old,
                                                                                    "gemma-v2": new}))
    targets = {"support-lora-v1": old, "support-lora-v2": new} if canary < 100 else {"support-lora-v2": 1}
    api.put(f"{NS}/inferencemodelrewrites.llm-d.ai",
            po.model_rewrite("lora", model="support-lora", pool="base", targets=targets))
    api.put(f"{NS}/inferenceservices.ome.io",
            po.ome_isvc("omechat", stable=OME_OLD, canary=OME_NEW, phase="Canarying") if canary < 100 else
            po.ome_isvc("omechat", stable=OME_NEW, canary=None, phase="Stable"))
    api.put(f"{NS}/dynamographdeployments.nvidia.com",
            po.dgd("vllm-agg", current=GEN_OLD, phase="InProgress") if canary < 100 else
            po.dgd("vllm-agg", current=GEN_NEW, phase="Completed"))
    api.put(f"{NS}/canaries.flagger.app",
            po.flagger_canary("podinfo", phase="Progressing", weight=canary) if canary < 100 else
            po.flagger_canary("podinfo", phase="Succeeded", promoted="5f8fd4f546", weight=0))
    w = canary / 100
    if canary < 100:
        return {"argo": ({"a1": "stable", "b2": "canary"}, w),
                "llm": ({"llm-v1": "stable", "llm-v2": "canary"}, w),
                "chat": ({"chat-00001": "stable", "chat-00002": "canary"}, w),
                "gemma": ({"gemma-v1": "stable", "gemma-v2": "canary"}, w),
                "lora": ({"support-lora-v1": "stable", "support-lora-v2": "canary"}, w),
                "omechat": ({OME_OLD: "stable", OME_NEW: "canary"}, w),
                "agg": ({GEN_OLD: "stable", GEN_NEW: "canary"}, w),
                "podinfo": ({"podinfo-primary": "stable", "podinfo": "canary"}, w)}
    # Promoted: the new identity is stable; the old one is `other` while its pods serve (Argo's old
    # ReplicaSet, the stopped KServe member, the pool without traffic) or gone (a rewrite target removed, a
    # revision without traffic in the status); Flagger keeps its names, the primary running the promoted spec.
    # No canary, so no canary weight.
    return {"argo": ({"a1": "other", "b2": "stable"}, None),
            "llm": ({"llm-v1": "other", "llm-v2": "stable"}, None),
            "chat": ({"chat-00002": "stable"}, None),
            "gemma": ({"gemma-v1": "other", "gemma-v2": "stable"}, None),
            "lora": ({"support-lora-v2": "stable"}, None),
            "omechat": ({OME_OLD: "other", OME_NEW: "stable"}, None),
            "agg": ({GEN_OLD: "other", GEN_NEW: "stable"}, None),
            "podinfo": ({"podinfo-primary": "stable", "podinfo": "other"}, None)}


def _exported(url: str) -> Want:
    seen = exported(url)
    return {g: seen.get(g, ({}, None)) for g in GROUPS.values()}


def _wait(read: Callable[[], Want], want: Want, deadline: float) -> Want:
    got = read()
    while got != want and time.monotonic() < deadline:
        time.sleep(0.2)
        got = read()
    return got


def run(deadline_s: float = 30.0) -> Outcome:
    """Serve every primitive at its 25 % step, then promoted; compare what the observer exports."""
    api = ScriptedKubeApi()
    tmp = Path(tempfile.mkdtemp(prefix="primitive-discovery-"))
    (tmp / "kubeconfig").write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")
    config = parse_config(yaml.safe_dump({
        "discovery": {"kubernetes": {"namespace": NS, "kubeconfig": str(tmp / "kubeconfig"), "dcgm": None,
                                     "remove_after_seconds": 0.5, "backoff_seconds": 0.05,
                                     "max_backoff_seconds": 0.2, "models": _models()}},
        "scrape": {"interval_seconds": 0.5, "timeout_seconds": 0.3, "window_seconds": 30},
        "canary": {"interval_seconds": 1.0, "window_seconds": 30},
        "server": {"auth": {"mode": "none"}}, "quality": {"enabled": False}, "drift": {"enabled": False},
        "sampling": {"enabled": False}}), environ={})
    got: dict[str, Any] = {}
    wanted: dict[str, Any] = {}
    ok = {p: True for p in PRIMITIVES}
    with api.running():
        _pods(api)
        want = _objects(api, 25)
        with run_observer(config) as obs:
            obs.wait_ready(timeout=20)
            for phase, canary in (("step_25", 25), ("promoted", 100)):
                if canary != 25:
                    want = _objects(api, canary)
                seen = _wait(lambda: _exported(obs.url), want, time.monotonic() + deadline_s)
                got[phase], wanted[phase] = seen, want
                for p in PRIMITIVES:
                    ok[p] = ok[p] and seen[GROUPS[p]] == want[GROUPS[p]]
    return Outcome(discovered=ok, got=got, want=wanted)
