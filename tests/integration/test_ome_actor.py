"""Actor mode on the wire: the observer writes OME's own promote and rollback (merge patches on the scripted API
server, observer_dev/kubeapi.py), OME's controller takes them as promotion.go does (observer_dev/gameday/ome.py
`apply_verbs`), and a missing `patch` rule is one clear error, not a retry storm."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from observer.config import parse_config
from observer.discover.actor import FORBIDDEN_PAUSE_SECONDS, PROMOTE, ROLLBACK, RolloutActor
from observer.discover.kubeapi import Reflector, api_client
from observer.wiring import actor as actor_wiring
from observer.wiring import root
from observer.wiring.runtime import Context
from observer_dev import primitive_objects as po
from observer_dev.gameday.ome import apply_verbs
from observer_dev.kubeapi import ScriptedKubeApi

pytestmark = pytest.mark.integration

NS = "llm-serving"
COLLECTION = f"{NS}/inferenceservices.ome.io"
CANARY, STABLE = "a1b2c3d4", "0f0f0f0f"
T0 = 1_796_004_800.0  # the step's entry: 2026-11-30T02:13:20Z


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def api() -> Iterator[ScriptedKubeApi]:
    with ScriptedKubeApi().running() as a:
        a.put(COLLECTION, po.ome_isvc("chat", stable=STABLE, canary=CANARY, phase="Canarying",
                                      step_entered=rfc3339(T0)))
        yield a


class Rig:
    """An actor on one acting model, its own reflector on the stand-in, a scripted judge and clock."""

    def __init__(self, api: ScriptedKubeApi, tmp: Path, outcome: str) -> None:
        (tmp / "kubeconfig").write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")
        self.api, self.outcome, self.now = api, outcome, T0
        self.asked: list[tuple[str, str, float, float | None]] = []
        config = parse_config(yaml.safe_dump({"discovery": {"kubernetes": {
            "namespace": NS, "kubeconfig": str(tmp / "kubeconfig"), "dcgm": None, "models": [
                {"name": "chat", "selector": {"app": "chat"}, "version_prefix": "chat-",
                 "primitive": {"kind": "ome", "name": "chat", "act": True}}]}}}), environ={})
        spec = config.discovery.kubernetes
        assert spec is not None
        self.client = api_client(kubeconfig=str(tmp / "kubeconfig"), context=None)
        self.reflector = Reflector(self.client, resource="inferenceservices.ome.io",
                                   path=f"/apis/ome.io/v1beta1/namespaces/{NS}/inferenceservices", namespace=NS,
                                   backoff_seconds=0.05)
        self.actor = RolloutActor(self.client, namespace=NS, models=spec.models,
                                  collections={("ome.io/v1beta1", "inferenceservices"): self.reflector},
                                  judge=self.judge, step_seconds=None, clock=lambda: self.now)

    async def judge(self, canary: str, baseline: str, *, since: float, step_seconds: float | None) -> tuple[str, str]:
        self.asked.append((canary, baseline, since, step_seconds))
        return self.outcome, f"scripted {self.outcome}"

    async def settle(self, check: Any) -> None:
        for _ in range(200):
            if check():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the reflector did not see the change")

    async def look(self, at: float) -> None:
        self.now = at
        rv = self.api.get(COLLECTION, "chat")["metadata"]["resourceVersion"]
        await self.settle(lambda: self.reflector.objects.get("chat", {}).get("metadata", {}).get(
            "resourceVersion") == rv)
        await self.actor.run_once()

    def reconcile(self, at: float) -> None:
        """OME's controller: one pass over the verbs on the object."""
        obj = apply_verbs(self.api.get(COLLECTION, "chat"), now=rfc3339(at))
        if obj != self.api.get(COLLECTION, "chat"):
            self.api.put(COLLECTION, obj)


async def run(rig: Rig, body: Any) -> None:
    task = asyncio.create_task(rig.reflector.run())
    try:
        await rig.settle(lambda: rig.reflector.synced)
        await body()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await rig.client.aclose()


def test_a_passing_step_is_promoted_after_its_bake_once_per_step(api: ScriptedKubeApi, tmp_path: Path) -> None:
    rig = Rig(api, tmp_path, "pass")

    async def body() -> None:
        await rig.look(T0 + 540)  # 9 minutes into a 10-minute bake: asked, nothing written
        assert rig.asked == [("chat-" + CANARY, "chat-" + STABLE, T0, 600.0)] and api.patches == []
        await rig.look(T0 + 600)
        assert [b["metadata"]["annotations"] for _, _, b in api.patches] == [{PROMOTE: CANARY}]
        assert api.patches[0][2]["metadata"]["resourceVersion"]  # written against the state judged
        await rig.look(T0 + 660)  # OME has not taken it yet: not written again
        assert len(api.patches) == 1
        rig.reconcile(T0 + 670)  # OME advances: step 1, entered now, promotedThrough recorded
        await rig.look(T0 + 1400)  # the record is not cleared yet: a promote now would be swallowed
        assert len(api.patches) == 1
        rig.reconcile(T0 + 1410)  # the record is cleared
        await rig.look(T0 + 1420)  # step 1 has no pause of its own, and canary.step_seconds is unset: no bake
        cs = api.get(COLLECTION, "chat")["status"]["components"]["engine"]["canary"]
        assert cs["currentStep"] == 1 and len(api.patches) == 2
        assert rig.asked[-1][2] == T0 + 670  # the step's window starts at its own entry
        assert rig.actor.actions == {("chat", "promote", "written"): 2}

    asyncio.run(run(rig, body))


