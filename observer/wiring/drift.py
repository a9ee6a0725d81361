"""Wiring of drift into the running service: the checks (in process, or as shared jobs), gauges and API."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.analyse.drift.collector import DriftCollector
from observer.analyse.drift.embedder import make_embedder
from observer.analyse.drift.jobs import DRIFT_JOB, DRIFT_LOOK_SECONDS, DriftSync, SharedDrift
from observer.analyse.drift.runner import DriftRunner
from observer.analyse.drift.state import DriftState, Persistence
from observer.analyse.embed import Embedder
from observer.analyse.rounds import Rounds
from observer.config.drift import DriftSpec
from observer.export import drift_api
from observer.store.base import ManagedStore
from observer.store.work import Worker
from observer.wiring.runtime import BaseComponent, Context, Job


@dataclass
class DriftComponent(BaseComponent):
    """The drift runner as a component: its jobs, the drift gauges, the report API.

    With a sample store the checks are shared work: the leader enqueues them, any replica's worker runs
    them, and every replica reads the stored outcomes back (`sync`). Without one, a singleton job checks
    in process (and reports `no_store`: there are no samples to compare)."""

    runner: DriftRunner
    interval_seconds: float
    guard: Callable[..., None]
    shared: SharedDrift | None = None
    worker: Worker | None = None
    sync: DriftSync | None = None
    poll_seconds: float = 1.0
    sync_seconds: float = 2.0
    name: str = "drift"

    @property
    def state(self) -> DriftState:
        return self.runner.state

    def collectors(self) -> Sequence[Collector]:
        runner = self.runner
        return (DriftCollector(runner.state, errors=lambda: dict(runner.errors), cache_entries=runner.cache_entries),)

    def job_kinds(self) -> Sequence[str]:
        return (DRIFT_JOB,) if self.worker is not None else ()

    def jobs(self) -> Sequence[Job]:
        if self.shared is None or self.worker is None or self.sync is None:
            return (Job("drift", self.interval_seconds, self.runner.run_once, singleton=True),)
        return (Job("drift-enqueue", min(self.interval_seconds, DRIFT_LOOK_SECONDS), self.shared.enqueue,
                    singleton=True),
                Job(f"work-{DRIFT_JOB}", self.poll_seconds, self.worker.tick),
                Job("drift-sync", self.sync_seconds, self.sync.run_once))

    def routers(self) -> Sequence[APIRouter]:
        # Reports quote sample texts: behind the same bearer guard as the sample read-back.
        return (drift_api.router(self.runner.state, guard=self.guard),)

    async def stop(self) -> None:
        await self.runner.close()


def persistence(spec: DriftSpec) -> Persistence:
    """The persistence rule of the drift config."""
    return Persistence(interval_seconds=spec.interval_seconds, window_seconds=spec.window_seconds, alpha=spec.alpha,
                       feature_alpha=spec.feature_alpha, budget=spec.false_alarms_per_30_days,
                       fixed=spec.consecutive, min_effect=spec.min_effect)


def build(ctx: Context, *, store: ManagedStore | None,
          embedder_factory: Callable[[], Embedder] | None = None) -> DriftComponent | None:
    """Return the drift component (its `state` is the drift service), or None when drift is disabled."""
    spec = ctx.config.drift
    if not spec.enabled:
        return None
    runner = DriftRunner(config=ctx.config, fleet=ctx.fleet, store=store,
                         embedder_factory=embedder_factory or (lambda: make_embedder(spec.embedder)),
                         clock=ctx.clock, state=DriftState(persistence=persistence(spec)))
    guard = ctx.private_guard()
    if store is None:
        return DriftComponent(runner=runner, interval_seconds=spec.interval_seconds, guard=guard)
    work_spec = ctx.config.sampling.store.work
    shared = SharedDrift(store, runner, ctx.fleet, Rounds(spec.interval_seconds, ctx.clock), work_spec, ctx.work)
    # One check at a time per replica: each holds an embedder and a permutation test in memory.
    worker = Worker(store, DRIFT_JOB, shared.check, work_spec, ctx.work, limit=1)
    return DriftComponent(runner=runner, interval_seconds=spec.interval_seconds, guard=guard, shared=shared,
                          worker=worker, sync=DriftSync(store, runner, ctx.fleet), poll_seconds=work_spec.poll_seconds,
                          sync_seconds=work_spec.sync_seconds)
