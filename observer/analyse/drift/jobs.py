"""Drift checks as shared work: the leader enqueues one job per version and interval slot, any replica's worker
embeds and tests (the heavy part), the outcome is stored with the job's completion, and every replica reads
the stored outcomes back in commit order (DriftSync), so all replicas export the same drift state and a
restarted replica rebuilds it, streaks included.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from observer.analyse.drift import stored
from observer.analyse.drift.runner import DriftRunner
from observer.analyse.rounds import Rounds
from observer.config.sampling import WorkSpec
from observer.fleetview import FleetView
from observer.store.jobs import ClaimedJob, DriftReportRecord, JobSpec, SharedWork
from observer.store.work import WorkMetrics, WorkResult, enqueue

DRIFT_JOB = "drift"  # kind of the shared-work job that checks one version's drift
DRIFT_LOOK_SECONDS = 15.0
"""How often the leader looks for versions due a check: one check per interval slot, and a version that
appears mid-interval (a new Rollout revision) is checked at the next look, not at the next slot."""
PAGE = 500  # stored reports read per query; a pass reads pages until the feed is drained

log = logging.getLogger("observer.drift")


@dataclass
class SharedDrift:
    """The leader's enqueue and every replica's job handler."""

    work: SharedWork
    runner: DriftRunner
    fleet: FleetView
    rounds: Rounds  # one check per live version and interval slot
    work_spec: WorkSpec
    metrics: WorkMetrics

    async def enqueue(self) -> None:
        """Offer a check of every live version not yet offered in this slot; keyed by slot, so a leader that
        changes mid-interval enqueues nothing twice (the new one's offers count as duplicates)."""
        slot, due = self.rounds.due(self.fleet.versions())
        if due:
            await enqueue(self.work, [JobSpec(kind=DRIFT_JOB, key=f"drift:{v.name}:{slot}",
                                              payload={"version": v.name}, max_attempts=self.work_spec.max_attempts)
                                      for v in due], spec=self.work_spec, metrics=self.metrics)
        for v in due:
            self.rounds.done(v.name, slot)

    async def check(self, job: ClaimedJob) -> WorkResult:
        """Check one version; the outcome (a report, or why the check could not run) is stored."""
        version = str(job.payload.get("version"))
        spec = self.fleet.version(version)
        if spec is None or spec.retired:  # the version left since the job was queued
            log.info("drift job %s: version %s is gone; nothing to do", job.key, version)
            return WorkResult()
        outcome = await asyncio.to_thread(self.runner.compute, version)
        return WorkResult(drift_reports=[DriftReportRecord(version=version, checked_at=outcome.checked_at,
                                                           body=stored.encode(outcome))])


@dataclass
class DriftSync:
    """Feeds this replica's drift state from the stored outcomes, in commit order; one cursor."""

    store: SharedWork
    runner: DriftRunner
    fleet: FleetView
    after: tuple[int, int] = (0, 0)
    undecodable: int = 0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def run_once(self) -> int:
        """Record every outcome committed since the last pass; return how many were read."""
        async with self._lock:
            return await asyncio.to_thread(self._drain)

    def _drain(self) -> int:
        live = {v.name for v in self.fleet.versions() if not v.retired}
        self.runner.state.forget(live)
        read = 0
        while rows := self.store.drift_reports(after=self.after, limit=PAGE):
            for cursor, record in rows:
                if record.version not in live:
                    continue
                try:
                    outcome = stored.decode(record.body)
                except ValueError as e:
                    self.undecodable += 1
                    log.error("stored drift report %s of %s could not be read back (%s); skipped", cursor,
                              record.version, e)
                    continue
                self.runner.record(outcome)
            self.after = rows[-1][0]
            read += len(rows)
        return read
