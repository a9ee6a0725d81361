"""Rollout-primitive objects as their controllers keep them, for the scripted Kubernetes API, tests and benches.

Shaped after the objects upstream published (../shared/reference/rollout-primitives/): KServe's
LLMInferenceService canary guide (group and weight, the group status with `stopped`), its InferenceService
canary status (`status.components.predictor.traffic`), the Inference Extension's weighted two-pool HTTPRoute
and InferencePool v1, llm-d's InferenceModelRewrite, OME's InferenceService canary and Dynamo's
DynamoGraphDeployment. tests/golden/test_primitive_objects.py validates
every builder's output against the upstream CRDs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]


def _meta(name: str, namespace: str, created: str | None, labels: Mapping[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace}
    if created is not None:
        meta["creationTimestamp"] = created
    if labels:
        meta["labels"] = dict(labels)
    return meta


def llmisvc(name: str, *, group: str, weight: int, namespace: str = "llm-serving", created: str | None = None,
            model: str = "my-model", stopped: Sequence[str] = (), members: Mapping[str, int] | None = None) -> Obj:
    """An LLMInferenceService in routing group `group` with `weight`; with `members` ({service: weight}) its
    status carries the group as the controller reports it (`stopped` names the stopped ones)."""
    obj: Obj = {
        "apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
        "metadata": _meta(name, namespace, created, {"serving.kserve.io/routing-group": group}),
        "spec": {"model": {"name": model, "uri": f"pvc://models/{name}"},
                 "router": {"route": {"group": group, "weight": weight}, "scheduler": {}}},
    }
    if members is not None:
        obj["status"] = {"router": {"group": {"name": group, "members": [
            {"name": n, "weight": w, **({"stopped": True} if n in stopped else {})} for n, w in members.items()]}}}
    return obj


def llmisvc_pod_labels(service: str) -> dict[str, str]:
    """The labels KServe's workload pods of `service` carry (as the published EPP log line shows)."""
    return {"app.kubernetes.io/component": "llminferenceservice-workload", "app.kubernetes.io/name": service,
            "app.kubernetes.io/part-of": "llminferenceservice", "kserve.io/component": "workload"}


def isvc(name: str, *, stable: str, latest: str, canary_percent: int, namespace: str = "llm-serving") -> Obj:
    """A serverless InferenceService with canaryTrafficPercent, reconciled: `stable` the rolled-out revision,
    `latest` the newest ready one taking `canary_percent` (the same revision when nothing is in progress)."""
    traffic = [{"revisionName": latest, "percent": canary_percent if latest != stable else 100,
                "latestRevision": True, "tag": "latest"}]
    if latest != stable:
        traffic.append({"revisionName": stable, "percent": 100 - canary_percent, "latestRevision": False,
                        "tag": "prev"})
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": _meta(name, namespace, None),
            "spec": {"predictor": {"canaryTrafficPercent": canary_percent,
                                   "model": {"modelFormat": {"name": "huggingface"}, "storageUri": "pvc://models/m"}}},
            "status": {"components": {"predictor": {
                "latestReadyRevision": latest, "latestCreatedRevision": latest,
                "latestRolledoutRevision": stable, "traffic": traffic}}}}


def inference_pool(name: str, *, labels: Mapping[str, str], namespace: str = "llm-serving",
                   created: str | None = None, port: int = 8000) -> Obj:
    """An InferencePool v1 selecting `labels`, with its endpoint picker."""
    return {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
            "metadata": _meta(name, namespace, created),
            "spec": {"selector": {"matchLabels": dict(labels)}, "targetPorts": [{"number": port}],
                     "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}}}}


def httproute(name: str, *, pools: Mapping[str, int], namespace: str = "llm-serving",
              gateway: str = "inference-gateway") -> Obj:
    """An HTTPRoute weighing InferencePools ({pool: weight}) on one rule."""
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": _meta(name, namespace, None),
            "spec": {"parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway}],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                                "backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                                 "name": p, "weight": w} for p, w in pools.items()]}]}}


def model_rewrite(name: str, *, model: str, pool: str, targets: Mapping[str, int],
                  namespace: str = "llm-serving") -> Obj:
    """An InferenceModelRewrite (llm-d.ai/v1alpha2) sending `model` to weighted `targets` ({model: weight})."""
    return {"apiVersion": "llm-d.ai/v1alpha2", "kind": "InferenceModelRewrite",
            "metadata": _meta(name, namespace, None),
            "spec": {"poolRef": {"group": "inference.networking.k8s.io", "name": pool},
                     "rules": [{"matches": [{"model": {"type": "Exact", "value": model}}],
                                "targets": [{"modelRewrite": t, "weight": w} for t, w in targets.items()]}]}}


