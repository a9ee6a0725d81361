"""The shipped manifests deploy: every kustomize overlay renders with `kubectl kustomize` (no cluster needed)
and every object validates strictly — Kubernetes' own OpenAPI schemas (kubernetes-validate, unknown fields
refused) for built-in kinds, the Argo Rollouts and PrometheusRule CRDs from ../shared/reference for theirs.
One label key and one observer address everywhere; the central config parses."""

from __future__ import annotations

import copy
import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from observer.config import parse_config
from observer.render.vllm_pod import cache_env
from tests.golden.test_argo_templates import validator as argo_validator
from tests.support.reference import PROMETHEUS_RULE_CRD, crd_validator

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ["deploy", "deploy/k8s/central", "deploy/k8s/single", "deploy/k8s/sidecar", "deploy/argo"]
K8S_VERSION = "1.32.0"
ADDRESS = "http://observer.observability.svc:9464"
BUILTIN = {"Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
           "ConfigMap", "Service", "Deployment", "PersistentVolumeClaim", "Secret", "PodDisruptionBudget"}

# The prometheus-operator monitor CRDs are not in tests/fixtures; these schemas hold the subset of
# ServiceMonitor / PodMonitor fields we use, written from the operator's API docs, unknown fields refused.
_ENDPOINT = {"type": "object", "additionalProperties": False,
             "properties": {"port": {"type": "string"}, "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"}}, "required": ["port"]}
