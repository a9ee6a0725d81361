"""Durable shared work in the sample store (contract 3b): a job queue, the score-event feed and golden runs.

Replicas of the observer share one PostgreSQL store; judge calls and golden replays are jobs in it, so
work survives a replica loss and no two replicas do the same job:

- **claim** takes up to `limit` ready jobs (`SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL, the write
  lock on SQLite) and gives each a lease; a job whose lease ran out (its replica died) is claimable again.
- **complete** is *fenced*: it commits only while the claim is still the job's current attempt
  (same worker, same attempt number, still running), and it writes the job's results (scores, a golden
  run) in the same transaction. A job is therefore done exactly once even when a slow replica's lease
  ran out and another replica redid it: the late completion is refused (`False`) and its results are
  dropped. The work itself (a judge call) is at least once: a replica killed mid-call leaves it undone
  and another replica repeats it.
- Leases use the replica's clock: keep replicas on NTP (Kubernetes nodes are) and the lease far above the
  skew. Correctness (done once) rests on the fence, not on the clocks; only how soon a dead replica's
  jobs are retried does.

The **score-event feed** (`score_events`), **golden runs** (`golden_runs`) and **drift reports**
(`drift_reports`) are read in commit order by every replica, so all replicas export the same quality and
drift state, and a restarted replica rebuilds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol, runtime_checkable

from observer.store.records import StoredSample

JobState = Literal["queued", "running", "done", "failed"]
JOB_STATES: tuple[JobState, ...] = ("queued", "running", "done", "failed")
Release = Literal["queued", "failed", "lost"]

__all__ = ["JOB_STATES", "ClaimedJob", "DriftReportRecord", "Enqueued", "GoldenRunRecord", "JobQueue", "JobSpec",
           "JobState", "Release", "ScoreEvent", "ScoreWrite", "SharedWork"]


def _frozen() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class JobSpec:
    """A job to enqueue. `key` is unique over the queue's history (kept until pruned): enqueueing the same
    key twice adds it once, so a leader that restarts mid-enqueue does not double the work."""

    kind: str
    key: str
    payload: Mapping[str, Any] = field(default_factory=_frozen)
    max_attempts: int = 3


@dataclass(frozen=True)
class ClaimedJob:
    """A job this worker holds until `lease_until` (its replica's clock); `attempt` fences completion."""

    id: int
    kind: str
    key: str
    payload: Mapping[str, Any]
    attempt: int
    worker: str
    lease_until: float


@dataclass(frozen=True)
class Enqueued:
    """What one enqueue did: new jobs, keys already known, jobs dropped because the queue was full."""

    added: int = 0
    duplicate: int = 0
    dropped: int = 0


@dataclass(frozen=True)
class ScoreWrite:
    """A score a completing job attaches to a sample (same upsert as `attach_score`)."""

    sample_id: int
    scorer: str
    passed: bool | None
    score: float | None
    reason: str
    meta: Mapping[str, Any] = field(default_factory=_frozen)


@dataclass(frozen=True)
class GoldenRunRecord:
    """One golden replay's result as stored: the quality area encodes and decodes `body`."""

    version: str
    golden_set: str
    started: float
    finished: float
    body: Mapping[str, Any]


@dataclass(frozen=True)
class DriftReportRecord:
    """One drift check's report as stored: the drift area encodes and decodes `body`."""

    version: str
    checked_at: float
    body: Mapping[str, Any]


@dataclass(frozen=True)
class ScoreEvent:
    """One committed score, in commit order (`cursor` resumes after it): what live-check totals are built
    from on every replica."""

    cursor: tuple[int, int]
    sample_id: int
    version: str
    sample_ts: float
    scorer: str
    passed: bool | None


@runtime_checkable
class JobQueue(Protocol):
    """Durable jobs shared by the replicas of one store; blocking calls (async callers use to_thread)."""

    def enqueue(self, jobs: Sequence[JobSpec], *, max_queued: int) -> Enqueued:
        """Add jobs whose key is new while fewer than `max_queued` are queued or running; the rest of a full
        queue is dropped (counted in the result, never silently)."""
        ...

    def claim(self, *, worker: str, kinds: Sequence[str], limit: int, lease_seconds: float) -> list[ClaimedJob]:
        """Take up to `limit` ready jobs of `kinds`, oldest first; jobs other replicas hold are skipped."""
        ...

    def renew(self, job: ClaimedJob, *, lease_seconds: float) -> ClaimedJob | None:
        """Extend the lease of a job still held; None when the claim was lost (the job moved on)."""
        ...

    def complete(self, job: ClaimedJob, *, scores: Sequence[ScoreWrite] = (),
                 golden_runs: Sequence[GoldenRunRecord] = (),
                 drift_reports: Sequence[DriftReportRecord] = ()) -> bool:
        """Mark the job done and write its results in one transaction, only while the claim is current;
        False (nothing written) when the lease was lost to another attempt."""
        ...

    def release(self, job: ClaimedJob, *, error: str, retry_in_seconds: float) -> Release:
        """Give a failed attempt back: queued again after `retry_in_seconds`, or failed for good after its
        last attempt, or `lost` when the claim was no longer current."""
        ...

    def job_counts(self) -> dict[tuple[str, str], int]:
        """Jobs per (kind, state)."""
        ...

    def prune_jobs(self, *, max_age_seconds: float) -> int:
        """Delete done and failed jobs older than `max_age_seconds`."""
        ...


@runtime_checkable
class BudgetLedger(Protocol):
    """Fleet-wide budgets (e.g. judge calls per hour) kept in the shared store, so N replicas spend what one
    would; blocking calls."""

    def spend(self, budget: str, *, limit: int, window_seconds: float) -> bool:
        """Take one unit: True (recorded) when fewer than `limit` were taken in the last `window_seconds` by any
        replica, False when the budget is spent. StoreError when the store cannot answer."""
        ...


class SharedWork(JobQueue, BudgetLedger, Protocol):
    """A store that also feeds every replica the committed scores, golden runs and drift reports, in commit
    order."""

    def score_events(self, *, after: tuple[int, int], limit: int) -> list[ScoreEvent]:
        """Committed scores after cursor `after` ((0, 0): from the start), in commit order."""
        ...

    def add_golden_run(self, run: GoldenRunRecord) -> None:
        """Store one golden run (without a job: the CLI, a single replica)."""
        ...

    def golden_runs(self, *, after: tuple[int, int], limit: int) -> list[tuple[tuple[int, int], GoldenRunRecord]]:
        """Stored golden runs after cursor `after`, in commit order."""
        ...

    def drift_reports(self, *, after: tuple[int, int], limit: int
                      ) -> list[tuple[tuple[int, int], DriftReportRecord]]:
        """Stored drift reports after cursor `after`, in commit order."""
        ...

    def samples_by_id(self, ids: Sequence[int]) -> list[StoredSample]:
        """The stored samples with these ids (missing ones, e.g. pruned, are left out)."""
        ...
