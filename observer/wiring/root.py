"""The composition root: the one place that assembles the running observer from its config.

Services first, components second, in data-path order, each dependency passed by name:

    discover → the context's LiveFleet (fleet)          discover
    scrape   → SignalStore (signals), follows the fleet collect
    sample   → SampleStore (store)                      store
    quality  → QualityState, ShadowReplayer, reads store analyse
    drift    → DriftState, reads store                  analyse
    canary   → CanaryService, reads signals/quality/shadow pairs/drift
    actor    → RolloutActor (primitive.act), reads discovery's objects and the canary's verdicts

`areas` selects a subset (tests, benchmarks); a dependency whose area is left out is passed as None,
and the area that needs it says so in its own metrics and verdicts (e.g. the canary's `nodata` reason).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

from observer.analyse.canary.service import CanaryService
from observer.analyse.canary.sources import StoreFeedback
from observer.analyse.drift.state import DriftState
from observer.analyse.embed import Embedder
from observer.analyse.quality.shadow import ShadowReplayer
from observer.analyse.quality.state import QualityState
from observer.analyse.signals import SignalStore
from observer.fleetview import LiveFleet
from observer.sample.redact import Redactor
from observer.store.base import ManagedStore
from observer.wiring import actor, canary, discovery, drift, evaluations, quality, sampling, scrape
from observer.wiring.runtime import Collected, Component, Context

Area = Literal["discover", "scrape", "sample", "quality", "drift", "canary"]
AREAS: tuple[Area, ...] = ("discover", "scrape", "sample", "quality", "drift", "canary")


@dataclass
class Services:
    """What the root built, by name (None where the area is off or left out)."""

    fleet: LiveFleet | None = None
    signals: SignalStore | None = None
    store: ManagedStore | None = None
    quality: QualityState | None = None
    shadow: ShadowReplayer | None = None
    drift: DriftState | None = None
    canary: CanaryService | None = None
    components: list[Component] = field(default_factory=list)


def no_kappa() -> float | None:
    """No quality area: no judge agreement to show."""
    return None


def assemble(ctx: Context, *, areas: Collection[Area] | None = None,
             embedder_factory: Callable[[], Embedder] | None = None) -> Services:
    """Build every selected area's services and components for `ctx.config`."""
    selected = set(AREAS if areas is None else areas)
    unknown = selected - set(AREAS)
    if unknown:
        raise ValueError(f"unknown area(s) {sorted(unknown)}; known: {', '.join(AREAS)}")
    out = Services(fleet=ctx.fleet)
    ev = evaluations.build(ctx)
    events = ev.events if ev is not None else None
    if ev is not None:
        out.components.append(ev)

    di = discovery.build(ctx) if "discover" in selected else None
    if di is not None:
        out.components.append(di)
    if "scrape" in selected:
        sc = scrape.build(ctx)
        out.signals = sc.store
        out.components.append(sc)
    redactor: Redactor | None = None
    if "sample" in selected and (sa := sampling.build(ctx)) is not None:
        out.store = sa.store
        redactor = sa.pipeline.redactor
        out.components.append(sa)
    kappa: Callable[[], float | None] | None = None
    if "quality" in selected and (qa := quality.build(ctx, store=out.store, embedder_factory=embedder_factory,
                                                      events=events)) is not None:
        kappa = qa.kappa
        out.quality = qa.state
        out.shadow = qa.shadow
        out.components.append(qa)
    if "drift" in selected and (dr := drift.build(ctx, store=out.store)) is not None:
        out.drift = dr.state
        out.components.append(dr)
    if "canary" in selected and (ca := canary.build(ctx, signals=out.signals, quality=out.quality,
                                                    drift=out.drift, cost=out.signals, pairs=out.shadow,
                                                    feedback=None if out.store is None else StoreFeedback(out.store),
                                                    examples=out.store, redactor=redactor,
                                                    kappa=kappa or no_kappa, events=events)) is not None:
        out.canary = ca.service
        out.components.append(ca)
        if di is not None and (ac := actor.build(ctx, di.discovery, ca.service)) is not None:
            out.components.append(ac)
    return out


def collect(components: Sequence[Component]) -> Collected:
    """Every component's declarations; at most one may hold the leadership (one shared store per process)."""
    leaders = [lead for c in components if (lead := c.leadership()) is not None]
    if len(leaders) > 1:
        raise ValueError(f"{len(leaders)} components hold a leadership; one shared store per process")
    return Collected(ready_checks=tuple(c.not_ready for c in components),
                     connection_guards=tuple(g for c in components for g in c.connection_guards()),
                     leader=leaders[0] if leaders else None,
                     job_kinds=tuple(k for c in components for k in c.job_kinds()))
