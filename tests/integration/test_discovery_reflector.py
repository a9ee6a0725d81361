"""The reflector against the scripted Kubernetes API: list, watch, bookmarks, drops, 410 Gone, RBAC."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from observer.discover.kubeapi import Reflector
from observer_dev.kubeapi import ScriptedKubeApi, pod

PODS = "llm-serving/pods"
PATH = "/api/v1/namespaces/llm-serving/pods"


async def _until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def _running(api: ScriptedKubeApi, **kw: object) -> AsyncIterator[Reflector]:
    client = httpx.AsyncClient(base_url=api.url, timeout=5.0)
    r = Reflector(client, resource="pods", path=PATH, namespace="llm-serving", label_selector="app=llm",
                  watch_timeout_seconds=30, backoff_seconds=0.05, max_backoff_seconds=0.2, **kw)  # type: ignore[arg-type]
    task = asyncio.create_task(r.run())
    try:
        yield r
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.aclose()


def _p(name: str, **labels: str) -> dict[str, object]:
    return pod(name, labels={"app": "llm", **labels}, port=8000)


async def test_list_then_watch_follows_adds_changes_deletes_and_selector_moves() -> None:
    api = ScriptedKubeApi()
    api.put(PODS, _p("a"))
    api.put(PODS, pod("other", labels={"app": "db"}, port=1))
    with api.running():
        async with _running(api) as r:
            await _until(lambda: r.synced)
            assert set(r.objects) == {"a"}
            api.put(PODS, _p("b"))
            await _until(lambda: set(r.objects) == {"a", "b"})
            api.put(PODS, pod("b", labels={"app": "moved"}, port=8000))  # leaves the selector: DELETED
            await _until(lambda: set(r.objects) == {"a"})
            api.delete(PODS, "a")
            await _until(lambda: not r.objects)
            await _until(lambda: r.stats.events["BOOKMARK"] >= 1)
            assert r.stats.relists == {"start": 1}


async def test_a_dropped_watch_resumes_without_relisting_and_misses_nothing() -> None:
    api = ScriptedKubeApi()
    api.put(PODS, _p("a"))
    with api.running():
        async with _running(api) as r:
            await _until(lambda: r.synced and api.count(PODS, "watch") >= 1)
            api.drop_watches()
            api.put(PODS, _p("b"))  # made while no watch may be open: replayed from the resourceVersion
            await _until(lambda: set(r.objects) == {"a", "b"})
            assert r.stats.errors["watch_dropped"] >= 1
            assert r.stats.relists == {"start": 1}
            assert api.count(PODS, "list") == 1


async def test_410_gone_relists_and_the_cache_matches_the_server_again() -> None:
    api = ScriptedKubeApi()
    api.put(PODS, _p("a"))
    with api.running():
        async with _running(api) as r:
            await _until(lambda: r.synced and api.count(PODS, "watch") >= 1)
            api.refusing = True       # the reflector is away while things change and history is compacted
            api.drop_watches()
            await _until(lambda: r.stats.errors["unreachable"] >= 1)
            api.delete(PODS, "a")
            api.put(PODS, _p("c"))
            api.compact()
            api.refusing = False
            await _until(lambda: set(r.objects) == {"c"})
            assert r.stats.relists["gone"] >= 1


async def test_forbidden_names_verb_and_resource_and_the_last_good_state_is_kept() -> None:
    api = ScriptedKubeApi()
    api.put(PODS, _p("a"))
    with api.running():
        async with _running(api) as r:
            await _until(lambda: r.synced and api.count(PODS, "watch") >= 1)
            api.forbidden.add(PODS)
            api.drop_watches()
            await _until(lambda: r.stats.errors["forbidden"] >= 1)
            assert r.last_error is not None
            assert "may not watch pods in namespace llm-serving" in r.last_error
            assert "get, list and watch" in r.last_error
            assert set(r.objects) == {"a"}          # kept
            api.forbidden.clear()
            api.put(PODS, _p("b"))
            await _until(lambda: set(r.objects) == {"a", "b"})


async def test_an_unreachable_api_server_is_an_error_with_back_off_not_a_crash() -> None:
    api = ScriptedKubeApi()  # never started
    async with _running(api) as r:
        await _until(lambda: r.stats.errors["unreachable"] >= 2)
        assert not r.synced
        assert r.last_error is not None and "unreachable" in r.last_error


@pytest.mark.parametrize("line", ["not json", '{"type": "ADDED"}', '{"type": "ADDED", "object": {"metadata": {}}}'])
async def test_a_malformed_event_relists(line: str) -> None:
    r = Reflector(httpx.AsyncClient(), resource="pods", path=PATH, namespace="llm-serving")
    from observer.discover.kubeapi import KubeApiError
    with pytest.raises(KubeApiError) as e:
        r._apply(line, "1")
    assert e.value.reason == "malformed"
