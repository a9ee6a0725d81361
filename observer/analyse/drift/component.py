"""Wiring of drift into the running service: a scheduled check per version, gauges, an API, DRIFT state."""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from prometheus_client.registry import Collector

from observer import env, runtime
from observer.analyse.drift.baseline import BaselineRepo
from observer.analyse.drift.check import Checker
from observer.analyse.drift.collector import DriftCollector
from observer.analyse.drift.state import DriftReport, DriftState
from observer.analyse.embed import CachedEmbedder, Embedder, EmbeddingError, RemoteEmbedder, load_local_embedder
from observer.config.drift import EmbedderSpec
from observer.errors import BaselineError, MissingDependencyError, StoreError
from observer.export.auth import bearer_guard
from observer.runtime import BaseComponent, Component, Context, Job

log = logging.getLogger("observer.drift")


def make_embedder(spec: EmbedderSpec, *, environ: Mapping[str, str] | None = None) -> Embedder:
    """Build the configured embedder (the local model's weights load on its first use)."""
    if spec.kind == "remote":
        assert spec.url is not None and spec.model is not None  # checked by EmbedderSpec
        source = os.environ if environ is None else environ
        key = source.get(spec.api_key_env) if spec.api_key_env else None
        return RemoteEmbedder(base_url=spec.url, model=spec.model, api_key=key, dim=spec.dim,
                              timeout_seconds=spec.timeout_seconds, batch_size=spec.batch_size,
                              cache_dir=spec.cache_dir, max_cache_entries=spec.max_cache_entries)
    return load_local_embedder(cache_dir=spec.cache_dir, max_cache_entries=spec.max_cache_entries,
                               batch_size=spec.batch_size)


@dataclass
class DriftComponent(BaseComponent):
    """Checks every active version against its model's active baseline every `interval_seconds`."""

    ctx: Context | None = None
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
        """The checker, once the sample store is available."""
        if self._checker is None:
            store = self.context.get(runtime.STORE)
            if store is None:
                return None
            cfg = self.context.config
            factory = self.embedder_factory or (lambda: make_embedder(cfg.drift.embedder))
            self._checker = Checker(config=cfg, store=store, repo=BaselineRepo(cfg.drift.baseline_dir),
                                    embedder_factory=factory)
        return self._checker

    def collectors(self) -> Sequence[Collector]:
        return (DriftCollector(self.state, errors=lambda: dict(self.errors), cache_entries=self._cache_entries),)

    def _cache_entries(self) -> int | None:
        emb = self._checker._embedder if self._checker is not None else None
        return len(emb.cache) if isinstance(emb, CachedEmbedder) else None

    def jobs(self) -> Sequence[Job]:
        return (Job("drift", self.context.config.drift.interval_seconds, self.run_once),)

    def routers(self) -> Sequence[APIRouter]:
        # Reports quote sample texts: behind the same bearer guard as the sample read-back.
        cfg = self.context.config
        token = os.environ.get(env.AUTH_TOKEN) or cfg.server.auth_token
        router = APIRouter(prefix="/api/v1/drift", tags=["drift"], dependencies=[Depends(bearer_guard(token))])

        @router.get("", summary="Latest drift status of every version.")
        def summary() -> dict[str, Any]:
            return {v: {"status": r.status, "moved": r.moved(), "checked_at": r.checked_at,
                        "baseline_hash": r.baseline_hash}
                    for v in self.state.versions() if (r := self.state.report(v)) is not None}

        @router.get("/{version}", summary="Latest drift report of a version: fields, features, examples.")
        def report(version: str) -> dict[str, Any]:
            r = self.state.report(version)
            if r is None:
                raise HTTPException(404, f"no drift check of version {version!r} yet")
            return r.as_json()

        return (router,)

    async def stop(self) -> None:
        """Close the embedder's cache (and HTTP client) if one was created."""
        emb = self._checker._embedder if self._checker is not None else None
        close = getattr(emb, "close", None)
        if callable(close):
            await asyncio.to_thread(close)

    async def run_once(self) -> None:
        """Check every non-retired version (in a worker thread: embedding and the test are CPU-bound)."""
        versions = [v.name for v in self.context.config.fleet.versions if not v.retired]
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


def build(ctx: Context) -> Component | None:
    """Return the drift component and publish its state, or None when drift is disabled."""
    spec = ctx.config.drift
    if not spec.enabled:
        return None
    component = DriftComponent(ctx=ctx, state=DriftState(consecutive=spec.consecutive))
    ctx.publish(runtime.DRIFT, component.state)
    return component
