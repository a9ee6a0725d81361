"""Periodic jobs: each runs on its schedule (also when not at start), never overlapping itself, and a
failing job is counted, not fatal."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from observer.config import parse_config
from observer.service import Service
from observer.wiring.runtime import BaseComponent, Job


@dataclass
class _Jobs(BaseComponent):
    name: str = "jobs"
    runs: dict[str, int] = field(default_factory=lambda: {"late": 0, "slow": 0, "broken": 0})
    active: int = 0
    most_active: int = 0

    def jobs(self) -> Sequence[Job]:
        return (Job("late", 0.1, self.late, run_at_start=False), Job("slow", 0.05, self.slow),
                Job("broken", 0.1, self.broken))

    async def late(self) -> None:
        self.runs["late"] += 1

    async def slow(self) -> None:
        self.runs["slow"] += 1
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        await asyncio.sleep(0.3)  # longer than its interval: later firings must be skipped or coalesced
        self.active -= 1

    async def broken(self) -> None:
        self.runs["broken"] += 1
        raise RuntimeError("boom")


async def test_jobs_run_on_schedule_without_overlap() -> None:
    component = _Jobs()

    service = Service.build(parse_config("{}", environ={}), areas=(), extra=[component])
    await service.start()
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (component.runs["late"] < 2 or component.runs["broken"] < 2):
            await asyncio.sleep(0.05)
    finally:
        await service.stop()
    assert component.runs["late"] >= 2  # a run_at_start=False job is scheduled, not added paused
    assert component.runs["broken"] >= 2  # a failing job keeps its schedule
    assert component.runs["slow"] >= 1 and component.most_active == 1  # never overlapping itself
    body = service.registry.get_sample_value("observer_job_runs_total", {"job": "broken", "outcome": "error"})
    assert body is not None and body >= 2


@dataclass
class _Declares(BaseComponent):
    """A component that declares what the root collects, instead of writing it into the context."""

    name: str = "declares"
    why: str | None = "warming up"
    lead: _Lead | None = None

    def not_ready(self) -> str | None:
        return self.why

    def leadership(self) -> _Lead | None:
        return self.lead

    def job_kinds(self) -> Sequence[str]:
        return ("mine",)


class _Lead:
    def holds(self) -> bool:
        return True

    def current(self) -> bool:
        return True

    def close(self) -> None:
        return None


def test_the_root_collects_what_components_declare_and_the_context_stays_read_only() -> None:
    import dataclasses

    import pytest
    from fastapi.testclient import TestClient

    from observer.wiring.root import collect

    component = _Declares(lead=_Lead())
    service = Service.build(parse_config("{}", environ={}), areas=(), extra=[component])
    with pytest.raises(dataclasses.FrozenInstanceError):
        service.context.auth_token = "x"  # type: ignore[misc]
    assert service.context.work.kinds == ("mine",)
    assert service.collected.leader is component.lead
    assert service.registry.get_sample_value("observer_leader") == 1.0
    answer = TestClient(service.app).get("/readyz")
    assert answer.status_code == 503 and "warming up" in answer.text
    component.why = None
    assert TestClient(service.app).get("/readyz").status_code == 200
    with pytest.raises(ValueError, match="2 components hold a leadership"):
        collect([_Declares(lead=_Lead()), _Declares(lead=_Lead())])