_SELECTOR = {"type": "object", "additionalProperties": False,
             "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}}
_MONITOR_META = {"type": "object", "required": ["name"],
                 "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                                "labels": {"type": "object"}}, "additionalProperties": False}
MONITORS = {
    "ServiceMonitor": {"type": "object", "additionalProperties": False, "required": ["spec"],
                       "properties": {"apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {},
                                      "metadata": _MONITOR_META,
                                      "spec": {"type": "object", "additionalProperties": False,
                                               "required": ["selector", "endpoints"],
                                               "properties": {"selector": _SELECTOR,
                                                              "endpoints": {"type": "array", "items": _ENDPOINT}}}}},
    "PodMonitor": {"type": "object", "additionalProperties": False, "required": ["spec"],
                   "properties": {"apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {},
                                  "metadata": _MONITOR_META,
                                  "spec": {"type": "object", "additionalProperties": False,
                                           "required": ["selector", "podMetricsEndpoints"],
                                           "properties": {"selector": _SELECTOR,
                                                          "podTargetLabels": {"type": "array",
                                                                              "items": {"type": "string"}},
                                                          "podMetricsEndpoints": {"type": "array",
                                                                                  "items": _ENDPOINT}}}}},
}


@functools.cache
def kustomize(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (it renders kustomize overlays without a cluster)")
    out = subprocess.run([kubectl, "kustomize", str(ROOT / overlay)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {overlay} failed: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def prometheusrule_validator() -> jsonschema.Draft7Validator:
    return crd_validator(PROMETHEUS_RULE_CRD, "v1")


def validate(obj: dict[str, Any]) -> None:
    kind = obj["kind"]
    if kind in BUILTIN:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    elif kind in ("Rollout", "AnalysisTemplate", "ClusterAnalysisTemplate"):
        argo_validator(kind).validate(obj)
    elif kind == "PrometheusRule":
        prometheusrule_validator().validate(obj)
    elif kind in MONITORS:
        jsonschema.Draft7Validator(MONITORS[kind]).validate(obj)
    else:
        raise AssertionError(f"no schema for kind {kind}: add one before shipping it")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_renders_and_every_object_validates_strictly(overlay: str) -> None:
    objs = kustomize(overlay)
    assert objs
    for obj in objs:
        validate(obj)


def test_strict_validation_refuses_an_unknown_field() -> None:
    deployment = next(o for o in kustomize("deploy/k8s/central") if o["kind"] == "Deployment")
    bad = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)
    monitor = next(o for o in kustomize("deploy/k8s/central") if o["kind"] == "ServiceMonitor")
    with pytest.raises(jsonschema.ValidationError):
        validate({**monitor, "spec": {**monitor["spec"], "endpoint": []}})


def test_the_whole_install_has_what_the_central_observer_needs() -> None:
    objs = kustomize("deploy")
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    for want in [("Deployment", "observer"), ("Service", "observer"), ("ServiceAccount", "observer"),
                 ("Role", "observer-discovery"), ("RoleBinding", "observer-discovery"),
                 ("PersistentVolumeClaim", "observer-data"), ("ServiceMonitor", "observer"),
                 ("PrometheusRule", "observer-slo"), ("Rollout", "llm")]:
        assert want in kinds, want
    assert all(o["metadata"].get("namespace") for o in objs if o["kind"] not in ("Namespace",)), \
        [o["metadata"]["name"] for o in objs if not o["metadata"].get("namespace")]
    role = next(o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == "observer-discovery")
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}  # read-only


def test_the_central_config_parses_and_discovers_the_example_rollout() -> None:
    objs = kustomize("deploy")
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("observer-config"))
    cfg = parse_config(cm["data"]["observer.yaml"], environ={})
    rollout = next(o for o in objs if o["kind"] == "Rollout")
    assert cfg.discovery.kubernetes is not None
    model = cfg.discovery.kubernetes.models[0]
    assert model.rollout == rollout["metadata"]["name"]
    assert cfg.discovery.kubernetes.namespace == rollout["metadata"]["namespace"]
    assert model.selector.items() <= rollout["spec"]["template"]["metadata"]["labels"].items()
    assert model.role_label in rollout["spec"]["strategy"]["canary"]["canaryMetadata"]["labels"]
    ports = {p["name"] for c in rollout["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
    assert model.port in ports
    assert cfg.canary.observer_url == ADDRESS


def test_one_label_key_and_one_address_everywhere() -> None:
    texts = {p: p.read_text() for p in (ROOT / "deploy").rglob("*.yaml")}
    for path, text in texts.items():
        assert "observer/version" not in text and "observer.dev/version" not in text, path
        for url in re.findall(r"https?://observer[.\w-]*(?::\d+)?", text):
            assert url == ADDRESS, (path, url)


def test_the_cluster_install_is_two_replicas_on_postgresql_and_the_small_case_one_on_sqlite() -> None:
    from observer.crosscheck import check_references

    for overlay, replicas, source in (("deploy/k8s/central", 2, "prometheus"), ("deploy/k8s/single", 1, "own")):
        objs = kustomize(overlay)
        dep = next(o for o in objs if o["kind"] == "Deployment")
        cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("observer-config"))
        cfg = parse_config(cm["data"]["observer.yaml"], environ={})
        env = {e["name"] for e in dep["spec"]["template"]["spec"]["containers"][0].get("env", [])}
        assert dep["spec"]["replicas"] == replicas and cfg.canary.source == source, overlay
        assert ("OBSERVER__SAMPLING__STORE__URL" in env) == (replicas > 1), overlay  # >1 writer: PostgreSQL
        assert bool(cfg.canary.prometheus.replica_labels) == (replicas > 1 and source == "prometheus")
        assert check_references(cfg) == [], overlay


def _pod_specs(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"]) for o in objs
            if o["kind"] in ("Deployment", "Rollout", "StatefulSet")]


def vllm_serving_problems(name: str, pod: dict[str, Any]) -> list[str]:
    """What keeps a pod running vLLM from serving a model in a real cluster, in words (empty: none)."""
    problems: list[str] = []
    mounts_of = {v["name"]: v for v in pod.get("volumes", [])}
    for c in pod["containers"]:
        if "vllm" not in c["image"]:
            continue
        where = f"{name} container {c['name']}"
        startup = c.get("startupProbe")
        if startup is None:
            problems.append(f"{where}: no startupProbe (liveness kills a model still loading)")
        elif startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3) < 600:
            problems.append(f"{where}: startupProbe allows under 10 minutes for the model to load")
        if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/health":
            problems.append(f"{where}: readiness is not vLLM's /health")
        if "preStop" not in c.get("lifecycle", {}):
            problems.append(f"{where}: no preStop drain")
        if "nvidia.com/gpu" not in c.get("resources", {}).get("limits", {}):
            problems.append(f"{where}: no nvidia.com/gpu limit")
        model = c["args"][c["args"].index("--model") + 1]
        if model.rstrip("/").rsplit("/", 1)[-1] in ("current", "latest"):
            problems.append(f"{where}: --model {model} is a mutable path that hides a weight swap")
        mount = next((m for m in c.get("volumeMounts", []) if model.startswith(m["mountPath"].rstrip("/") + "/")),
                     None)
        if mount is None:
            problems.append(f"{where}: nothing is mounted at --model {model}")
        elif not mount.get("readOnly") or mount["name"] not in mounts_of:
            problems.append(f"{where}: the model volume {mount['name']} is not a read-only volume of the pod")
        sc = c.get("securityContext", {})
        for field, want in (("runAsNonRoot", True), ("allowPrivilegeEscalation", False),
                            ("readOnlyRootFilesystem", True)):
            if sc.get(field) is not want:
                problems.append(f"{where}: securityContext.{field} is not {str(want).lower()}")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            problems.append(f"{where}: capabilities are not all dropped")
        writable = {m["mountPath"] for m in c.get("volumeMounts", []) if not m.get("readOnly")}
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        # The hand-written manifests and the chart repeat the rendered example's cache settings: one source.
        moved = [e["name"] for e in cache_env() if env.get(e["name"]) != e["value"]]
        if sc.get("readOnlyRootFilesystem") and moved:
            problems.append(f"{where}: the cache environment differs from observer/render/vllm_pod.py "
                            f"cache_env(): {', '.join(moved)}")
        if sc.get("readOnlyRootFilesystem") and ("/tmp" not in writable or env.get("HOME") not in writable):
            problems.append(f"{where}: a read-only root filesystem without a writable /tmp and HOME (vLLM's "
                            f"caches)")
    runs_vllm = any("vllm" in c["image"] for c in pod["containers"])
    if runs_vllm:
        if not pod.get("nodeSelector") and not pod.get("affinity", {}).get("nodeAffinity"):
            problems.append(f"{name}: no GPU node placement (nodeSelector or node affinity)")
        if not any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])):
            problems.append(f"{name}: does not tolerate the nvidia.com/gpu taint of GPU nodes")
        spread = [t for t in pod.get("topologySpreadConstraints", [])
                  if t.get("topologyKey") == "kubernetes.io/hostname"]
        anti = pod.get("affinity", {}).get("podAntiAffinity")
        if not spread and not anti:
            problems.append(f"{name}: no spread across nodes (a node's loss takes every replica)")
        grace = pod.get("terminationGracePeriodSeconds")
        longest = max((c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
                       for c in pod["containers"]), default=0)
        if grace is None:
            problems.append(f"{name}: no terminationGracePeriodSeconds sized for the drain")
        elif grace <= longest:
            problems.append(f"{name}: terminationGracePeriodSeconds {grace} leaves no time after the "
                            f"{longest} s preStop drain")
        for c in pod["containers"]:
            if c["name"] == "observer-proxy":
                for probe in ("livenessProbe", "readinessProbe"):
                    if probe not in c:
                        problems.append(f"{name}: the sampling sidecar has no {probe}")
                if "preStop" not in c.get("lifecycle", {}):
                    problems.append(f"{name}: the sampling sidecar stops before vLLM has drained")
    return problems


