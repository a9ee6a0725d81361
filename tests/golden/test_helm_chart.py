"""The Helm chart, linted and rendered by Helm's own engine (Helm v4's Go library from PyPI's helm-python-sdk):
every documented profile renders, every object validates strictly, the config it installs is one the observer
accepts from an empty working directory, bad values fail with the key path, RBAC is least privilege, the chart
packages, and the kustomize tree is the chart's rendering."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from observer.config import load_config, parse_config
from observer.crosscheck import check_references
from observer_dev import helmchart
from tests.golden.test_kubernetes_manifests import kustomize, unbudgeted, validate, vllm_serving_problems

helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the dev extra) bundles Helm's engine")

PROFILES = helmchart.profiles()
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ClusterAnalysisTemplate"}


@functools.cache
def rendered(profile: str) -> list[dict[str, Any]]:
    return helmchart.render(helmchart.profile(profile))


def test_the_documented_profiles_are_there() -> None:
    assert {"central", "single", "sidecar", "core"} <= set(PROFILES)


@pytest.mark.parametrize("profile", PROFILES)
def test_the_chart_lints_clean(profile: str) -> None:
    result = helmchart.lint(helmchart.profile(profile))
    assert result["errors"] == []
    # Helm's severities: 1 info ("icon is recommended"), 2 warning, 3 error.
    assert [m for m in result["messages"] if m["severity"] > 1] == []


@pytest.mark.parametrize("profile", PROFILES)
def test_every_rendered_object_validates_strictly(profile: str) -> None:
    objs = rendered(profile)
    assert objs
    for obj in objs:
        validate(obj)
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace"), f"{obj['kind']}/{obj['metadata']['name']} names no namespace"


def _installed_config(objs: list[dict[str, Any]]) -> str:
    [cm] = [o for o in objs if o["kind"] == "ConfigMap" and "observer.yaml" in o.get("data", {})]
    text: str = cm["data"]["observer.yaml"]
    return text


@pytest.mark.parametrize("profile", PROFILES)
def test_the_installed_config_starts_from_an_empty_working_directory(
        profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    etc = tmp_path / "etc-observer"
    etc.mkdir()
    (etc / "observer.yaml").write_text(_installed_config(rendered(profile)))
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.chdir(data)
    assert check_references(load_config(etc / "observer.yaml")) == []


@pytest.mark.parametrize(("values", "where"), [
    ({"bogus": 1}, "additional properties 'bogus' not allowed"),
    ({"replicas": "two"}, "/replicas"),
    ({"image": {"repository": "observer", "tga": "1"}}, "/image"),
    ({"mode": "sidecar"}, "/sidecar/upstream"),
    ({"mode": "sidecar", "sidecar": {"upstream": "127.0.0.1:8000", "version": "canary"}}, "/sidecar/upstream"),
    ({"mode": "central", "postgres": {"existingSecret": "", "key": "url"}}, "/postgres/existingSecret"),
    ({"mode": "cluster"}, "/mode"),
    ({"config": {"quality": {"golden_dirz": ["x"]}}}, "/config/quality"),
    ({"config": {"scrape": {"interval_seconds": "often"}}}, "/config/scrape/interval_seconds"),
])
def test_bad_values_fail_lint_and_template_with_the_key_path(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=where):
        helmchart.render(values)
    result = helmchart.lint(values)
    assert any(where in e for e in result["errors"]), result["errors"]


def _roles(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == "Role"}


def test_rbac_grants_only_what_the_configs_discovery_reads() -> None:
    for profile in PROFILES:
        objs = rendered(profile)
        assert not [o for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding")], profile
        for role in _roles(objs).values():
            for rule in role["rules"]:
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, (profile, rule)
                assert "secrets" not in rule["resources"]
    central = _roles(rendered("central"))
    assert central["observer-discovery"]["metadata"]["namespace"] == "llm-serving"
    assert central["observer-dcgm-discovery"]["metadata"]["namespace"] == "gpu-operator"
    assert any("rollouts" in r["resources"] for r in central["observer-discovery"]["rules"])
    assert _roles(rendered("core")) == {} and _roles(rendered("sidecar")) == {}
    # No Rollout named, no dcgm-exporter: neither is granted.
    plain = {"config": {"discovery": {"kubernetes": {"namespace": "models", "dcgm": None, "models": [
        {"name": "llm", "selector": {"app": "llm"}, "rollout": None, "port": "http"}]}}}}
    roles = _roles(helmchart.render(plain))
    assert set(roles) == {"observer-discovery"}
    assert roles["observer-discovery"]["metadata"]["namespace"] == "models"
    assert not any("rollouts" in r["resources"] for r in roles["observer-discovery"]["rules"])


def test_rbac_grants_the_collections_of_the_primitives_the_models_name() -> None:
    def granted(models: list[dict[str, Any]]) -> set[tuple[str, str]]:
        values = {"config": {"discovery": {"kubernetes": {"dcgm": None, "models": models}}}}
        role = _roles(helmchart.render(values))["observer-discovery"]
        return {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}

    def model(name: str, primitive: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "selector": {"app": name}, "primitive": primitive}

    rewrite = granted([model("lora", {"kind": "model_rewrite", "name": "lora", "model": "lora"})])
    assert {("llm-d.ai", "inferencemodelrewrites"), ("inference.networking.x-k8s.io", "inferencemodelrewrites"),
            ("inference.networking.k8s.io", "inferencepools")} <= rewrite
    assert not {r for _, r in rewrite} & {"rollouts", "httproutes", "llminferenceservices", "inferenceservices"}
    every = granted([model("a", {"kind": "kserve_llmisvc", "name": "a"}), model("b", {"kind": "kserve_isvc",
                     "name": "b"}), model("c", {"kind": "httproute_pools", "name": "c"})])
    assert {("serving.kserve.io", "llminferenceservices"), ("serving.kserve.io", "inferenceservices"),
            ("gateway.networking.k8s.io", "httproutes"), ("inference.networking.k8s.io", "inferencepools")} <= every
    assert not {r for _, r in every} & {"rollouts", "inferencemodelrewrites"}


def test_the_sidecar_profile_is_a_vllm_pod_that_would_serve() -> None:
    objs = rendered("sidecar")
    [deployment] = [o for o in objs if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert vllm_serving_problems("Deployment/observer-vllm", pod) == []
    assert unbudgeted(objs) == []
    no_budget = helmchart.render({"mode": "sidecar", "sidecar": {"upstream": "http://127.0.0.1:8000", "version": "v1",
                                                                 "vllm": {"maxUnavailable": None}}})
    assert unbudgeted(no_budget) == ["Deployment/observer-vllm"]  # null turns the budget off, and the check sees it
    proxy = next(c for c in pod["containers"] if c["name"] == "observer-proxy")
    assert proxy["args"][proxy["args"].index("--upstream") + 1] == "http://127.0.0.1:8000"


def test_the_kustomize_tree_is_the_charts_rendering() -> None:
    for name, text in helmchart.kustomize_files().items():
        assert (helmchart.KUSTOMIZE / name).read_text() == text, (
            f"deploy/k8s/central/{name} differs from the chart: run `python -m observer_dev.helmchart kustomize`")


def _container(objs: list[dict[str, Any]], kind: str = "Deployment") -> dict[str, Any]:
    [d] = [o for o in objs if o["kind"] == kind]
    c: dict[str, Any] = d["spec"]["template"]["spec"]["containers"][0]
    return {k: v for k, v in c.items() if k != "imagePullPolicy"}


@pytest.mark.parametrize("profile", ["central", "single"])
def test_chart_and_kustomize_agree_where_they_overlap(profile: str) -> None:
    chart, kust = rendered(profile), kustomize(f"deploy/k8s/{profile}")
    assert _container(chart) == _container(kust)
    # The config as the process reads it: the file, then the container's plain environment overrides.
    environ = {e["name"]: e["value"] for e in _container(chart)["env"] if "value" in e}
    assert parse_config(_installed_config(chart), environ=environ) == parse_config(_installed_config(kust),
                                                                                   environ=environ)
    kinds = {o["kind"] for o in chart} & {o["kind"] for o in kust}
    assert {"Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "ServiceMonitor"} <= kinds


def test_the_chart_packages_and_the_package_renders_the_same(tmp_path: Path) -> None:
    with helm.Chart.load(helmchart.CHART) as chart:
        archive = Path(chart.save(tmp_path))
    assert archive.name == "observer-0.1.0.tgz"
    assert helmchart.render(helmchart.profile("central"), chart=archive) == rendered("central")


def test_the_notes_say_where_to_look_first() -> None:
    with helm.Chart.load(helmchart.CHART) as chart:
        notes = chart.render(values=helmchart.profile("central"), name="observer", namespace="observability")
    text = next(v for k, v in notes.items() if k.endswith("NOTES.txt"))
    assert "/report" in text and "/readyz" in text and "observer-postgres" in text
    assert "Off as shipped" in text and "probe" in text  # and how to turn each one on
    assert yaml.safe_load((helmchart.CHART / "Chart.yaml").read_text())["appVersion"] == "0.1.0"


def test_the_image_and_the_chart_name_the_packages_version_and_source() -> None:
    import re
    import tomllib

    from observer.config.slo import SLOSpec

    root = helmchart.ROOT
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    licence = tomllib.loads((root / "pyproject.toml").read_text())["project"]["license"]
    dockerfile = (root / "deploy" / "Dockerfile").read_text()
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', dockerfile))
    assert re.search(rf"^ARG VERSION={re.escape(version)}$", dockerfile, re.M)
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.licenses"] == licence
    # The source is the repository the runbook links point into.
    assert SLOSpec().runbook_base_url.startswith(labels["org.opencontainers.image.source"] + "/")
    chart = yaml.safe_load((helmchart.CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == version


@pytest.mark.parametrize("profile", ["central", "sidecar"])
def test_the_conversation_secret_reaches_the_observer_and_the_sidecar_alike(profile: str) -> None:
    """Conversation keys are HMACs with one secret: the observer and every sidecar read the same Secret key, and
    without it neither gets the variable (drift then tests time slices, and says so)."""
    def envs(values: dict[str, Any]) -> list[dict[str, Any]]:
        return [e for o in helmchart.render(values) if o["kind"] == "Deployment"
                for c in o["spec"]["template"]["spec"]["containers"] for e in c.get("env", ())
                if e["name"] == "OBSERVER_CONVERSATION_SECRET"]

    values = helmchart.profile(profile)
    assert envs(values) == []
    found = envs({**values, "conversations": {"existingSecret": "observer-conversations", "key": "hmac"}})
    assert found and all(e["valueFrom"]["secretKeyRef"] == {"name": "observer-conversations", "key": "hmac"}
                         for e in found)


def test_actor_mode_adds_patch_on_the_sources_own_objects_only_where_a_model_asks() -> None:
    def rules(act: bool) -> list[dict[str, Any]]:
        values = {"config": {"discovery": {"kubernetes": {"dcgm": None, "models": [
            {"name": "chat", "selector": {"app": "chat"}, "primitive": {"kind": "ome", "name": "chat", "act": act}},
            {"name": "gen", "selector": {"app": "gen"}, "primitive": {"kind": "dynamo", "name": "gen"}}]}}}}
        return list(_roles(helmchart.render(values))["observer-discovery"]["rules"])

    writes = [r for r in rules(True) if set(r["verbs"]) - {"get", "list", "watch"}]
    assert writes == [{"apiGroups": ["ome.io"], "resources": ["inferenceservices"], "verbs": ["patch"]}]
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in rules(False))
