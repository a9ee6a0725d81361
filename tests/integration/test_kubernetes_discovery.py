"""`observer serve` with Kubernetes discovery follows a recorded Argo rollout, against the scripted API.

The API server is the scripted stand-in (tests/support/kubeapi.py: list/watch, bookmarks, drops, 410);
the vLLM pods are the simulator's replicas, each pod's container port pointing at one of them. The
rollout: stable `aaa` (2 pods) → canary `bbb` at 5% → 25% → 50% → promote (old pods terminate), then a
second revision `ccc` that is aborted. No config change along the way: versions, roles, the judge's
expected weight and the pairs come from the API. The watch is dropped and history compacted mid-way.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from observer.config import parse_config
from observer_dev.kubeapi import ScriptedKubeApi, pod, rollout
from tests.support.observer_proc import run_observer, wait_until
from tests.support.prom import free_port
from tests.support.proxy_proc import run_proxy
from tests.support.sim import running_fleet

pytestmark = pytest.mark.integration

PODS = "llm-serving/pods"
ROLLOUTS = "llm-serving/rollouts.argoproj.io"
STEPS: list[dict[str, Any]] = [{"setWeight": 5}, {"pause": {}}, {"setWeight": 25}, {"pause": {}},
                               {"setWeight": 50}, {"pause": {}}]
REPLICAS = {"aaa": 2, "bbb": 2, "ccc": 1}


def _sim_config() -> tuple[Any, dict[str, list[int]]]:
    ports = {h: [free_port() for _ in range(n)] for h, n in REPLICAS.items()}
    versions = [{"name": h, "vllm": [f"http://127.0.0.1:{p}/metrics" for p in ps],
                 "expected_traffic_weight": 0.5 if h == "aaa" else 0.25} for h, ps in ports.items()]
    return parse_config(yaml.safe_dump({"fleet": {"versions": versions}}), environ={}), ports


def _observer_config(kubeconfig: Path) -> Any:
    data = {"discovery": {"kubernetes": {
        "namespace": "llm-serving", "kubeconfig": str(kubeconfig), "dcgm": None, "remove_after_seconds": 1.0,
        "backoff_seconds": 0.05, "max_backoff_seconds": 0.2, "watch_timeout_seconds": 30,
        "models": [{"name": "llm", "selector": {"app": "llm"}, "rollout": "llm"}]}},
        "scrape": {"interval_seconds": 0.5, "timeout_seconds": 0.5, "window_seconds": 30},
        "canary": {"interval_seconds": 1.0, "window_seconds": 30},
        "sampling": {"store": {"path": str(Path(tempfile.mkdtemp()) / "s.db")}}}
    return parse_config(yaml.safe_dump(data), environ={})


def _pod(h: str, i: int, port: int, *, ready: bool = True) -> dict[str, Any]:
    return pod(f"llm-{h}-{i}", labels={"app": "llm", "rollouts-pod-template-hash": h}, port=port, ready=ready)


def _series(url: str, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = httpx.get(url + "/metrics", timeout=5).text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == family:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def _roles(url: str) -> dict[str, str]:
    return {dict(k)["version"]: dict(k)["role"] for k in _series(url, "observer_version_role")}


def _verdict(url: str) -> dict[str, Any]:
    r = httpx.get(url + "/api/v1/canary/verdict", params={"canary": "canary", "baseline": "stable"}, timeout=10)
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


def test_serve_follows_a_recorded_rollout_promotion_and_abort_without_config_changes(tmp_path: Path) -> None:
    api = ScriptedKubeApi()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")
    sim_cfg, ports = _sim_config()
    with api.running(), running_fleet(sim_cfg, seed=3):
        # steady state: stable aaa, 2 pods, one still starting
        api.put(ROLLOUTS, rollout("llm", steps=STEPS, stable="aaa", current="aaa", step=len(STEPS)))
        api.put(PODS, _pod("aaa", 0, ports["aaa"][0]))
        api.put(PODS, _pod("aaa", 1, ports["aaa"][1], ready=False))
        with run_observer(_observer_config(kubeconfig)) as obs:
            obs.wait_ready(timeout=20)
            wait_until(lambda: _roles(obs.url) == {"aaa": "stable"}, timeout=10)
            wait_until(lambda: _series(obs.url, "observer_discovery_pods").get(
                (("group", "llm"), ("role", "stable"), ("version", "aaa"))) == 1.0, timeout=10)
            api.put(PODS, _pod("aaa", 1, ports["aaa"][1]))  # becomes Ready: joins
            wait_until(lambda: _series(obs.url, "observer_replicas").get(
                (("model", "sim-model"), ("version", "aaa"))) == 2.0
                or any(dict(k).get("version") == "aaa" and v == 2.0
                       for k, v in _series(obs.url, "observer_replicas").items()), timeout=15)

            # canary bbb at 5%: the gate's `canary=canary&baseline=stable` resolves to the hashes
            api.put(PODS, _pod("bbb", 0, ports["bbb"][0]))
            api.put(ROLLOUTS, rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=0))
            wait_until(lambda: _roles(obs.url) == {"aaa": "stable", "bbb": "canary"}, timeout=10)
            v = _verdict(obs.url)
            assert (v["canary"], v["baseline"]) == ("bbb", "aaa")
            assert v["split"]["expected"] == pytest.approx(0.05)

            # the API server restarts mid-rollout and forgets history: discovery relists and carries on
            api.drop_watches()
            api.put(PODS, _pod("bbb", 1, ports["bbb"][1]))
            api.compact()
            api.put(ROLLOUTS, rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=2))
            wait_until(lambda: _verdict(obs.url)["split"]["expected"] == pytest.approx(0.25), timeout=10)
            wait_until(lambda: any(dict(k).get("version") == "bbb" and v == 2.0
                                   for k, v in _series(obs.url, "observer_replicas").items()), timeout=15)
            api.put(ROLLOUTS, rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=4))
            wait_until(lambda: _verdict(obs.url)["split"]["expected"] == pytest.approx(0.5), timeout=10)
            wait_until(lambda: _series(obs.url, "observer_rollout_canary_weight_ratio")
                       == {(("group", "llm"),): 0.5}, timeout=10)
            # the periodic judge exports the pair's verdict
            wait_until(lambda: any(dict(k).get("canary") == "bbb"
                                   for k in _series(obs.url, "observer_canary_verdict")), timeout=15)
            requests_before = _requests(obs.url, "bbb")

            # promote: bbb becomes stable under the same name (its counts continue), aaa's pods terminate
            api.put(ROLLOUTS, rollout("llm", steps=STEPS, stable="bbb", current="bbb", step=len(STEPS)))
            wait_until(lambda: _roles(obs.url) == {"aaa": "other", "bbb": "stable"}, timeout=10)
            assert _series(obs.url, "observer_rollout_stale_revision_pods") == {(("group", "llm"),): 2.0}
            assert _requests(obs.url, "bbb") >= requests_before  # same series, not restarted
            for i in range(2):
                api.delete(PODS, f"llm-aaa-{i}")
            wait_until(lambda: _roles(obs.url) == {"bbb": "stable"}, timeout=10,
                       message=lambda: f"roles {_roles(obs.url)}")  # old series end
            wait_until(lambda: not any(dict(k).get("version") == "aaa"
                                       for k in _series(obs.url, "observer_replicas")), timeout=10)
            assert _verdict(obs.url)["verdict"] == "nodata"  # no canary now: nothing to judge

            # a second revision ccc starts and is aborted: its series end cleanly
            api.put(PODS, _pod("ccc", 0, ports["ccc"][0]))
            api.put(ROLLOUTS, rollout("llm", steps=STEPS, stable="bbb", current="ccc", step=0))
            wait_until(lambda: _roles(obs.url) == {"bbb": "stable", "ccc": "canary"}, timeout=10)
            api.put(ROLLOUTS, rollout("llm", steps=STEPS, stable="bbb", current="ccc", step=0, aborted=True))
            wait_until(lambda: _verdict(obs.url)["split"]["expected"] in (None, 0.0), timeout=10)
            api.delete(PODS, "llm-ccc-0")
            wait_until(lambda: _roles(obs.url) == {"bbb": "stable"}, timeout=10)
            wait_until(lambda: not any(dict(k).get("canary") == "ccc"
                                       for k in _series(obs.url, "observer_canary_verdict")), timeout=10)
            relists = _series(obs.url, "observer_discovery_relists_total")
            assert relists.get((("reason", "gone"), ("resource", "pods (llm)")), 0) >= 1 or \
                relists.get((("reason", "gone"), ("resource", "rollouts.argoproj.io")), 0) >= 1, relists


def _requests(url: str, version: str) -> float:
    return sum(v for k, v in _series(url, "observer_requests_total").items() if dict(k).get("version") == version)


def test_serve_starts_when_the_api_server_is_down_and_readyz_says_why(tmp_path: Path) -> None:
    api = ScriptedKubeApi()  # not started yet
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")
    with run_observer(_observer_config(kubeconfig)) as obs:
        def reason() -> str:
            r = httpx.get(obs.url + "/readyz", timeout=5)
            return str(r.json().get("reason", "")) if r.status_code == 503 else ""
        wait_until(lambda: "unreachable" in reason(), timeout=10)
        assert "kubernetes discovery has not listed yet" in reason()
        errors = _series(obs.url, "observer_discovery_errors_total")
        assert any(dict(k)["reason"] == "unreachable" for k in errors)
        api.put(ROLLOUTS, rollout("llm", steps=STEPS, stable="aaa", current="aaa", step=None))
        api.forbidden.add(PODS)
        with api.running():
            wait_until(lambda: "may not list pods" in reason(), timeout=10)
            api.forbidden.clear()
            obs.wait_ready(timeout=15)
    assert json.dumps  # keep import used when trimming asserts


def test_a_rollout_pods_sidecar_takes_its_version_from_the_downward_api_and_the_central_ingest_knows_it(
        tmp_path: Path) -> None:
    """The sidecar reads `rollouts-pod-template-hash` from the labels file (no version in its manifest), the
    central observer discovered that hash as a version, so the samples are accepted; Argo's relabelling at
    promotion (role canary → stable) is picked up from the file, not from an environment variable."""

    from tests.support.scripted_openai import ScriptedUpstream

    api = ScriptedKubeApi()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")
    labels = tmp_path / "labels"
    labels.write_text('app="llm"\nobserver.dev/role="canary"\nrollouts-pod-template-hash="bbb"\n')
    data = yaml.safe_load(yaml.safe_dump(_observer_config(kubeconfig).model_dump(mode="json", exclude_none=True)))
    data["server"]["auth_token"] = "tok"
    central = parse_config(yaml.safe_dump(data), environ={})
    with api.running(), ScriptedUpstream() as upstream:
        api.put(PODS, _pod("bbb", 0, upstream.port))
        with run_observer(central, areas=["discover", "sample"]) as obs:
            obs.wait_ready(timeout=20)
            config = tmp_path / "proxy.yaml"
            config.write_text(f"sampling: {{fraction: 1.0, reservoir: {{window_seconds: 0.2}}, "
                              f"store: {{path: '{tmp_path / 'unused.db'}'}}}}\n")
            with run_proxy(config, "--version-from", str(labels), "--version-refresh-seconds", "0.2",
                           "--upstream", upstream.url, "--ingest-url", obs.url, log_level="INFO",
                           env={"OBSERVER_AUTH_TOKEN": "tok"}) as proxy:
                r = httpx.post(proxy.url + "/v1/completions", json={"prompt": "hi"}, timeout=10)
                assert r.status_code == 200
                labels.write_text('app="llm"\nobserver.dev/role="stable"\nrollouts-pod-template-hash="bbb"\n')

                def stored() -> int:
                    rows = httpx.get(obs.url + "/api/v1/samples", params={"version": "bbb"},
                                     headers={"Authorization": "Bearer tok"}, timeout=5).json()["samples"]
                    return len(rows)
                wait_until(lambda: stored() >= 1, timeout=15)
                time.sleep(0.6)
            out = proxy.output
            assert "version bbb (role canary) from the pod's labels" in out, out
            assert "role canary → stable" in out, out
            assert "Traceback" not in out


def test_the_sidecar_names_a_missing_label_and_the_mount_it_needs(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "c.yaml"
    config.write_text("sampling: {}\n")
    labels = tmp_path / "labels"
    labels.write_text('app="llm"\n')
    base = [sys.executable, "-m", "observer", "proxy", "--config", str(config), "--upstream", "http://127.0.0.1:9"]
    out = subprocess.run([*base, "--version-from", str(labels)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no label 'rollouts-pod-template-hash'" in out.stderr, out.stderr
    out = subprocess.run([*base, "--version-from", str(tmp_path / "nope")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "downwardAPI" in out.stderr, out.stderr


def test_discovered_versions_are_golden_replayed_and_live_scored_without_a_static_list() -> None:
    """No fleet.versions: the two Rollout revisions come from the scripted API, their OpenAI URL from the pods'
    addresses; each gets golden replays at the first look and live scores of its ingested samples."""
    from tests.support import discovered_quality

    out = discovered_quality.run(deadline_s=60.0)
    assert all(n > 0 for n in out.golden_replayed.values()), out
    assert all(n > 0 for n in out.live_scored.values()), out