def test_a_failing_step_is_rolled_back_once_at_its_first_look(api: ScriptedKubeApi, tmp_path: Path) -> None:
    rig = Rig(api, tmp_path, "fail")

    async def body() -> None:
        await rig.look(T0 + 60)
        assert [b["metadata"]["annotations"] for _, _, b in api.patches] == [{ROLLBACK: "true"}]
        for t in (120, 180, 240):
            await rig.look(T0 + t)
        assert len(api.patches) == 1
        rig.reconcile(T0 + 250)
        engine = api.get(COLLECTION, "chat")["status"]["components"]["engine"]
        assert engine["rolloutPhase"] == "RolledBack" and engine["canary"]["rolledBackRevisionHash"] == CANARY
        await rig.look(T0 + 300)  # rolled back: nothing more to do
        assert len(api.patches) == 1 and rig.actor.actions == {("chat", "rollback", "written"): 1}

    asyncio.run(run(rig, body))


@pytest.mark.parametrize("outcome", ["inconclusive", "nodata", "idle"])
def test_an_undecided_step_is_left_to_omes_own_gate(api: ScriptedKubeApi, tmp_path: Path, outcome: str) -> None:
    rig = Rig(api, tmp_path, outcome)

    async def body() -> None:
        for t in (60, 600, 3600, 7200):
            await rig.look(T0 + t)
        assert api.patches == [] and len(rig.asked) == 4

    asyncio.run(run(rig, body))


def test_without_the_patch_verb_one_clear_error_and_no_retry_storm(
        api: ScriptedKubeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    api.patch_forbidden.add(COLLECTION)
    rig = Rig(api, tmp_path, "fail")

    async def body() -> None:
        with caplog.at_level(logging.WARNING, logger="observer.discovery"):
            for t in range(60, 600, 10):  # 54 looks inside the pause
                await rig.look(T0 + t)
        assert len(api.patches) == 1 and rig.actor.actions == {("chat", "rollback", "forbidden"): 1}
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        assert "resources: [inferenceservices], verbs: [patch]" in errors[0] and "apiGroups: [ome.io]" in errors[0]
        assert "primitive.act: false" in errors[0] and "cannot patch" in errors[0]
        await rig.look(T0 + 60 + FORBIDDEN_PAUSE_SECONDS)  # tried again once the pause is over, still refused
        assert len(api.patches) == 2 and rig.actor.actions == {("chat", "rollback", "forbidden"): 2}
        api.patch_forbidden.clear()  # the rule granted: the next try after the pause lands
        await rig.look(T0 + 60 + 2 * FORBIDDEN_PAUSE_SECONDS)
        assert rig.actor.actions[("chat", "rollback", "written")] == 1

    asyncio.run(run(rig, body))


def test_a_write_on_a_state_newer_than_the_one_judged_is_refused_and_judged_again(
        api: ScriptedKubeApi, tmp_path: Path) -> None:
    rig = Rig(api, tmp_path, "fail")

    async def body() -> None:
        # No await between these: the reflector cannot catch up before the actor reads its cache.
        rig.reflector.objects = {"chat": api.get(COLLECTION, "chat")}  # what is judged
        api.put(COLLECTION, api.get(COLLECTION, "chat"))  # the object moves
        rig.now = T0 + 60
        await rig.actor.run_once()
        assert rig.actor.actions == {("chat", "rollback", "conflict"): 1}
        await rig.look(T0 + 70)  # the cache caught up: written
        assert rig.actor.actions[("chat", "rollback", "written")] == 1

    asyncio.run(run(rig, body))


def test_the_root_wires_the_actor_to_the_canary_service_only_where_a_model_acts(tmp_path: Path) -> None:
    with ScriptedKubeApi().running() as api:
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")

        def components(act: bool) -> list[Any]:
            config = parse_config(yaml.safe_dump({"discovery": {"kubernetes": {
                "namespace": NS, "kubeconfig": str(tmp_path / "kubeconfig"), "dcgm": None, "models": [
                    {"name": "chat", "selector": {"app": "chat"},
                     "primitive": {"kind": "ome", "name": "chat", "act": act}}]}}}), environ={})
            ctx = Context(config=config, http=httpx.AsyncClient())
            return list(root.assemble(ctx, areas=("discover", "canary")).components)

        assert not [c for c in components(False) if isinstance(c, actor_wiring.ActorComponent)]
        (acting,) = [c for c in components(True) if isinstance(c, actor_wiring.ActorComponent)]
        (job,) = acting.jobs()
        assert job.singleton and job.name == "rollout-actor"  # one replica writes, whatever the replica count
