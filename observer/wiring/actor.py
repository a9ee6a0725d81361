"""Wiring of actor mode (observer.discover.actor): the models whose `primitive.act` is set get their step's
verdict written back as the source's own promote or rollback, by one replica (a singleton job)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.analyse.canary.service import CanaryService
from observer.discover.actor import RolloutActor
from observer.discover.watch import Discovery
from observer.wiring.runtime import BaseComponent, Context, Job


class ActionsCollector(Collector):
    """observer_rollout_actions_total: what actor mode wrote, or failed to, per model."""

    def __init__(self, actor: RolloutActor) -> None:
        self.actor = actor

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        c = CounterMetricFamily(names.ROLLOUT_ACTIONS, "Promote and rollback writes of actor mode on the rollout "
                                "source's object, by result (forbidden: the patch RBAC rule is missing).",
                                labels=[names.GROUP, names.ACTION, names.RESULT])
        for (group, action, result), n in sorted(self.actor.actions.items()):
            c.add_metric([group, action, result], n)
        yield c


@dataclass
class ActorComponent(BaseComponent):
    actor: RolloutActor
    interval_seconds: float
    name: str = "actor"

    def collectors(self) -> Sequence[Collector]:
        return (ActionsCollector(self.actor),)

    def jobs(self) -> Sequence[Job]:
        return (Job(name="rollout-actor", interval_seconds=self.interval_seconds, func=self.actor.run_once,
                    run_at_start=False, singleton=True),)


def build(ctx: Context, discovery: Discovery, service: CanaryService) -> ActorComponent | None:
    """The actor for the models with `primitive.act`, or None when none has it."""
    spec = ctx.config.discovery.kubernetes
    if spec is None or not any(m.primitive is not None and m.primitive.act for m in spec.models):
        return None

    async def judge(canary: str, baseline: str, *, since: float,
                    step_seconds: float | None) -> tuple[str, str]:
        v = await service.verdict_for(canary, baseline, since=since, weight=None, step_seconds=step_seconds)
        return str(v.verdict), v.reason

    actor = RolloutActor(discovery.client, namespace=spec.namespace, models=spec.models,
                         collections=discovery.primitives, judge=judge, step_seconds=ctx.config.canary.step_seconds,
                         clock=ctx.clock)
    return ActorComponent(actor=actor, interval_seconds=ctx.config.canary.interval_seconds)
