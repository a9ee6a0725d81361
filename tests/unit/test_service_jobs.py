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
