"""The sample store's upkeep: retention (by age, by rows per version, finished shared-work jobs) and the size
and row counts /metrics reads from a cache, so a scrape never waits on the store."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from observer.config.sampling import StoreSpec
from observer.store.base import ManagedStore

log = logging.getLogger("observer.sample")


@dataclass
class StoreUpkeep:
    """Prunes the store and caches its size and per-version rows."""

    store: ManagedStore
    spec: StoreSpec
    size: int | None = field(default=None, init=False)
    rows: dict[str, int] | None = field(default=None, init=False)

    async def prune(self) -> None:
        """Apply retention by age and by rows per version, and to finished shared-work jobs."""
        deleted = await asyncio.to_thread(self.store.prune, max_age_seconds=self.spec.retention_days * 86400,
                                          max_rows_per_version=self.spec.max_rows_per_version)
        if deleted:
            log.info("sample store: retention deleted %d sample(s)", deleted)
        jobs = await asyncio.to_thread(self.store.prune_jobs, max_age_seconds=self.spec.work.keep_hours * 3600)
        if jobs:
            log.info("sample store: retention deleted %d finished job(s)", jobs)
        await self.refresh()

    async def refresh(self) -> None:
        """Refresh the store size and row gauges (read at scrape time from this cache)."""
        self.rows = await asyncio.to_thread(self.store.counts)
        self.size = self.store.size_bytes()