def ome_isvc(name: str, *, stable: str, canary: str | None, phase: str, namespace: str = "llm-serving",
             capacity: str = "25%", analysis: Obj | None = None, step_entered: str | None = None) -> Obj:
    """An OME InferenceService (ome.io/v1beta1) with one canary group on its engine, shaped after OME's
    canary-analysis page, and the engine's status as OME's CanaryStatus and traffic table describe it:
    `canaryRevisionHash`/`stableRevisionHash`, `rolloutPhase`, `traffic[]` of `<isvc>-engine-rev-<hash>`
    tagged stable/canary. No published status example exists; SOURCES.md section 6 gives its fields. `analysis`
    is the first step's gate (default: the published error-rate check); `step_entered` the canary status's
    `stepEnteredTime` (RFC 3339)."""
    if analysis is None:
        analysis = {"interval": "1m", "failureLimit": 3, "metrics": [{
            "name": "error-rate", "operator": "LT", "threshold": "0.01",
            "query": 'sum(rate(request_errors_total{revision_hash="{{.CanaryRevision}}"}[5m])) / '
                     'sum(rate(requests_total{revision_hash="{{.CanaryRevision}}"}[5m]))'}]}
    status: Obj = {"rolloutPhase": phase, "traffic": [
        {"revisionName": f"{name}-engine-rev-{stable}", "tag": "stable", "percent": 100 if canary is None else 90}]}
    if canary is not None:
        status["canary"] = {"stableRevisionHash": stable, "canaryRevisionHash": canary, "currentStep": 0}
        if step_entered is not None:
            status["canary"]["stepEnteredTime"] = step_entered
        status["traffic"].append({"revisionName": f"{name}-engine-rev-{canary}", "tag": "canary", "percent": 10,
                                  "latestRevision": True})
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": _meta(name, namespace, None),
            "spec": {"deploymentMode": "OMENative", "model": {"name": "my-model"},
                     "engine": {"minReplicas": 4, "maxReplicas": 4},
                     "rollout": {"groups": [{"components": ["engine"], "canary": {"steps": [
                         {"capacity": capacity, "traffic": 10, "pause": {"duration": "10m"}, "analysis": analysis},
                         {"capacity": "100%", "traffic": 100}]}}]}},
            "status": {"components": {"engine": status}}}


def ome_pod_labels(isvc: str, revision: str) -> dict[str, str]:
    """The labels OME's engine pods carry (the revision hash tells revisions apart)."""
    return {"ome.io/inferenceservice": isvc, "component": "engine", "ome.io/revision-hash": revision}


def dgd(name: str, *, current: str | None, phase: str | None = None, legacy: str | None = None,
        namespace: str = "llm-serving") -> Obj:
    """A DynamoGraphDeployment (nvidia.com/v1beta1) with one frontend and one worker, its completed worker
    generation in `nvidia.com/current-worker-hash-v2` (and `legacy` in the v1 annotation), and
    `status.rollingUpdate.phase` while a rollout runs."""
    notes = {k: v for k, v in (("nvidia.com/current-worker-hash-v2", current),
                               ("nvidia.com/current-worker-hash", legacy)) if v is not None}
    meta = _meta(name, namespace, None)
    if notes:
        meta["annotations"] = notes
    obj: Obj = {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment", "metadata": meta,
                "spec": {"components": [
                    {"name": "Frontend", "type": "frontend", "replicas": 1, "podTemplate": {"spec": {
                        "containers": [{"name": "main", "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.0"}]}}},
                    {"name": "VllmWorker", "type": "worker", "replicas": 4, "podTemplate": {"spec": {
                        "containers": [{"name": "main", "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.0"}]}}}]}}
    if phase is not None:
        obj["status"] = {"state": "pending" if phase in ("Pending", "InProgress") else "successful",
                         "rollingUpdate": {"phase": phase}}
    return obj


def dynamo_pod_labels(worker_hash: str) -> dict[str, str]:
    """The labels a Dynamo worker pod carries (the worker hash names its generation)."""
    return {"nvidia.com/dynamo-component-type": "worker", "nvidia.com/dynamo-worker-hash": worker_hash}


def flagger_canary(name: str, *, target: str | None = None, phase: str, applied: str = "5f8fd4f546",
                   promoted: str | None = "7d9c8b6a54", weight: int | None = 10,
                   namespace: str = "llm-serving") -> Obj:
    """A Flagger Canary (flagger.app/v1beta1) on a Deployment, with the status fields its controller writes:
    `phase`, `canaryWeight`, `lastAppliedSpec` (the hash of the target's pod spec) and `lastPromotedSpec` (what
    the primary runs)."""
    status: Obj = {"phase": phase, "failedChecks": 0, "iterations": 0, "lastAppliedSpec": applied,
                   "lastTransitionTime": "2026-12-01T10:00:00Z"}
    if promoted is not None:
        status["lastPromotedSpec"] = promoted
    if weight is not None:
        status["canaryWeight"] = weight
    return {"apiVersion": "flagger.app/v1beta1", "kind": "Canary", "metadata": _meta(name, namespace, None),
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target or name},
                     "service": {"port": 8000, "targetPort": "http"},
                     "analysis": {"interval": "1m", "threshold": 5, "maxWeight": 50, "stepWeight": 5}},
            "status": status}


def flagger_pod_labels(value: str, *, primary: bool, key: str = "app") -> dict[str, str]:
    """The labels of a Flagger target's pods (`primary=False`) or of its primary copy's: Flagger rewrites the
    selector label to `<value>-primary` on the copy and keeps every other label."""
    return {key: f"{value}-primary" if primary else value, "observer.dev/model": value}
