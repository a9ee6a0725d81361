"""Wiring of the evaluation events (telemetry.evaluations): the emitter, its counters, its shutdown."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client.registry import Collector

from observer.evalevents import EvaluationEvents
from observer.wiring.runtime import BaseComponent, Context


@dataclass
class EvaluationsComponent(BaseComponent):
    """The emitter the quality and canary areas send to; flushed and shut down when the service stops."""

    events: EvaluationEvents
    name: str = "evaluations"

    def collectors(self) -> Sequence[Collector]:
        return (self.events.collector(),)

    async def stop(self) -> None:
        self.events.shutdown()  # flushes what is queued, within the export timeout


def build(ctx: Context) -> EvaluationsComponent | None:
    """The component, or None when evaluation events are off (the default)."""
    spec = ctx.config.telemetry.evaluations
    return EvaluationsComponent(EvaluationEvents(spec)) if spec.enabled else None
