"""Every shipped workload runs as shipped: the kustomize installs and the Helm chart's profiles, each container
of the observer's image started from the Dockerfile's own install (tests/support/shipped.py) with its args, env
and mounted config, in an empty working directory, as the image's non-root user, with nothing of the repository
beside it. Each is given what it connects to — PostgreSQL (real), the Kubernetes API (the scripted stand-in,
serving the example's pods and Rollout), the simulated vLLM it scrapes or proxies — and must answer its own
liveness and readiness paths within its startup budget. The central install's two replicas start at once on an
empty PostgreSQL and migrate its schema once."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml

from observer_dev import helmchart, pgserver
from observer_dev.kubeapi import ScriptedKubeApi, pod, rollout
from tests.golden.test_kubernetes_manifests import kustomize
from tests.support.shipped import image_venv, start_container, wait_for_probes
from tests.support.sim import running_fleet, sim_config

pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(not pgserver.available(), reason="PostgreSQL is not installed (make test does)")]

TOKEN = "shipped-token"
POD_HASH = "5d8f7c9b4"


@pytest.fixture(scope="module")
def image_bin() -> Iterator[Path]:
    """The image's install, once for the module (about half a minute)."""
    with tempfile.TemporaryDirectory(prefix="observer-image-") as d:
        root = Path(d)
        root.chmod(0o755)
        yield image_venv(root)


@pytest.fixture(scope="module")
def fleet() -> Iterator[int]:
    """One simulated vLLM replica; its port."""
    cfg = sim_config(("stable",), with_dcgm=False)
    with running_fleet(cfg, total_rps=1.0):
        yield int(cfg.fleet.versions[0].openai.rsplit(":", 1)[1].split("/")[0])  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def kubeapi(fleet: int) -> Iterator[ScriptedKubeApi]:
    """The cluster the shipped central config discovers: the example Rollout's pod in llm-serving (serving on
    the simulated vLLM), the Rollout itself, and no dcgm-exporter pod yet."""
    api = ScriptedKubeApi()
    labels = {"app": "llm", "rollouts-pod-template-hash": POD_HASH, "observer.dev/role": "stable"}
    api.put("pods", pod("llm-0", labels=labels, port=fleet))
    api.put("rollouts", rollout("llm", steps=[{"setWeight": 5}], stable=POD_HASH, current=POD_HASH, step=1))
    with api.running():
        yield api


def _kubeconfig(api: ScriptedKubeApi) -> Path:
    path = Path(tempfile.mkdtemp(prefix="observer-kubeconfig-")) / "config"
    path.write_text(yaml.safe_dump(api.kubeconfig()))
    path.parent.chmod(0o755)
    path.chmod(0o644)
    return path


def _workload(objs: list[dict[str, Any]], container: str) -> dict[str, Any]:
    [owner] = [o for o in objs if o["kind"] in ("Deployment", "Rollout")
               and any(c["name"] == container for c in o["spec"]["template"]["spec"]["containers"])]
    return owner


SERVE = {  # name → (the rendered objects, replicas that start at once)
    "kustomize deploy/k8s/central": (lambda: kustomize("deploy/k8s/central"), 2),
    "kustomize deploy/k8s/single": (lambda: kustomize("deploy/k8s/single"), 1),
    "chart central": (lambda: helmchart.render(helmchart.profile("central")), 2),
    "chart single": (lambda: helmchart.render(helmchart.profile("single")), 1),
    "chart core": (lambda: helmchart.render(helmchart.profile("core")), 1),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(SERVE))
def test_the_central_observer_runs_as_shipped(name: str, image_bin: Path, kubeapi: ScriptedKubeApi,
                                              fleet: int) -> None:
    pytest.importorskip("helm_python", reason="helm-python-sdk (the dev extra) renders the chart")
    render, replicas = SERVE[name]
    objs = render()
    owner = _workload(objs, "observer")
    kubeconfig = _kubeconfig(kubeapi)
    with ExitStack() as stack:
        pg = stack.enter_context(pgserver.run_postgres())
        url = pg.database()
        secrets = {("observer-auth", "token"): TOKEN, ("observer-postgres", "url"): url}
        # What the cluster gives the pod: its service account's API server (here a kubeconfig), and, for the
        # core profile's static fleet, the simulated replica where the config names vllm-stable.
        extra = {"OBSERVER__DISCOVERY__KUBERNETES__KUBECONFIG": str(kubeconfig)}
        if name == "chart core":
            extra = {"OBSERVER__FLEET__VERSIONS": yaml.safe_dump(
                [{"name": "stable", "role": "stable", "vllm": [f"http://127.0.0.1:{fleet}/metrics"],
                  "openai": f"http://127.0.0.1:{fleet}/v1"}], default_flow_style=True).strip()}
        running = [stack.enter_context(start_container(image_bin, owner, "observer", objs, secrets=secrets,
                                                       extra_env=extra)) for _ in range(replicas)]
        took = [wait_for_probes(r) for r in running]
        assert max(took) > 0
        if replicas > 1:
            import psycopg

            with psycopg.connect(url) as conn:
                rows = conn.execute("SELECT version FROM observer_schema").fetchall()
            assert len(rows) == 1, f"two replicas starting at once left {rows} in observer_schema"


SIDECARS = {  # name → the rendered objects
    "kustomize deploy/k8s/sidecar": lambda: kustomize("deploy/k8s/sidecar"),
    "kustomize deploy/argo (the example Rollout)": lambda: kustomize("deploy/argo"),
    "chart sidecar": lambda: helmchart.render(helmchart.profile("sidecar")),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(SIDECARS))
def test_the_sampling_sidecar_runs_as_shipped(name: str, image_bin: Path, fleet: int) -> None:
    pytest.importorskip("helm_python", reason="helm-python-sdk (the dev extra) renders the chart")
    objs = SIDECARS[name]()
    owner = _workload(objs, "observer-proxy")
    if owner["kind"] == "Rollout":  # Argo adds the pod-template hash and the role to each pod's labels
        owner["spec"]["template"]["metadata"]["labels"].update(
            {"rollouts-pod-template-hash": POD_HASH, "observer.dev/role": "canary"})
    secrets = {("observer-auth", "token"): TOKEN}
    with start_container(image_bin, owner, "observer-proxy", objs, secrets=secrets, port_map={8000: fleet}) as r:
        wait_for_probes(r)