def unbudgeted(objs: list[dict[str, Any]]) -> list[str]:
    """The vLLM workloads among `objs` that no PodDisruptionBudget beside them covers (a drain could take every
    replica at once), by name."""
    budgets = [o["spec"]["selector"].get("matchLabels", {}) for o in objs if o["kind"] == "PodDisruptionBudget"]
    out = []
    for o in objs:
        if o["kind"] not in ("Deployment", "Rollout", "StatefulSet"):
            continue
        template = o["spec"]["template"]
        labels = template["metadata"].get("labels", {})
        if any("vllm" in c["image"] for c in template["spec"]["containers"]) and not any(
                b and all(labels.get(k) == v for k, v in b.items()) for b in budgets):
            out.append(f"{o['kind']}/{o['metadata']['name']}")
    return out


VLLM_OVERLAYS = ["deploy/k8s/sidecar", "deploy/argo"]


@pytest.mark.parametrize("overlay", VLLM_OVERLAYS)
def test_every_vllm_workload_would_serve_a_model(overlay: str) -> None:
    objs = kustomize(overlay)
    pods = [(n, p) for n, p in _pod_specs(objs) if any("vllm" in c["image"] for c in p["containers"])]
    assert pods, f"{overlay} ships no vLLM workload"
    assert [problem for n, p in pods for problem in vllm_serving_problems(n, p)] == []
    assert unbudgeted(objs) == [], "a vLLM workload without a PodDisruptionBudget"


def test_the_serving_check_refuses_the_old_example() -> None:
    old = {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.33.0",
                           "args": ["--model", "/models/current"],
                           "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}}}]}
    found = " ".join(vllm_serving_problems("Rollout/llm", old))
    for missing in ("startupProbe", "preStop", "nvidia.com/gpu limit", "mutable path", "nothing is mounted",
                    "terminationGracePeriodSeconds", "runAsNonRoot", "allowPrivilegeEscalation",
                    "readOnlyRootFilesystem", "capabilities", "GPU node placement", "nvidia.com/gpu taint",
                    "spread across nodes"):
        assert missing in found, missing
    shipped = next(p for n, p in _pod_specs(kustomize("deploy/k8s/sidecar")) if n.startswith("Deployment/"))
    drifted = copy.deepcopy(shipped)
    vllm = next(c for c in drifted["containers"] if c["name"] == "vllm")
    vllm["env"] = [e for e in vllm["env"] if e["name"] != "TRITON_CACHE_DIR"]
    assert "TRITON_CACHE_DIR" in " ".join(vllm_serving_problems("Deployment/x", drifted))
    workload = {"kind": "Deployment", "metadata": {"name": "llm"},
                "spec": {"template": {"metadata": {"labels": {"app": "llm"}}, "spec": old}}}
    assert unbudgeted([workload]) == ["Deployment/llm"]
    other = {"kind": "PodDisruptionBudget", "spec": {"selector": {"matchLabels": {"app": "other"}}}}
    assert unbudgeted([workload, other]) == ["Deployment/llm"]
