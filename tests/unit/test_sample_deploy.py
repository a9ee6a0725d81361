"""The deployment artefacts agree with the code: sidecar config valid, probes and ports wired, image rules."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from observer.config import parse_config
from observer.sample.checks import check_versions, proxy_upstream
from observer.sample.proxy import OWN_PATHS

ROOT = Path(__file__).parents[2]
K8S = ROOT / "deploy" / "k8s" / "sidecar" / "vllm-with-observer-sidecar.yaml"


def docs() -> dict[str, Any]:
    return {d["kind"]: d for d in yaml.safe_load_all(K8S.read_text())}


def test_sidecar_config_is_valid_and_points_at_local_vllm() -> None:
    config = parse_config(docs()["ConfigMap"]["data"]["observer.yaml"], environ={})
    check_versions(config)
    assert proxy_upstream(config, "canary") == "http://127.0.0.1:8000"
    assert config.sampling.proxy.ingest_url


def test_probes_ports_service_and_podmonitor_line_up() -> None:
    d = docs()
    pod = d["Deployment"]["spec"]["template"]
    [vllm, proxy] = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for c in (vllm, proxy) for p in c["ports"]}
    assert proxy["livenessProbe"]["httpGet"]["path"] == "/healthz" in OWN_PATHS
    assert proxy["readinessProbe"]["httpGet"]["path"] == "/readyz" in OWN_PATHS
    assert proxy["args"][:1] == ["proxy"] and proxy["args"][proxy["args"].index("--listen") + 1].endswith(
        f":{ports['http-proxy']}")
    assert proxy["args"][proxy["args"].index("--version") + 1] == "canary"
    assert proxy["securityContext"]["runAsNonRoot"] is True
    assert d["Service"]["spec"]["ports"][0]["targetPort"] == "http-proxy"
    endpoints = {(e["port"], e["path"]) for e in d["PodMonitor"]["spec"]["podMetricsEndpoints"]}
    assert endpoints == {("http-vllm", "/metrics"), ("http-proxy", "/observer/metrics")}
    labels = pod["metadata"]["labels"]
    for selector in (d["Service"]["spec"]["selector"], d["PodMonitor"]["spec"]["selector"]["matchLabels"],
                     d["Deployment"]["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= labels.items()
    assert all(label in labels for label in d["PodMonitor"]["spec"]["podTargetLabels"])


def test_dockerfile_rules() -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}$", text, re.M)
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11\.\d+-slim-\w+$", text, re.M)  # slim, pinned patch
    assert "--constraint requirements.lock" in text  # pinned dependencies
    user = re.findall(r"^USER (\S+)$", text, re.M)
    assert user and user[-1].split(":")[0] not in ("root", "0")
    entry = re.search(r"^ENTRYPOINT (.+)$", text, re.M)
    assert entry and json.loads(entry.group(1)) == ["observer"]  # exec form
    cmd = re.search(r"^CMD (.+)$", text, re.M)
    assert cmd and isinstance(json.loads(cmd.group(1)), list)


def test_every_generated_manifest_is_in_a_kustomization() -> None:
    """`kubectl apply -k deploy` gives the whole product: every dashboard, the Rollout's proxy objects."""
    top = yaml.safe_load((ROOT / "deploy" / "kustomization.yaml").read_text())["resources"]
    argo = yaml.safe_load((ROOT / "deploy" / "argo" / "kustomization.yaml").read_text())["resources"]
    assert {f"grafana/{p.name}" for p in (ROOT / "deploy" / "grafana").glob("*.yaml")} <= set(top)
    # The cluster-scoped templates are the alternative to the namespaced ones, not an addition.
    wanted = {p.name for p in (ROOT / "deploy" / "argo").glob("*.yaml")} - {"kustomization.yaml",
                                                                             "cluster-analysis-templates.yaml"}
    assert wanted <= set(argo)


def test_the_example_rollout_carries_the_sampling_proxy_with_its_version_from_the_downward_api(
        tmp_path: Path) -> None:
    from observer.sample.checks import proxy_target
    from observer.sample.podlabels import VersionFile

    (ro,) = yaml.safe_load_all((ROOT / "deploy" / "argo" / "rollout-example.yaml").read_text())
    objs = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "deploy" / "argo" / "rollout-sidecar.yaml").read_text())}
    pod = ro["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    proxy, vllm = containers["observer-proxy"], containers["vllm"]
    args = proxy["args"]
    mounts = {m["mountPath"]: m["name"] for m in proxy["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    labels_file = Path(args[args.index("--version-from") + 1])
    podinfo = volumes[mounts[str(labels_file.parent)]]["downwardAPI"]["items"]
    assert {"path": labels_file.name, "fieldRef": {"fieldPath": "metadata.labels"}} in podinfo
    assert volumes[mounts["/etc/observer"]]["configMap"]["name"] == objs["ConfigMap"]["metadata"]["name"]
    vllm_port = next(p["containerPort"] for p in vllm["ports"] if p["name"] == "http")
    assert args[args.index("--upstream") + 1] == f"http://127.0.0.1:{vllm_port}"
    proxy_port = next(p["containerPort"] for p in proxy["ports"] if p["name"] == "http-proxy")
    assert objs["Service"]["spec"]["ports"][0]["targetPort"] == "http-proxy"
    assert objs["Service"]["spec"]["selector"].items() <= ro["spec"]["template"]["metadata"]["labels"].items()
    # The proxy's config is valid and, with the pod's labels, resolves its version and ports.
    config = parse_config(objs["ConfigMap"]["data"]["observer.yaml"], environ={})
    (tmp_path / "labels").write_text('app="llm"\nrollouts-pod-template-hash="7d9f8c6b5"\nobserver.dev/role="canary"\n')
    t = proxy_target(config, version=None, version_file=VersionFile(tmp_path / "labels"),
                     listen=args[args.index("--listen") + 1], upstream=args[args.index("--upstream") + 1])
    assert (t.version, t.role, int(t.port)) == ("7d9f8c6b5", "canary", proxy_port)
    assert config.sampling.proxy.ingest_url
