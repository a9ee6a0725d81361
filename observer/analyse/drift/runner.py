"""Drift's periodic check: every active version against its model's active baseline, failures counted by
reason and logged, never raised, so one version's broken baseline or a down embedder stops no other check."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from observer.analyse.drift.baseline import BaselineRepo
from observer.analyse.drift.check import Checker, arms
from observer.analyse.drift.state import DriftReport, DriftState
from observer.analyse.drift.stored import CheckFailed
from observer.analyse.embed import CachedEmbedder, Embedder, EmbeddingError
from observer.analyse.pairs import role_pairs
from observer.config.spec import ObserverConfig
from observer.errors import BaselineError, MissingDependencyError, StoreError
from observer.fleetview import FleetView
from observer.store.base import SampleStore

log = logging.getLogger("observer.drift")


@dataclass
class DriftRunner:
    """Checks the fleet's versions; `state` is what the collector, the API and the canary read."""

    config: ObserverConfig
    fleet: FleetView
    store: SampleStore | None  # None: sampling is off, so every check fails with reason no_store
    embedder_factory: Callable[[], Embedder]
    clock: Callable[[], float]
    state: DriftState
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    _checker: Checker | None = field(default=None, init=False)

    def checker(self) -> Checker | None:
        """The checker (None without a sample store: there is nothing to compare)."""
        if self._checker is None and self.store is not None:
            cfg = self.config
            self._checker = Checker(config=cfg, store=self.store, repo=BaselineRepo(cfg.drift.baseline_dir),
                                    embedder_factory=self.embedder_factory)
        return self._checker

    def reset(self) -> None:
        """Forget the checker and its embedder; the next check builds them again from `embedder_factory`."""
        self._checker = None

    def cache_entries(self) -> int | None:
        """Entries in the embedding cache, once an embedder with a cache is loaded."""
        emb = self._checker.loaded_embedder() if self._checker is not None else None
        return len(emb.cache) if isinstance(emb, CachedEmbedder) else None

    async def close(self) -> None:
        """Close the embedder's cache (and HTTP client) if one was created."""
        emb = self._checker.loaded_embedder() if self._checker is not None else None
        close = getattr(emb, "close", None)
        if callable(close):
            await asyncio.to_thread(close)

    async def run_once(self) -> None:
        """Check every non-retired version (in a worker thread: embedding and the test are CPU-bound)."""
        versions = [v.name for v in self.fleet.versions() if not v.retired]
        self.state.forget(set(versions))
        for version in versions:
            await asyncio.to_thread(self.check_version, version)

    def check_version(self, version: str) -> DriftReport | None:
        """Run and record one check; failures are counted by reason and logged, never raised."""
        return self.record(self.compute(version))

    def compute(self, version: str) -> DriftReport | CheckFailed:
        """Run one check without recording it: the ungated report, or why it could not run (counted by
        reason on this replica and logged)."""
        checker = self.checker()
        now = self.clock()
        if checker is None:
            return self._failed(version, "no_store", "the sample store is not available (sampling disabled?)", now)
        try:
            report = checker.run(version, now=now)
            baseline = self._baseline_of(version)
            if self.config.drift.compare_arms and baseline is not None:
                gate = arms(checker, version, baseline, now=now, slice_seconds=self.config.canary.slice_seconds)
                report = replace(report, results={**report.results, **gate})
            return report
        except BaselineError as e:
            return self._failed(version, "baseline", str(e), now)
        except (EmbeddingError, MissingDependencyError) as e:
            return self._failed(version, "embedder", str(e), now)
        except StoreError as e:
            return self._failed(version, "store", str(e), now)
        except Exception as e:  # one version's failure must not stop the others
            log.exception("drift check of %s failed", version)
            return self._failed(version, "internal", f"{type(e).__name__}: {e}", now)

    def _baseline_of(self, version: str) -> str | None:
        """The stable version a canary is judged against (its group's one stable, as the canary judge pairs
        discovered versions), or None for any other version."""
        return next((p.baseline for p in role_pairs(list(self.fleet.versions())) if p.canary == version), None)

    def record(self, outcome: DriftReport | CheckFailed) -> DriftReport | None:
        """Gate and keep a check's outcome (this replica's, or one read from the shared store)."""
        if not isinstance(outcome, CheckFailed):
            return self.state.record(outcome)
        # checked_at stays the last successful check's time, so the "drift check not run" alert still fires
        # while checks keep failing (0 = never succeeded: no timestamp is exported).
        previous = self.state.report(outcome.version)
        base = previous or DriftReport(version=outcome.version, model="", checked_at=0.0, status="error")
        results = {k: replace(r, status="error", drift=False, shifted=False) for k, r in base.results.items()}
        self.state.record(replace(base, status="error", message=outcome.message, results=results))
        return None

    def _failed(self, version: str, reason: str, message: str, now: float) -> CheckFailed:
        self.errors[(version, reason)] += 1
        log.error("could not check drift of version %s: %s", version, message)
        return CheckFailed(version=version, reason=reason, message=message, checked_at=now)
