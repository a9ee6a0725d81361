"""A vLLM pod that would serve: what every example workload running vLLM carries. Pure: names in, objects out.

A large model loads for minutes, so liveness and readiness wait behind a startup probe sized for the load;
a pod leaving keeps answering while its endpoint is removed everywhere and its in-flight generations finish;
the weights are an immutable, pinned revision on a read-only volume, so a weight swap is a new pod template
(a new version identity), never a file changed under a running version.
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
        "volumeMounts": [{"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT, "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }


def vllm_volumes() -> list[dict[str, Any]]:
    """The pinned weights (read-only) and shared memory for vLLM's workers."""
    return [{"name": MODEL_VOLUME, "persistentVolumeClaim": {"claimName": MODEL_CLAIM, "readOnly": True}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}]
