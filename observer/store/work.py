"""Workers of the shared work queue (observer.store.jobs): claim jobs of one kind, run them, complete them.

Every replica runs the workers (they are not singleton jobs); the queue's claims decide who does what. A
worker renews the lease of a job it runs every third of the lease, so a long golden replay is not taken
over while it is alive; a replica that dies stops renewing and its jobs are claimed again once the lease
runs out. Completion is fenced in the store: a late completion after a lost lease writes nothing and is
counted `lost`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer.config.sampling import WorkSpec
from observer.conventions import metrics as names
from observer.errors import ObserverError, StoreError
from observer.store.jobs import (
    JOB_STATES,
    ClaimedJob,
    DriftReportRecord,
    Enqueued,
    GoldenRunRecord,
    JobQueue,
    JobSpec,
    ScoreWrite,
)

log = logging.getLogger("observer.work")

ATTEMPT_OUTCOMES = ("done", "retry", "failed", "lost", "store_error")


def worker_id() -> str:
    """This replica's worker name in claims: host, pid and a random suffix (a restarted pod is a new worker)."""
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class WorkResult:
    """What a finished job writes, in its completing transaction."""

    scores: Sequence[ScoreWrite] = ()
    golden_runs: Sequence[GoldenRunRecord] = ()
    drift_reports: Sequence[DriftReportRecord] = ()


class WorkFailed(ObserverError):
    """A job attempt failed in a way worth retrying (e.g. the version's endpoint is down)."""


Handler = Callable[[ClaimedJob], Awaitable[WorkResult]]


@dataclass
class WorkMetrics:
    """Counts of this replica's attempts and enqueues, and the queue's last counted state."""

    attempts: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, outcome)
    enqueued: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, added|duplicate|dropped)
    counts: dict[tuple[str, str], int] | None = None  # (kind, state), refreshed by `refresh`
    kinds: tuple[str, ...] = ()

    def record_enqueue(self, kind: str, result: Enqueued) -> None:
        self.enqueued[(kind, "added")] += result.added
        self.enqueued[(kind, "duplicate")] += result.duplicate
        self.enqueued[(kind, "dropped")] += result.dropped
        if result.dropped:
            log.warning("work queue full: %d %s job(s) dropped (sampling.store.work.max_queued)", result.dropped,
                        kind)


class WorkCollector(Collector):
    """observer_work_items{kind,state}, observer_work_attempts_total and observer_work_enqueued_total."""

    def __init__(self, metrics: WorkMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        m = self.metrics
        items = GaugeMetricFamily(names.WORK_ITEMS, "Jobs in the shared work queue by kind and state (all "
                                  "replicas; last counted by this replica)", labels=["kind", "state"])
        if m.counts is not None:
            for kind in m.kinds:
                for state in JOB_STATES:
                    items.add_metric([kind, state], m.counts.get((kind, state), 0))
        yield items
        attempts = CounterMetricFamily(names.WORK_ATTEMPTS, "Job attempts this replica finished, by outcome: done, "
                                       "retry (failed, queued again), failed (last attempt), lost (lease lost, "
                                       "result dropped), store_error", labels=["kind", "outcome"])
        for kind in m.kinds:
            for outcome in ATTEMPT_OUTCOMES:
                attempts.add_metric([kind, outcome], m.attempts[(kind, outcome)])
        yield attempts
        enq = CounterMetricFamily(names.WORK_ENQUEUED, "Jobs this replica offered to the queue: added, duplicate "
                                  "(key already known), dropped (queue full)", labels=["kind", "outcome"])
        for kind in m.kinds:
            for outcome in ("added", "duplicate", "dropped"):
                enq.add_metric([kind, outcome], m.enqueued[(kind, outcome)])
        yield enq


@dataclass
class Worker:
    """Claims up to `limit` jobs of `kind` per pass and runs them concurrently."""

    queue: JobQueue
    kind: str
    handler: Handler
    spec: WorkSpec
    metrics: WorkMetrics
    limit: int = 1
    worker: str = field(default_factory=worker_id)

    async def tick(self, *, max_passes: int = 100) -> None:
        """The periodic job: passes back to back while each finds a full batch (a backlog drains at the
        handler's pace, not one batch per poll), at most `max_passes`, then wait for the next poll."""
        for _ in range(max_passes):
            if await self.run_once() < self.limit:
                return

    async def run_once(self) -> int:
        """One pass: claim, run, complete; returns how many jobs were claimed."""
        jobs = await asyncio.to_thread(self.queue.claim, worker=self.worker, kinds=[self.kind], limit=self.limit,
                                       lease_seconds=self.spec.lease_seconds)
        await asyncio.gather(*(self._run(j) for j in jobs))
        return len(jobs)

    async def _run(self, job: ClaimedJob) -> None:
        keeper = asyncio.create_task(self._keep_lease(job))
        try:
            result = await self.handler(job)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # WorkFailed, or a bug in a handler: the job is retried, the worker lives
            if not isinstance(e, WorkFailed):
                log.error("%s job %s failed unexpectedly: %r", self.kind, job.key, e)
            await self._release(job, f"{type(e).__name__}: {e}")
            return
        finally:
            keeper.cancel()
        try:
            done = await asyncio.to_thread(self.queue.complete, job, scores=result.scores,
                                           golden_runs=result.golden_runs, drift_reports=result.drift_reports)
        except StoreError as e:  # the job stays claimed until its lease runs out, then it is redone
            self.metrics.attempts[(self.kind, "store_error")] += 1
            log.error("could not complete %s job %s: %s; it is retried after its lease", self.kind, job.key, e)
            return
        self.metrics.attempts[(self.kind, "done" if done else "lost")] += 1
        if not done:
            log.warning("%s job %s: lease lost before completion (another replica redid it); result dropped",
                        self.kind, job.key)

    async def _release(self, job: ClaimedJob, error: str) -> None:
        try:
            outcome = await asyncio.to_thread(self.queue.release, job, error=error,
                                              retry_in_seconds=self.spec.retry_seconds * job.attempt)
        except StoreError as e:
            self.metrics.attempts[(self.kind, "store_error")] += 1
            log.error("could not release %s job %s: %s", self.kind, job.key, e)
            return
        self.metrics.attempts[(self.kind, "retry" if outcome == "queued" else outcome)] += 1
        if outcome == "failed":
            log.error("%s job %s failed on its last attempt (%d): %s", self.kind, job.key, job.attempt, error)

    async def _keep_lease(self, job: ClaimedJob) -> None:
        while True:
            await asyncio.sleep(self.spec.lease_seconds / 3)
            try:
                if await asyncio.to_thread(self.queue.renew, job, lease_seconds=self.spec.lease_seconds) is None:
                    log.warning("%s job %s: lease lost while running", self.kind, job.key)
                    return
            except StoreError as e:
                log.warning("%s job %s: could not renew the lease: %s", self.kind, job.key, e)


async def enqueue(queue: JobQueue, jobs: Sequence[JobSpec], *, spec: WorkSpec, metrics: WorkMetrics) -> Enqueued:
    """Offer jobs to the queue and count what happened per kind."""
    result = await asyncio.to_thread(queue.enqueue, jobs, max_queued=spec.max_queued)
    if jobs:
        metrics.record_enqueue(jobs[0].kind, result)
    return result


async def refresh_counts(queue: JobQueue, metrics: WorkMetrics) -> None:
    """Count the queue's jobs by kind and state for /metrics."""
    metrics.counts = await asyncio.to_thread(queue.job_counts)
