"""The seams between areas: a Context of shared services and the Component protocol each area implements.

Dependencies are passed in (style rule 7): the service builds one Context, then asks each area's
`build(ctx)` for a Component, in data-path order (collect → store → analyse → export). A component
may publish a service on the context for later ones (e.g. the store for the quality runner).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.config.spec import ObserverConfig

Clock = Callable[[], float]


@dataclass(frozen=True)
class Job:
    """A periodic job: run every `interval_seconds`, never overlapping itself; traced as one span."""

    name: str
    interval_seconds: float
    func: Callable[[], Awaitable[None]]
    run_at_start: bool = True


class Component(Protocol):
    """What an area contributes to the running service."""

    name: str

    def collectors(self) -> Sequence[Collector]: ...

    def routers(self) -> Sequence[APIRouter]: ...

    def jobs(self) -> Sequence[Job]: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class BaseComponent:
    """A Component with nothing in it; areas subclass and override what they provide."""

    name: str = "base"

    def collectors(self) -> Sequence[Collector]:
        return ()

    def routers(self) -> Sequence[APIRouter]:
        return ()

    def jobs(self) -> Sequence[Job]:
        return ()

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


@dataclass
class Context:
    """Shared services, passed to every area's `build`. `services` holds what components publish."""

    config: ObserverConfig
    http: httpx.AsyncClient
    clock: Clock = time.time
    services: dict[str, Any] = field(default_factory=dict)
    ready_checks: list[Callable[[], bool]] = field(default_factory=list)

    def publish(self, key: str, service: Any) -> None:
        """Make `service` available to later components under `key`."""
        self.services[key] = service

    def get(self, key: str) -> Any:
        """Return a published service, or None when the area that provides it is disabled."""
        return self.services.get(key)


# Well-known service keys (one place, so areas agree on them).
SIGNALS = "signals"  # observer.analyse.signals: per-version snapshot provider
SCRAPER = "scraper"
STORE = "store"  # observer.store: SampleStore
QUALITY = "quality"  # observer.analyse.quality: latest golden/live results
DRIFT = "drift"  # observer.analyse.drift: latest drift results
CANARY = "canary"
JUDGE = "judge"  # LLM judge client

Builder = Callable[[Context], Component | None]


def all_builders() -> Iterable[Builder]:
    """The area builders in data-path order. Each import is local so disabled areas cost nothing."""
    from observer.analyse.canary.component import build as build_canary
    from observer.analyse.drift.component import build as build_drift
    from observer.analyse.quality.component import build as build_quality
    from observer.collect.component import build as build_collect
    from observer.sample.component import build as build_sample

    return (build_collect, build_sample, build_quality, build_drift, build_canary)
