"""The quality area's periodic work: golden replays (in process, or as shared jobs the leader enqueues and any
replica runs) and live judge calls run as shared jobs.

Each handler holds exactly the collaborators it needs, so none runs half-built: the composition root makes
only the handlers the config turns on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from observer.analyse.quality.events import EvaluationSink, emit_all, emit_golden, sample_events
from observer.analyse.quality.golden import GoldenSet
from observer.analyse.quality.live import LiveScorer, as_score
from observer.analyse.quality.model import GoldenRunResult, encode_run, scorer_name
from observer.analyse.quality.prompts import Rubric
from observer.analyse.quality.runner import GoldenRunner
from observer.analyse.quality.state import QualityState
from observer.analyse.rounds import Rounds
from observer.config.fleet import VersionSpec
from observer.config.sampling import WorkSpec
from observer.fleetview import FleetView
from observer.store.jobs import ClaimedJob, GoldenRunRecord, JobSpec, SharedWork
from observer.store.work import WorkMetrics, WorkResult, enqueue

GOLDEN_JOB = "golden"  # kind of the shared-work job that replays one golden set against one version
# Versions one replica replays at once: a model has at most a few live revisions (discovery caps them).
GOLDEN_PARALLEL_VERSIONS = 4

log = logging.getLogger("observer.quality")


def replayed(versions: Sequence[VersionSpec]) -> list[VersionSpec]:
    """The versions golden sets are replayed against: those with an OpenAI URL, not retired."""
    return [v for v in versions if v.openai and not v.retired]


# How often the golden job looks for due versions: a round per interval, and a version discovered
# mid-interval is replayed at the next look instead of at the next interval.
GOLDEN_LOOK_SECONDS = 15.0


def _logged(result: GoldenRunResult) -> GoldenRunResult:
    log.info("golden %s on %s: %d/%d passed, %s", result.golden_set, result.version, result.passed, result.scored,
             result.unscored or "all scored")
    return result


@dataclass(frozen=True)
class LocalGolden:
    """Golden replays in this process (no sample store): results go straight to the state."""

    runner: GoldenRunner
    golden: Sequence[GoldenSet]
    fleet: FleetView  # read at each look: a discovered version is replayed at the next one
    state: QualityState
    rounds: Rounds
    events: EvaluationSink | None = None

    async def run(self) -> None:
        """Replay every golden set against every due version (versions in parallel)."""
        slot, due = self.rounds.due(self.fleet.versions())

        async def version_runs(v: VersionSpec) -> None:
            for gs in self.golden:
                result = _logged(await self.runner.run(v, gs))
                self.state.record_golden(result)
                emit_golden(self.events, result)
            self.rounds.done(v.name, slot)

        await asyncio.gather(*(version_runs(v) for v in due[:GOLDEN_PARALLEL_VERSIONS]))


@dataclass(frozen=True)
class SharedGolden:
    """Golden replays as shared work: the leader enqueues one job per (version, golden set) and interval slot,
    every replica's worker replays; the run is stored with the job's completion."""

    work: SharedWork
    runner: GoldenRunner
    golden: Sequence[GoldenSet]
    fleet: FleetView
    rounds: Rounds
    work_spec: WorkSpec
    metrics: WorkMetrics
    events: EvaluationSink | None = None

    async def enqueue(self) -> None:
        """The leader's part of a round: keyed by the interval's slot, so a leader that changes mid-interval
        enqueues nothing twice (the new one's offers count as duplicates)."""
        slot, due = self.rounds.due(self.fleet.versions())
        specs = [JobSpec(kind=GOLDEN_JOB, key=f"golden:{v.name}:{gs.name}:{slot}",
                         payload={"version": v.name, "golden_set": gs.name}, max_attempts=self.work_spec.max_attempts)
                 for v in due for gs in self.golden]
        if specs:
            await enqueue(self.work, specs, spec=self.work_spec, metrics=self.metrics)
        for v in due:
            self.rounds.done(v.name, slot)

    async def replay(self, job: ClaimedJob) -> WorkResult:
        """Replay one golden set against one version."""
        version = self.fleet.version(str(job.payload.get("version")))
        version = version if version is not None and replayed([version]) else None
        gs = next((g for g in self.golden if g.name == job.payload.get("golden_set")), None)
        if version is None or gs is None:  # the version left or the set was removed since the job was queued
            log.info("golden job %s: no such version or golden set any more; nothing to do", job.key)
            return WorkResult()
        result = _logged(await self.runner.run(version, gs))
        emit_golden(self.events, result)  # where it ran: the other replicas only read the stored run
        return WorkResult(golden_runs=[GoldenRunRecord(version=result.version, golden_set=result.golden_set,
                                                       started=result.started, finished=result.finished,
                                                       body=encode_run(result))])


@dataclass(frozen=True)
class SharedJudging:
    """Live judge calls as shared work: one job judges one stored sample."""

    work: SharedWork
    live: LiveScorer
    rubric: Rubric

    async def judge(self, job: ClaimedJob) -> WorkResult:
        """Judge one live sample; the verdict (or the judge's error) is stored with the job's completion."""
        sid = int(job.payload["sample_id"])
        found = await asyncio.to_thread(self.work.samples_by_id, [sid])
        if not found:  # pruned by retention since it was queued
            return WorkResult()
        outcome = await self.live.judge_sample(found[0])
        scorer = scorer_name("judge", self.rubric.name)
        # Sent before the job's result commits: a replica that dies in between sends it again (at least once).
        emit_all(self.live.events, sample_events(found[0], [(scorer, outcome)]))
        return WorkResult(scores=[as_score(sid, scorer, outcome)])
