"""The live fleet and the signal store following it: pods join and leave without a version's totals
stepping down; a promoted version keeps its history; a removed one's series end."""

from __future__ import annotations

from collections.abc import Sequence

from observer.analyse.signals import SignalStore
from observer.config.fleet import VersionSpec
from observer.conventions import vllm as v
from observer.fleetview import LiveFleet, VersionNames
from tests.unit.test_signals_window import V033, feed, scrape


def _spec(name: str, *urls: str, role: str = "other") -> VersionSpec:
    return VersionSpec(name=name, role=role, vllm=[f"http://{u}/metrics" for u in urls])  # type: ignore[arg-type]


def test_static_names_win_and_listeners_see_each_change_once() -> None:
    fleet = LiveFleet([_spec("stable", "a:1")])
    seen: list[Sequence[VersionSpec]] = []
    fleet.subscribe(seen.append)
    assert fleet.replace("kubernetes", [_spec("aaa", "b:1"), _spec("stable", "c:1")])
    assert [x.name for x in fleet.versions()] == ["stable", "aaa"]
    assert fleet.shadowed == {"stable"}
    assert fleet.version("stable") is not None and fleet.version("stable").vllm == ["http://a:1/metrics"]  # type: ignore[union-attr]
    assert not fleet.replace("kubernetes", [_spec("aaa", "b:1"), _spec("stable", "c:1")])  # no change
    assert len(seen) == 1 and fleet.generation == 1
    names = VersionNames(fleet)
    assert "aaa" in names and "bbb" not in names and sorted(names) == ["aaa", "stable"] and len(names) == 2


def test_a_pod_leaving_freezes_its_counts_and_one_joining_starts_from_a_baseline() -> None:
    store = SignalStore([_spec("aaa", "p0:1", "p1:1")], window_seconds=300, stale_after_seconds=60)
    feed(store, 0.0, **{"p0:1": scrape(V033, 1.0), "p1:1": scrape(V033, 1.0)})
    feed(store, 10.0, **{"p0:1": scrape(V033, 2.0), "p1:1": scrape(V033, 2.0)})
    two_pods = store.counter_delta("aaa", v.GENERATION_TOKENS, since=0.0)
    assert two_pods is not None and two_pods > 0
    store.set_versions([_spec("aaa", "p0:1", "p2:1", role="stable")])  # p1 left, p2 joined; role changed
    feed(store, 20.0, **{"p0:1": scrape(V033, 2.0), "p2:1": scrape(V033, 50.0)})  # p2: big counters, baseline
    assert store.counter_delta("aaa", v.GENERATION_TOKENS, since=0.0) == two_pods  # no step down, no jump
    feed(store, 30.0, **{"p0:1": scrape(V033, 3.0), "p2:1": scrape(V033, 51.0)})
    after = store.counter_delta("aaa", v.GENERATION_TOKENS, since=0.0)
    assert after is not None and after > two_pods
    assert store.counter_delta("aaa", v.GENERATION_TOKENS, since=20.0) == after - two_pods
    assert [t.url for _, t in store.bindings()] == ["http://p0:1/metrics", "http://p2:1/metrics"]


def test_a_removed_version_leaves_the_snapshot() -> None:
    store = SignalStore([_spec("aaa", "p0:1"), _spec("bbb", "p1:1")], window_seconds=300,
                        stale_after_seconds=60)
    feed(store, 0.0, **{"p0:1": scrape(V033, 1.0), "p1:1": scrape(V033, 1.0)})
    assert set(store.snapshot.versions) == {"aaa", "bbb"}
    store.set_versions([_spec("aaa", "p0:1")])
    feed(store, 10.0, **{"p0:1": scrape(V033, 2.0)})
    assert set(store.snapshot.versions) == {"aaa"} and store.versions() == ["aaa"]
    assert store.latest("bbb") is None
