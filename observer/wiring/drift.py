"""Wiring of drift into the running service: a scheduled check per version, gauges, an API, DRIFT state."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.analyse.drift.baseline import BaselineRepo
from observer.analyse.drift.check import Checker
from observer.analyse.drift.collector import DriftCollector
from observer.analyse.drift.embedder import make_embedder
from observer.analyse.drift.state import DriftReport, DriftState
from observer.analyse.embed import CachedEmbedder, Embedder, EmbeddingError
from observer.errors import BaselineError, MissingDependencyError, StoreError
from observer.export import drift_api
from observer.store.base import SampleStore
from observer.wiring.runtime import BaseComponent, Context, Job

log = logging.getLogger("observer.drift")


@dataclass
class DriftComponent(BaseComponent):
    """Checks every active version against its model's active baseline every `interval_seconds`."""

    ctx: Context | None = None
    store: SampleStore | None = None
    state: DriftState = field(default_factory=lambda: DriftState(consecutive=2))
    embedder_factory: Callable[[], Embedder] | None = None  # default: built from drift.embedder
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    _checker: Checker | None = None

    def __post_init__(self) -> None:
        self.name = "drift"

    @property
    def context(self) -> Context:
        assert self.ctx is not None
        return self.ctx

    def checker(self) -> Checker | None:
        """The checker (None without a sample store: there is nothing to compare)."""
        if self._checker is None:
            if self.store is None:
                return None
            cfg = self.context.config
            factory = self.embedder_factory or (lambda: make_embedder(cfg.drift.embedder))
            self._checker = Checker(config=cfg, store=self.store, repo=BaselineRepo(cfg.drift.baseline_dir),
                                    embedder_factory=factory)
        return self._checker

    def collectors(self) -> Sequence[Collector]:
        return (DriftCollector(self.state, errors=lambda: dict(self.errors), cache_entries=self._cache_entries),)

    def _cache_entries(self) -> int | None:
        emb = self._checker._embedder if self._checker is not None else None
        return len(emb.cache) if isinstance(emb, CachedEmbedder) else None

    def jobs(self) -> Sequence[Job]:
        return (Job("drift", self.context.config.drift.interval_seconds, self.run_once, singleton=True),)

    def routers(self) -> Sequence[APIRouter]:
        # Reports quote sample texts: behind the same bearer guard as the sample read-back.
        return (drift_api.router(self.state, guard=self.context.private_guard()),)

    async def stop(self) -> None:
        """Close the embedder's cache (and HTTP client) if one was created."""
        emb = self._checker._embedder if self._checker is not None else None
        close = getattr(emb, "close", None)
        if callable(close):
            await asyncio.to_thread(close)

    async def run_once(self) -> None:
        """Check every non-retired version (in a worker thread: embedding and the test are CPU-bound)."""
        versions = [v.name for v in self.context.fleet.versions() if not v.retired]
        self.state.forget(set(versions))
        for version in versions:
            await asyncio.to_thread(self.check_version, version)

    def check_version(self, version: str) -> DriftReport | None:
        """Run and record one check; failures are counted by reason and logged, never raised."""
        checker = self.checker()
        now = self.context.clock()
        if checker is None:
            self._fail(version, "no_store", "the sample store is not available (sampling disabled?)", now)
            return None
        try:
            return self.state.record(checker.run(version, now=now))
        except BaselineError as e:
            self._fail(version, "baseline", str(e), now)
        except (EmbeddingError, MissingDependencyError) as e:
            self._fail(version, "embedder", str(e), now)
        except StoreError as e:
            self._fail(version, "store", str(e), now)
        except Exception as e:  # one version's failure must not stop the others
            log.exception("drift check of %s failed", version)
            self._fail(version, "internal", f"{type(e).__name__}: {e}", now)
        return None

    def _fail(self, version: str, reason: str, message: str, now: float) -> None:
        self.errors[(version, reason)] += 1
        log.error("could not check drift of version %s: %s", version, message)
        # checked_at stays the last successful check's time, so the "drift check not run" alert still fires
        # while checks keep failing (0 = never succeeded: no timestamp is exported).
        previous = self.state.report(version)
        base = previous or DriftReport(version=version, model="", checked_at=0.0, status="error")
        results = {k: replace(r, status="error", drift=False, shifted=False) for k, r in base.results.items()}
        self.state.record(replace(base, status="error", message=message, results=results))


def build(ctx: Context, *, store: SampleStore | None,
          embedder_factory: Callable[[], Embedder] | None = None) -> DriftComponent | None:
    """Return the drift component (its `state` is the drift service), or None when drift is disabled."""
    spec = ctx.config.drift
    if not spec.enabled:
        return None
    return DriftComponent(ctx=ctx, store=store, state=DriftState(consecutive=spec.consecutive),
                          embedder_factory=embedder_factory)
