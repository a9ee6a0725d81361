"""Wiring of drift into the running service: the runner's scheduled check, its gauges and its API."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.analyse.drift.collector import DriftCollector
from observer.analyse.drift.embedder import make_embedder
from observer.analyse.drift.runner import DriftRunner
from observer.analyse.drift.state import DriftState
from observer.analyse.embed import Embedder
from observer.export import drift_api
from observer.store.base import SampleStore
from observer.wiring.runtime import BaseComponent, Context, Job


@dataclass
class DriftComponent(BaseComponent):
    """The drift runner as a component: one singleton job, the drift gauges, the report API."""

    runner: DriftRunner
    interval_seconds: float
    guard: Callable[..., None]
    name: str = "drift"

    @property
    def state(self) -> DriftState:
        return self.runner.state

    def collectors(self) -> Sequence[Collector]:
        runner = self.runner
        return (DriftCollector(runner.state, errors=lambda: dict(runner.errors), cache_entries=runner.cache_entries),)

    def jobs(self) -> Sequence[Job]:
        return (Job("drift", self.interval_seconds, self.runner.run_once, singleton=True),)

    def routers(self) -> Sequence[APIRouter]:
        # Reports quote sample texts: behind the same bearer guard as the sample read-back.
        return (drift_api.router(self.runner.state, guard=self.guard),)

    async def stop(self) -> None:
        await self.runner.close()


def build(ctx: Context, *, store: SampleStore | None,
          embedder_factory: Callable[[], Embedder] | None = None) -> DriftComponent | None:
    """Return the drift component (its `state` is the drift service), or None when drift is disabled."""
    spec = ctx.config.drift
    if not spec.enabled:
        return None
    runner = DriftRunner(config=ctx.config, fleet=ctx.fleet, store=store,
                         embedder_factory=embedder_factory or (lambda: make_embedder(spec.embedder)),
                         clock=ctx.clock, state=DriftState(consecutive=spec.consecutive))
    return DriftComponent(runner=runner, interval_seconds=spec.interval_seconds, guard=ctx.private_guard())
