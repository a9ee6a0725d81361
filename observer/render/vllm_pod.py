"""A vLLM pod that would serve: what every example workload running vLLM carries. Pure: names in, objects out.

A large model loads for minutes, so liveness and readiness wait behind a startup probe sized for the load;
a pod leaving keeps answering while its endpoint is removed everywhere and its in-flight generations finish;
the weights are an immutable, pinned revision on a read-only volume, so a weight swap is a new pod template
(a new version identity), never a file changed under a running version.

And it survives the cluster: vLLM runs as a non-root user on a read-only root filesystem (its caches, the
compile caches and /tmp on emptyDirs), without privilege escalation or capabilities; the pods ask for GPU
nodes (GPU feature discovery's label, the GPU taint tolerated) and spread across nodes per revision; a
PodDisruptionBudget lets a node drain take a tenth of them at a time, since each one back costs a model load.
The spread is soft: a version whose serving pods all land on one node anyway is what discovery's
`observer_version_nodes` and its alert are for.
"""

from __future__ import annotations

from typing import Any

VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"
MODEL_MOUNT = "/models"
MODEL_VOLUME = "model-weights"
MODEL_CLAIM = "llm-weights"
"""A ReadOnlyMany claim holding one directory per model revision, never rewritten in place."""

MODEL_REVISION = "google--gemma-3-27b-it/rev-2025-03-12"
"""The served weights: one directory per model and revision under the claim (name it by the commit you
downloaded); a new revision is a new directory and a new pod template, never new files in this one."""

STARTUP_SECONDS = 900
"""How long the model may take to load before the kubelet gives up (startup probe failures × period)."""

DRAIN_SECONDS = 60
"""preStop: how long a leaving pod keeps serving, for its endpoint to leave every Service and gateway and its
in-flight generations to end; the grace period adds time for the process to exit after SIGTERM."""

GRACE_SECONDS = DRAIN_SECONDS + 30

VLLM_USER = 1000
"""vLLM's image runs as root by default; any uid works once HOME and every cache point at a writable volume."""
CACHE_MOUNT = "/cache"
GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}
"""Set on GPU nodes by NVIDIA's GPU feature discovery (the GPU operator runs it)."""
GPU_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
"""GPU node pools are commonly tainted so that only GPU workloads land there."""
MAX_UNAVAILABLE = "10%"
"""A drain or an autoscaler may take this share of a version's pods at once (rounded up: at least one)."""


def model_path() -> str:
    return f"{MODEL_MOUNT}/{MODEL_REVISION}"


def drain() -> dict[str, Any]:
    """The preStop hook of every container a client's request passes through."""
    return {"preStop": {"sleep": {"seconds": DRAIN_SECONDS}}}


def vllm_container(*, served_model_name: str, port: int, port_name: str) -> dict[str, Any]:
    """vLLM on one GPU, its probes sized for model load, draining before it stops."""
    health = {"path": "/health", "port": port_name}
    return {
        "name": "vllm",
        "image": VLLM_IMAGE,
        "args": ["--model", model_path(), "--served-model-name", served_model_name, "--host", "0.0.0.0",
                 "--port", str(port)],
        "ports": [{"name": port_name, "containerPort": port}],
        "startupProbe": {"httpGet": health, "periodSeconds": 10, "failureThreshold": STARTUP_SECONDS // 10},
        "readinessProbe": {"httpGet": health, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": health, "periodSeconds": 10, "failureThreshold": 6},
        "lifecycle": drain(),
        "resources": {"requests": {"cpu": "4", "memory": "32Gi"}, "limits": {"nvidia.com/gpu": 1, "memory": "64Gi"}},
        "env": cache_env(),
        "securityContext": {"runAsNonRoot": True, "runAsUser": VLLM_USER, "runAsGroup": VLLM_USER,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT, "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "vllm-cache", "mountPath": CACHE_MOUNT},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }


def cache_env() -> list[dict[str, str]]:
    """HOME and every cache vLLM, Hugging Face, Triton and torch.compile write, on the cache volume; the weights
    are local, so the hub is never asked."""
    return [{"name": "HOME", "value": CACHE_MOUNT}, {"name": "XDG_CACHE_HOME", "value": CACHE_MOUNT},
            {"name": "HF_HOME", "value": f"{CACHE_MOUNT}/huggingface"}, {"name": "HF_HUB_OFFLINE", "value": "1"},
            {"name": "VLLM_CACHE_ROOT", "value": f"{CACHE_MOUNT}/vllm"},
            {"name": "TRITON_CACHE_DIR", "value": f"{CACHE_MOUNT}/triton"}]


def placement(labels: dict[str, str], revision_label: str) -> dict[str, Any]:
    """Pod spec fields: GPU nodes, and a soft spread across nodes within each revision (`revision_label`: the
    controller's pod-template hash, so stable and canary each spread on their own)."""
    return {"nodeSelector": dict(GPU_NODE_SELECTOR), "tolerations": [dict(t) for t in GPU_TOLERATIONS],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                           "whenUnsatisfiable": "ScheduleAnyway",
                                           "labelSelector": {"matchLabels": dict(labels)},
                                           "matchLabelKeys": [revision_label]}]}


def disruption_budget(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The PodDisruptionBudget of the pods `labels` select."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"maxUnavailable": MAX_UNAVAILABLE, "selector": {"matchLabels": dict(labels)}}}


def vllm_volumes() -> list[dict[str, Any]]:
    """The pinned weights (read-only), shared memory for vLLM's workers, its caches and /tmp."""
    return [{"name": MODEL_VOLUME, "persistentVolumeClaim": {"claimName": MODEL_CLAIM, "readOnly": True}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
            {"name": "vllm-cache", "emptyDir": {"sizeLimit": "20Gi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]
