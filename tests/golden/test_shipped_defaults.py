"""The defaults a platform team gets as shipped (docs/kubernetes.md, "Defaults as shipped"): every row the
table marks on is checked on every shipped config, chart profile and example workload, and a row marked on
without a check here fails, so the table and what ships cannot drift apart."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from observer.config import load_config, parse_config
from observer_dev import helmchart
from tests.golden.test_kubernetes_manifests import VLLM_OVERLAYS, kustomize, unbudgeted, vllm_serving_problems
from tests.unit.test_config_paths import SHIPPED_CONFIGS

pytest.importorskip("helm_python", reason="helm-python-sdk (the dev extra) bundles Helm's engine")

ROOT = Path(__file__).resolve().parents[2]
OBSERVER_IMAGE = re.compile(r"(^|/)observer(:|@|$)")


def table() -> dict[str, bool]:
    """check → whether the docs say it is on as shipped."""
    text = (ROOT / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    block = text.split("<!-- defaults -->", 1)[1].split("<!-- end defaults -->", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| feature")]
    out = {}
    for row in rows:
        first, shipped = [c.strip() for c in row.strip("|").split("|")[:2]]
        key = re.search(r"\(`([a-z-]+)`\)", first)
        assert key, f"a defaults row without its (`check`): {row[:80]}"
        out[key.group(1)] = shipped.startswith("**on**")
    return out


@functools.cache
def workloads() -> list[tuple[str, dict[str, Any]]]:
    """(where, object) of everything the chart's profiles and the kustomize trees install."""
    out = [(f"chart {p}", o) for p in helmchart.profiles() for o in helmchart.render(helmchart.profile(p))]
    return out + [(overlay, o) for overlay in ("deploy", "deploy/k8s/central", "deploy/k8s/single", *VLLM_OVERLAYS)
                  for o in kustomize(overlay)]


def _pods() -> list[tuple[str, dict[str, Any]]]:
    return [(f"{where}: {o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"])
            for where, o in workloads() if o["kind"] in ("Deployment", "Rollout", "StatefulSet")]


def json_logs(pods: list[tuple[str, dict[str, Any]]] | None = None) -> list[str]:
    missing = []
    for where, pod in _pods() if pods is None else pods:
        for c in pod["containers"]:
            if OBSERVER_IMAGE.search(c["image"]):
                env = {e["name"]: e.get("value") for e in c.get("env", [])}
                if env.get("OBSERVER_LOG_FORMAT") != "json" and "json" not in c.get("args", []):
                    missing.append(f"{where} container {c['name']}")
    return missing


def _configs() -> list[tuple[str, Any]]:
    out = [(str(p.relative_to(ROOT)), load_config(p)) for p in SHIPPED_CONFIGS]
    for where, o in workloads():
        if o["kind"] == "ConfigMap":
            for key, text in (o.get("data") or {}).items():
                if key.startswith("observer") and key.endswith(".yaml"):
                    out.append((f"{where}: ConfigMap/{o['metadata']['name']}",
                                parse_config(text, environ={"OBSERVER_AUTH_TOKEN": "x"})))
    return out


def canary_end() -> list[str]:
    return [where for where, c in _configs() if c.canary.enabled and c.canary.end.after_seconds is None]


def hardened_vllm() -> list[str]:
    problems = [p for where, pod in _pods() for p in vllm_serving_problems(where, pod)]
    by_where: dict[str, list[dict[str, Any]]] = {}
    for where, o in workloads():
        by_where.setdefault(where, []).append(o)
    return problems + [u for objs in by_where.values() for u in unbudgeted(objs)]


CHECKS: dict[str, Callable[[], list[str]]] = {"json-logs": json_logs, "canary-end": canary_end,
                                              "hardened-vllm": hardened_vllm}


def test_every_default_the_docs_call_on_has_a_check() -> None:
    on = {k for k, v in table().items() if v}
    assert on == set(CHECKS), f"rows marked on without a check: {on - set(CHECKS)}; checks no row names: " \
                              f"{set(CHECKS) - on}"
    assert {"probe", "drift-gate", "slo-check", "act"} <= {k for k, v in table().items() if not v}


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_every_shipped_config_profile_and_workload_has_it(check: str) -> None:
    assert workloads() and _pods()
    assert CHECKS[check]() == []


def test_the_checks_see_a_profile_without_the_default() -> None:
    objs = helmchart.render({**helmchart.profile("central"), "logFormat": "text"})
    pods = [(o["metadata"]["name"], o["spec"]["template"]["spec"]) for o in objs if o["kind"] == "Deployment"]
    assert json_logs(pods) == ["observer container observer"]
    ended = parse_config(yaml.safe_dump({"canary": {"end": {"after_seconds": None}}}), environ={})
    assert ended.canary.end.after_seconds is None  # what canary_end() refuses in a shipped config
