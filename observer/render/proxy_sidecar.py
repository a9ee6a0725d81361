"""The sampling proxy as a container of every pod of the example Rollout, its ConfigMap and the clients'
Service. Pure: config in, Kubernetes objects out."""

from __future__ import annotations

from typing import Any

from observer.config.spec import ObserverConfig
from observer.render.vllm_pod import drain
from observer.render.yamltext import dump_yaml

IMAGE = "observer:0.1.0"
VLLM_PORT = 8000
PROXY_PORT = 8001
PROXY_CONFIG = "observer-proxy-config"
LABELS_FILE = "/etc/podinfo/labels"


def proxy_container() -> dict[str, Any]:
    return {
        "name": "observer-proxy",
        "image": IMAGE,
        "args": ["proxy", "--config", "/etc/observer/observer.yaml", "--version-from", LABELS_FILE,
                 "--upstream", f"http://127.0.0.1:{VLLM_PORT}",
                 "--listen", f"0.0.0.0:{PROXY_PORT}", "--log-level", "INFO"],
        # One JSON object per log line, with the trace ids: what a cluster's log pipeline parses.
        "env": [{"name": "OBSERVER_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "observer-auth",
                                                                                "key": "token"}}},
                {"name": "OBSERVER_LOG_FORMAT", "value": "json"}],
        "ports": [{"name": "http-proxy", "containerPort": PROXY_PORT}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http-proxy"}, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http-proxy"}, "periodSeconds": 5},
        # Clients reach vLLM through the proxy: it stays as long as vLLM drains.
        "lifecycle": drain(),
        "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "observer-proxy-config", "mountPath": "/etc/observer", "readOnly": True},
                         {"name": "podinfo", "mountPath": "/etc/podinfo", "readOnly": True},
                         {"name": "observer-data", "mountPath": "/data"}],
    }


def volumes() -> list[dict[str, Any]]:
    return [{"name": "observer-proxy-config", "configMap": {"name": PROXY_CONFIG}},
            {"name": "podinfo", "downwardAPI": {"items": [{"path": "labels",
                                                          "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "observer-data", "emptyDir": {}}]


def proxy_config(config: ObserverConfig) -> dict[str, Any]:
    """The proxy's own config: no fleet (its version comes from the pod's labels), sampling as the central
    observer's, samples posted to the central observer."""
    s = config.sampling
    return {"sampling": {"fraction": s.fraction,
                         "reservoir": s.reservoir.model_dump(mode="json"),
                         "redaction": {"enabled": s.redaction.enabled},
                         "proxy": {"listen": f"0.0.0.0:{PROXY_PORT}", "ready_path": "/v1/models",
                                   "ingest_url": config.canary.observer_url}}}


def sidecar_objects(config: ObserverConfig, labels: dict[str, str]) -> list[dict[str, Any]]:
    """The proxy's ConfigMap and the Service clients call (port 80 → the proxy of every pod)."""
    ns = config.canary.argo_namespace
    return [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": PROXY_CONFIG, "namespace": ns, "labels": dict(labels)},
         "data": {"observer.yaml": dump_yaml(proxy_config(config))}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "llm", "namespace": ns, "labels": dict(labels)},
         "spec": {"selector": {"app": "llm"}, "ports": [{"name": "http", "port": 80, "targetPort": "http-proxy"}]}},
    ]
