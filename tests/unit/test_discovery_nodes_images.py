"""What discovery reads of where a version runs and what it runs: the distinct nodes of its serving pods
(observer_version_nodes) and its pods' images by a tag that moves (observer_version_mutable_image)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from observer import conventions as names
from observer.discover.collector import DiscoveryCollector
from observer.discover.kubeapi import ReflectorStats
from observer.discover.model import MAX_MUTABLE_IMAGES, mutable_image
from observer_dev.kubeapi import pod
from tests.unit.test_discovery_primitive_publish import discovery, fleet


@pytest.mark.parametrize(("image", "moves"), [
    ("vllm/vllm-openai:latest", True), ("vllm/vllm-openai", True), ("registry:5000/vllm", True),
    ("registry:5000/vllm:latest", True), ("vllm/vllm-openai:v0.33.0", False), ("registry:5000/vllm:v1", False),
    ("vllm/vllm-openai@sha256:" + "a" * 64, False), ("vllm/vllm-openai:latest@sha256:" + "b" * 64, False),
])
def test_a_tag_that_moves_is_latest_or_none_without_a_digest(image: str, moves: bool) -> None:
    assert mutable_image(image) is moves


def _exposition(d: Any) -> str:
    for r in d.reflectors():  # the test's caches stand in for reflectors: no API counters of their own
        r.stats = ReflectorStats()
    registry = CollectorRegistry()
    registry.register(DiscoveryCollector(d))
    return generate_latest(registry).decode()


def test_nodes_and_moving_images_per_version_are_exported_bounded() -> None:
    d, pods, _ = discovery([{"name": "llm", "selector": {"app": "llm"}, "port": 8000}])
    for i in range(3):  # stable: three pods on two nodes, pinned
        pods["llm"].put(pod(f"a-{i}", labels={"app": "llm", "rollouts-pod-template-hash": "aaa",
                                              "observer.dev/role": "stable"}, port=8000 + i, node=f"n{i % 2}"))
    for i in range(2):  # canary: two pods on one node, on :latest
        pods["llm"].put(pod(f"b-{i}", labels={"app": "llm", "rollouts-pod-template-hash": "bbb",
                                              "observer.dev/role": "canary"}, port=8010 + i, node="n0",
                            image="vllm/vllm-openai:latest"))
    assert set(fleet(d)) == {"aaa", "bbb"}
    st = d.states["llm"]
    assert st.nodes == {"aaa": 2, "bbb": 1}
    assert st.mutable_images == {"bbb": {"vllm/vllm-openai:latest": 2}}
    text = _exposition(d)
    assert f'{names.VERSION_NODES}{{group="llm",version="bbb"}} 1.0' in text
    assert (f'{names.VERSION_MUTABLE_IMAGE}{{group="llm",image="vllm/vllm-openai:latest",version="bbb"}} 2.0'
            in text)
    moving = [line for line in text.splitlines() if line.startswith(names.VERSION_MUTABLE_IMAGE + "{")]
    assert len(moving) == 1  # the pinned stable has none
    for i in range(MAX_MUTABLE_IMAGES + 3):  # a pod each on another moving image: the label stays bounded
        pods["llm"].put(pod(f"c-{i}", labels={"app": "llm", "rollouts-pod-template-hash": "bbb",
                                              "observer.dev/role": "canary"}, port=8020 + i,
                            image=f"registry.local/vllm-{i}"))
    fleet(d)
    assert len(d.states["llm"].mutable_images["bbb"]) == MAX_MUTABLE_IMAGES
