"""The engine is part of a version's identity: vLLM's release from each replica's /version, the pods' images by
digest (Kubernetes discovery), both in the fingerprint; the release compared between the arms
(`fairness.same_environment`), and a canary that changes the engine, or the engine and the weights at once, named
in its report."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from observer import conventions as names
from observer.analyse.canary.fairness import environment_mismatch
from observer.analyse.canary.inventory import VersionInfo
from observer.analyse.canary.results import ArmData
from observer.analyse.signals.identity import UNKNOWN, engine_version, version_url
from observer.config.canary import CanarySpec
from observer.discover.model import PodInfo
from observer.export.report.model import what_changes
from observer_dev.kubeapi import pod

DIGEST = "sha256:" + "ab" * 32


def test_the_version_endpoint_is_read_and_nothing_else_taken_for_a_version() -> None:
    assert version_url("http://10.0.0.7:8000/metrics") == "http://10.0.0.7:8000/version"
    assert engine_version({"version": "0.32.0"}) == "0.32.0"
    assert engine_version({"version": "0.11.1rc2.dev5+g1234abc"}) == "0.11.1rc2.dev5+g1234abc"
    for bad in ({"detail": "Not Found"}, {"version": "<script>"}, {"version": "9" * 41}, ["0.32.0"], None):
        assert engine_version(bad) == UNKNOWN


def test_the_fingerprint_covers_the_release_and_the_images() -> None:
    base = VersionInfo(version="v", model="m", max_model_len="2048", prompt_template_hash="",
                       sampling_defaults_hash="", root="/models/m")
    upgraded = {VersionInfo(**{**base.__dict__, k: x}).fingerprint
                for k, x in (("engine_version", "0.32.0"), ("engine_version", "0.33.0"),
                             ("images", f"vllm/vllm-openai@{DIGEST}"), ("images", "vllm/vllm-openai:v0.33.0"))}
    assert len(upgraded) == 4 and base.fingerprint not in upgraded


def test_a_pod_names_its_images_by_the_digest_the_kubelet_reports() -> None:
    obj: dict[str, Any] = pod("llm-0", labels={"app": "llm"}, port=8000, image="vllm/vllm-openai:v0.33.0")
    assert PodInfo.parse(obj).identities == ("vllm/vllm-openai:v0.33.0",)  # no status yet: the tag
    obj["status"]["containerStatuses"] = [{"name": "vllm", "image": "vllm/vllm-openai:v0.33.0",
                                           "imageID": f"docker-pullable://docker.io/vllm/vllm-openai@{DIGEST}"}]
    assert PodInfo.parse(obj).identities == (f"vllm/vllm-openai:v0.33.0@{DIGEST}",)
    obj["status"]["containerStatuses"][0]["imageID"] = ""
    assert PodInfo.parse(obj).identities == ("vllm/vllm-openai:v0.33.0",)


def test_discovery_puts_the_pods_images_on_the_version() -> None:
    from tests.unit.test_discovery_primitive_publish import discovery, fleet

    d, pods, _ = discovery([{"name": "llm", "selector": {"app": "llm"}, "port": 8000}])
    for i in range(3):
        obj: dict[str, Any] = pod(f"a-{i}", labels={"app": "llm", "rollouts-pod-template-hash": "aaa",
                                                    "observer.dev/role": "stable"}, port=8000 + i)
        if i:  # one pod not started yet: its tag only
            obj["status"]["containerStatuses"] = [{"name": "vllm", "imageID": f"vllm/vllm-openai@{DIGEST}"}]
        pods["llm"].put(obj)
    fleet(d)
    (version,) = d.states["llm"].versions
    assert version.images == ["vllm/vllm-openai:v0.33.0", f"vllm/vllm-openai:v0.33.0@{DIGEST}"]


def test_same_environment_compares_the_release_and_says_how_to_judge_an_engine_rollout() -> None:
    assert "engine_version" in CanarySpec().fairness.same_environment
    c = ArmData(environment={names.ENGINE_VERSION: "0.33.0"})
    b = ArmData(environment={names.ENGINE_VERSION: "0.32.0"})
    (why,) = environment_mismatch(CanarySpec(), c, b)
    assert "engine_version differs" in why and "drop engine_version" in why
    assert environment_mismatch(CanarySpec(), c, ArmData()) == []  # one arm does not say: not compared


@pytest.mark.parametrize(("canary", "baseline", "said"), [
    ({"engine_version": "0.33.0", "weights": "/models/m"}, {"engine_version": "0.32.0", "weights": "/models/m"},
     "An engine upgrade under the same weights: vLLM 0.32.0 → 0.33.0."),
    ({"engine_version": "0.33.0", "weights": "/models/m2"}, {"engine_version": "0.32.0", "weights": "/models/m"},
     "The engine and the weights change at once"),
    ({"engine_version": "0.32.0", "weights": "/models/m2"}, {"engine_version": "0.32.0", "weights": "/models/m"},
     "New weights on the same engine (vLLM 0.32.0): /models/m → /models/m2."),
    ({"engine_version": "0.33.0"}, {"engine_version": "0.32.0"}, "the weights are not reported"),
    ({"engine_version": "0.32.0", "weights": "/models/m"}, {"engine_version": "0.32.0", "weights": "/models/m"}, ""),
    ({}, {"engine_version": "0.32.0"}, ""),
])
def test_the_report_names_what_the_canary_changes(canary: dict[str, str], baseline: dict[str, str],
                                                  said: str) -> None:
    got = what_changes(ArmData(environment=canary), ArmData(environment=baseline))
    assert (said in got) if said else got == ""


async def test_the_scrape_loop_reads_each_replicas_release() -> None:
    from observer.analyse.scrapeloop import ScrapeLoop
    from observer.config import parse_config
    from observer.fleetview import LiveFleet

    versions = {"10.0.0.1": "0.33.0", "10.0.0.2": "0.33.0", "10.0.0.3": "0.32.0"}

    def answer(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": versions[host]})
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "llm", "max_model_len": 2048, "root": "/models/m"}]})
        return httpx.Response(404)

    cfg = parse_config("""
fleet:
  versions:
    - {name: same, model: llm, openai: "http://10.0.0.1:8000/v1", vllm: ["http://10.0.0.1:8000/metrics",
       "http://10.0.0.2:8000/metrics"]}
    - {name: mixed, model: llm, openai: "http://10.0.0.1:8000/v1", vllm: ["http://10.0.0.1:8000/metrics",
       "http://10.0.0.3:8000/metrics"]}
""", environ={})

    class Store:
        def __init__(self) -> None:
            self.info: dict[str, dict[str, dict[str, str]]] = {}

        def record_served_info(self, version: str, info: dict[str, dict[str, str]]) -> None:
            self.info[version] = info

        def served_models(self, version: str) -> dict[str, dict[str, str]]:
            return {}

    store = Store()
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        loop = ScrapeLoop(scraper=None, store=store, health=None, fleet=LiveFleet(cfg.fleet.versions),  # type: ignore[arg-type]
                          http=http, clock=lambda: 0.0, timeout_seconds=1.0)
        await loop.served_models()
    assert store.info["same"]["llm"][names.ENGINE_VERSION] == "0.33.0"
    assert store.info["mixed"]["llm"][names.ENGINE_VERSION] == "mixed"
    assert store.info["same"]["llm"]["root"] == "/models/m"
