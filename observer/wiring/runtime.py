"""The seams of the running service: the Component protocol each area's wiring implements, and the Context.

The composition root (`observer.wiring.root`) builds each area's services first and hands them to the
components that need them as typed constructor arguments, so build order is visible in one function and a
missing dependency is a type error, not a silent `None` at run time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import httpx
from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer import env
from observer.config.spec import ObserverConfig
from observer.export.auth import bearer_guard
from observer.fleetview import LiveFleet
from observer.httpserve import ConnectionGuard
from observer.store.work import WorkMetrics

Clock = Callable[[], float]


@dataclass(frozen=True)
class Job:
    """A periodic job: run every `interval_seconds`, never overlapping itself; traced as one span."""

    name: str
    interval_seconds: float
    func: Callable[[], Awaitable[object]]  # what it returns is not used
    run_at_start: bool = True
    # Work that must happen once per fleet, not once per replica (prune, drift checks, golden replays,
    # judge calls): with a shared store it runs only on the replica holding the leadership.
    singleton: bool = False


class Leadership(Protocol):
    """Which replica runs the singleton jobs (e.g. a PostgreSQL advisory lock); blocking calls."""

    def holds(self) -> bool:
        """True while this replica is the leader (tries to become it when nobody is)."""
        ...

    def current(self) -> bool:
        """The last answer of `holds()`, without I/O (for /metrics)."""
        ...

    def close(self) -> None: ...


class Component(Protocol):
    """What an area contributes to the running service. Besides its collectors, routes and jobs, it declares
    what the root collects across areas: why it is not ready yet, the connection limits of the HTTP servers it
    runs, the leadership it holds (the area that opens a shared store), and the shared-work kinds its workers
    claim. Nothing is written into the context while it is built."""

    name: str

    def collectors(self) -> Sequence[Collector]: ...

    def routers(self) -> Sequence[APIRouter]: ...

    def jobs(self) -> Sequence[Job]: ...

    def not_ready(self) -> str | None: ...

    def connection_guards(self) -> Sequence[ConnectionGuard]: ...

    def leadership(self) -> Leadership | None: ...

    def job_kinds(self) -> Sequence[str]: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class BaseComponent:
    """A Component with nothing in it; areas subclass (as dataclasses) and override what they provide.

    Not a dataclass itself, so a subclass's fields without defaults may come first."""

    name: str = "base"

    def collectors(self) -> Sequence[Collector]:
        return ()

    def routers(self) -> Sequence[APIRouter]:
        return ()

    def jobs(self) -> Sequence[Job]:
        return ()

    def not_ready(self) -> str | None:
        return None

    def connection_guards(self) -> Sequence[ConnectionGuard]:
        return ()

    def leadership(self) -> Leadership | None:
        return None

    def job_kinds(self) -> Sequence[str]:
        return ()

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


@dataclass(frozen=True)
class Context:
    """What every area's wiring may use: the config, one HTTP client, the clock, the private routes' bearer
    token (resolved once by the root: the environment wins over the config), the live fleet (configured
    versions plus discovered ones) and the shared-work counts. Read-only: what an area contributes to the whole
    (readiness, connection limits, leadership, job kinds) it declares on its component, and the root collects."""

    config: ObserverConfig
    http: httpx.AsyncClient
    clock: Clock = time.time
    auth_token: str | None = None
    fleet: LiveFleet = field(init=False)
    # Shared-work counts of every area's workers, exported once by the area that opens the store.
    work: WorkMetrics = field(default_factory=WorkMetrics)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fleet", LiveFleet(self.config.fleet.versions))

    def private_guard(self) -> Callable[..., None]:
        """The dependency guarding private routes: the bearer token, or (server.auth.mode: none) nothing."""
        return bearer_guard(self.auth_token, anonymous=self.config.server.auth.mode == "none")


@dataclass(frozen=True)
class Collected:
    """What the root gathers from every component once they are built."""

    ready_checks: tuple[Callable[[], str | None], ...]
    connection_guards: tuple[ConnectionGuard, ...]
    leader: Leadership | None
    job_kinds: tuple[str, ...]

    def not_ready(self) -> str | None:
        """Why /readyz answers 503, or None."""
        reasons = [r for check in self.ready_checks if (r := check())]
        return "; ".join(reasons) or None


def resolve_auth_token(config: ObserverConfig, *, environ: Mapping[str, str] | None = None) -> str | None:
    """The bearer token of the private routes: the environment wins over the config; surrounding
    whitespace (a trailing newline from a file or a Secret) is not part of the token."""
    source = os.environ if environ is None else environ
    raw = source.get(env.AUTH_TOKEN) or config.server.auth_token
    token = raw.strip() if raw else None
    return token or None
