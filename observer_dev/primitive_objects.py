"""Rollout-primitive objects as their controllers keep them, for the scripted Kubernetes API, tests and benches.

Shaped after the objects upstream published (../shared/reference/rollout-primitives/): KServe's
LLMInferenceService canary guide (group and weight, the group status with `stopped`), its InferenceService
canary status (`status.components.predictor.traffic`), the Inference Extension's weighted two-pool HTTPRoute
and InferencePool v1, and llm-d's InferenceModelRewrite. tests/golden/test_primitive_objects.py validates
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
