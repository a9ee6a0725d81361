"""Wiring of the quality area into the running service: scheduled golden replay, live scoring, export.

Relative paths in `quality:` (golden_dirs, judge.prompt_path, judge.rubric_dir) are resolved from
the working directory the observer runs in.

With the sample store on (SQLite or PostgreSQL), golden replays and live judge calls are shared work: the
leader enqueues them as durable jobs, every replica's workers claim and run them, and every replica's state
is read back from the store (`QualitySync`), so replicas agree and a restart loses no result. Without a
store (sampling off), golden replays run in this process and their results live in memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.analyse.canary.pairs import resolve_pairs
from observer.analyse.quality.calibrate import load_labels
from observer.analyse.quality.collector import QualityCollector
from observer.analyse.quality.factory import build_judge, check_rubrics
from observer.analyse.quality.golden import GoldenSet, discover
from observer.analyse.quality.judge import JudgeClient, JudgeStats
from observer.analyse.quality.live import JUDGE_CHECK, JUDGE_JOB, LiveScorer, as_score
from observer.analyse.quality.model import GoldenRunResult, encode_run
from observer.analyse.quality.pairwise import PairwiseJudge
from observer.analyse.quality.prompts import Rubric, load_prompt
from observer.analyse.quality.reliability import JudgeReliability, ReliabilityCollector
from observer.analyse.quality.runner import GoldenRunner
from observer.analyse.quality.scorer import Scorer
from observer.analyse.quality.shadow import ShadowCollector, ShadowPair, ShadowReplayer
from observer.analyse.quality.similarity import Embedder, load_default_embedder
from observer.analyse.quality.state import QualityState
from observer.analyse.quality.sync import QualitySync
from observer.config.fleet import VersionSpec
from observer.config.quality import QualitySpec
from observer.config.sampling import WorkSpec
from observer.errors import ConfigError
from observer.export import quality_api
from observer.store.base import ManagedStore
from observer.store.jobs import ClaimedJob, GoldenRunRecord, JobSpec, SharedWork
from observer.wiring.runtime import BaseComponent, Context, Job
from observer.wiring.work import WorkCollector, Worker, WorkMetrics, WorkResult, enqueue

GOLDEN_JOB = "golden"  # kind of the shared-work job that replays one golden set against one version

log = logging.getLogger("observer.quality")


@dataclass
class QualityComponent(BaseComponent):
    """Golden replay and live scoring jobs, the QUALITY state and its collector."""

    name: str = "quality"
    spec: QualitySpec = field(default_factory=QualitySpec)
    versions: list[VersionSpec] = field(default_factory=list)
    golden: list[GoldenSet] = field(default_factory=list)
    runner: GoldenRunner | None = None
    live: LiveScorer | None = None
    state: QualityState | None = None
    judge: JudgeClient | None = None
    collector: QualityCollector | None = None
    results: list[GoldenRunResult] = field(default_factory=list)
    work: SharedWork | None = None  # the store's shared work queue and feed (None: sampling is off)
    work_spec: WorkSpec = field(default_factory=WorkSpec)
    work_metrics: WorkMetrics = field(default_factory=WorkMetrics)
    sync: QualitySync | None = None
    clock: Callable[[], float] = time.time
    shadow: ShadowReplayer | None = None  # shadow replay and paired comparison (quality.shadow)
    reliability: JudgeReliability | None = None  # the judge re-graded on the anchors (quality.reliability)
    workers: list[Worker] = field(init=False, default_factory=list)

    def collectors(self) -> Sequence[Collector]:
        out: list[Collector] = [self.collector] if self.collector else []
        shadow = ShadowCollector(self.shadow) if self.shadow is not None else None
        if shadow is not None:
            out.append(shadow)
        if self.judge is not None:
            out.append(ReliabilityCollector(self.judge, self.reliability,
                                            position=shadow.position if shadow is not None else None))
        if self.work is not None:
            out.append(WorkCollector(self.work_metrics))
        return out

    def routers(self) -> Sequence[APIRouter]:
        assert self.state is not None
        return (quality_api.router(self.state, versions=[v.name for v in self.versions]),)

    def replayed(self) -> list[VersionSpec]:
        return [v for v in self.versions if v.openai and not v.retired]

    def __post_init__(self) -> None:
        self.workers = self._workers()
        self.work_metrics.kinds = tuple(w.kind for w in self.workers)  # exported label set: one per worker

    def _workers(self) -> list[Worker]:
        """The shared-work workers this replica runs: golden replays and live judge calls (store only)."""
        if self.work is None:
            return []
        out = []
        if self.runner is not None and self.golden and self.replayed():
            out.append(Worker(self.work, GOLDEN_JOB, self.golden_job, self.work_spec, self.work_metrics,
                              limit=len(self.replayed())))
        if self.live is not None and self.live.judge_jobs is not None and self.live.rubric is not None:
            out.append(Worker(self.work, JUDGE_JOB, self.judge_job, self.work_spec, self.work_metrics,
                              limit=self.spec.judge.concurrency))
        return out

    def jobs(self) -> Sequence[Job]:
        jobs = []
        if self.runner is not None and self.golden and self.replayed():
            golden_round = self.run_golden if self.work is None else self.enqueue_golden
            jobs.append(Job("quality-golden", self.spec.interval_seconds, golden_round,
                            run_at_start=self.spec.run_at_start, singleton=True))
        if self.live is not None:
            jobs.append(Job("quality-live", self.spec.live.interval_seconds, self.run_live, singleton=True))
        if self.shadow is not None:
            jobs.append(Job("quality-shadow", self.spec.shadow.interval_seconds, self.run_shadow, singleton=True))
        if self.reliability is not None:
            # Checks every minute whether a re-grade is due (identity change, interval); cheap when not.
            jobs.append(Job("quality-reliability", 60.0, self.run_reliability, singleton=True))
        jobs.extend(Job(f"work-{w.kind}", self.work_spec.poll_seconds, w.tick) for w in self.workers)
        if self.sync is not None:
            jobs.append(Job("quality-sync", self.work_spec.sync_seconds, self.run_sync))
        if self.workers:
            jobs.append(Job("work-stats", 15.0, self.refresh_work_counts))
        return jobs

    async def enqueue_golden(self) -> None:
        """The leader's part of a golden round: one job per (version, golden set) for this interval's slot,
        so a leader that changes mid-interval enqueues nothing twice."""
        assert self.work is not None
        slot = int(self.clock() // self.spec.interval_seconds)
        specs = [JobSpec(kind=GOLDEN_JOB, key=f"golden:{v.name}:{gs.name}:{slot}",
                         payload={"version": v.name, "golden_set": gs.name}, max_attempts=self.work_spec.max_attempts)
                 for v in self.replayed() for gs in self.golden]
        await enqueue(self.work, specs, spec=self.work_spec, metrics=self.work_metrics)

    async def golden_job(self, job: ClaimedJob) -> WorkResult:
        """Replay one golden set against one version; the run is stored with the job's completion."""
        assert self.runner is not None
        version = next((v for v in self.replayed() if v.name == job.payload.get("version")), None)
        gs = next((g for g in self.golden if g.name == job.payload.get("golden_set")), None)
        if version is None or gs is None:  # the version left or the set was removed since the job was queued
            log.info("golden job %s: no such version or golden set any more; nothing to do", job.key)
            return WorkResult()
        result = await self.runner.run(version, gs)
        log.info("golden %s on %s: %d/%d passed, %s", gs.name, version.name, result.passed, result.scored,
                 result.unscored or "all scored")
        return WorkResult(golden_runs=[GoldenRunRecord(version=result.version, golden_set=result.golden_set,
                                                       started=result.started, finished=result.finished,
                                                       body=encode_run(result))])

    async def judge_job(self, job: ClaimedJob) -> WorkResult:
        """Judge one live sample; the verdict (or the judge's error) is stored with the job's completion."""
        assert self.live is not None and self.live.rubric is not None and self.work is not None
        sid = int(job.payload["sample_id"])
        found = await asyncio.to_thread(self.work.samples_by_id, [sid])
        if not found:  # pruned by retention since it was queued
            return WorkResult()
        outcome = await self.live.judge_sample(found[0])
        return WorkResult(scores=[as_score(sid, f"judge:{self.live.rubric.name}", outcome)])

    async def run_sync(self) -> None:
        assert self.sync is not None
        await self.sync.run_once()

    async def refresh_work_counts(self) -> None:
        assert self.work is not None
        self.work_metrics.counts = await asyncio.to_thread(self.work.job_counts)

    async def run_golden(self) -> None:
        """Replay every golden set against every version with an OpenAI URL (versions in parallel)."""
        assert self.runner is not None and self.state is not None
        runner, state = self.runner, self.state

        async def version_runs(v: VersionSpec) -> None:
            for gs in self.golden:
                result = await runner.run(v, gs)
                state.record_golden(result)
                log.info("golden %s on %s: %d/%d passed, %s", gs.name, v.name, result.passed, result.scored,
                         result.unscored or "all scored")

        await asyncio.gather(*(version_runs(v) for v in self.versions if v.openai and not v.retired))

    async def run_shadow(self) -> None:
        assert self.shadow is not None
        stored = await self.shadow.run_once()
        if stored:
            log.info("shadow replay: %d pair(s) stored", stored)

    async def run_reliability(self) -> None:
        assert self.reliability is not None
        await self.reliability.run_once()

    async def run_live(self) -> None:
        """Score the newest unscored live samples of every version."""
        assert self.live is not None
        await self.live.run_once([v.name for v in self.versions])


def build(ctx: Context, *, store: ManagedStore | None,
          embedder_factory: Callable[[], Embedder] | None = None) -> QualityComponent | None:
    """Return this area's component (its `state` is the quality service), or None when it is disabled.

    `store`: the sample store live checks read and the shared work queue (None: sampling is off, so live
    scoring is too, and golden replays run in process)."""
    spec = ctx.config.quality
    if not spec.enabled:
        return None
    golden = discover(spec.golden_dirs, names=spec.golden_sets)
    stats = JudgeStats()
    judge, rubrics = build_judge(ctx.http, spec, stats, clock=ctx.clock)
    if judge is not None:
        check_rubrics(golden, rubrics)
        if spec.live.judge_fraction > 0 and spec.live.judge_rubric not in rubrics:
            raise ConfigError(f"unknown rubric {spec.live.judge_rubric!r}; known: {', '.join(sorted(rubrics))}",
                              path="quality.live.judge_rubric")
    versions = list(ctx.config.fleet.versions)
    live_checks: list[str] = list(spec.live.checks)
    if judge is not None and spec.live.judge_fraction > 0:
        live_checks.append(JUDGE_CHECK)
    live_on = spec.live.enabled and store is not None
    state = QualityState(versions=[v.name for v in versions if v.openai and not v.retired],
                         golden_sets=[g.name for g in golden], live_checks=live_checks if live_on else [],
                         live_versions=[v.name for v in versions])
    needs_embedder = any(g.uses("similarity") for g in golden)
    scorer = Scorer(judge=judge, rubrics=rubrics, similarity_threshold=spec.similarity_threshold,
                    embedder_factory=(embedder_factory or load_default_embedder) if needs_embedder else None)
    work_spec = ctx.config.sampling.store.work
    work_metrics = WorkMetrics()
    sync = None
    if store is not None:
        sync = QualitySync(store, state, live_checks=tuple(spec.live.checks) if live_on else (),
                           judge_rubric=spec.live.judge_rubric if live_on and judge is not None
                           and spec.live.judge_fraction > 0 else None)
    live = None
    if live_on and store is not None:
        assert sync is not None

        async def judge_jobs(jobs: Sequence[JobSpec]) -> object:
            return await enqueue(store, jobs, spec=work_spec, metrics=work_metrics)

        live = LiveScorer(store=store, state=state, spec=spec.live, judge=judge,
                          rubric=rubrics.get(spec.live.judge_rubric) if spec.live.judge_fraction > 0 else None,
                          judge_jobs=judge_jobs if judge is not None else None, sync=sync.run_once)
    runner = GoldenRunner(ctx.http, spec=spec, scorer=scorer, clock=ctx.clock)
    shadow = build_shadow(ctx, spec, store, judge, rubrics) if spec.shadow.enabled else None
    reliability = None
    if judge is not None and spec.reliability.anchors_path:
        reliability = JudgeReliability(judge, rubrics, load_labels(spec.reliability.anchors_path),
                                       spec=spec.reliability, clock=ctx.clock)
    collector = QualityCollector(state, golden_sets=golden, judge_stats=stats if judge else None,
                                 judge_model=spec.judge.model if judge else None,
                                 judge_prompt_version=judge.prompt.version if judge else None,
                                 live_window_s=spec.live.window_seconds, clock=ctx.clock)
    return QualityComponent(spec=spec, versions=versions, golden=golden, runner=runner,
                            live=live, state=state, judge=judge, collector=collector, work=store,
                            work_spec=work_spec, work_metrics=work_metrics, sync=sync, clock=ctx.clock,
                            shadow=shadow, reliability=reliability)


def build_shadow(ctx: Context, spec: QualitySpec, store: ManagedStore | None, judge: JudgeClient | None,
                 rubrics: Mapping[str, Rubric]) -> ShadowReplayer:
    """The shadow replayer of every (canary, baseline) pair; ConfigError when it cannot run."""
    if store is None:
        raise ConfigError("shadow replay reads stable's sampled prompts from the sample store: turn sampling on "
                          "(sampling.enabled) or quality.shadow off", path="quality.shadow.enabled")
    by_name = {v.name: v for v in ctx.config.fleet.versions}
    pairs: list[ShadowPair] = []
    for p in resolve_pairs(ctx.config):
        c, b = by_name[p.canary], by_name[p.baseline]
        urls = []
        for v in (c, b):
            url = spec.shadow.targets.get(v.name) or v.openai
            if url is None:
                raise ConfigError(f"version {v.name!r} has no URL to replay prompts to: set "
                                  f"quality.shadow.targets.{v.name} (a shadow replica) or its openai URL",
                                  path=f"quality.shadow.targets.{v.name}")
            urls.append(url)
        pairs.append(ShadowPair(canary=c, baseline=b, canary_url=urls[0], baseline_url=urls[1]))
    unknown = sorted(set(spec.shadow.targets) - set(by_name))
    if unknown:
        raise ConfigError(f"unknown version(s) {', '.join(unknown)}; the fleet has: {', '.join(sorted(by_name))}",
                          path="quality.shadow.targets")
    pairwise = None
    if judge is not None and spec.shadow.judge:
        if spec.shadow.pairwise.rubric not in rubrics:
            raise ConfigError(f"unknown rubric {spec.shadow.pairwise.rubric!r}; known: {', '.join(sorted(rubrics))}",
                              path="quality.shadow.pairwise.rubric")
        pw = spec.shadow.pairwise
        pairwise = PairwiseJudge(judge, load_prompt(pw.prompt_path), rubrics[pw.rubric], votes=pw.votes,
                                 temperature=pw.temperature)
    return ShadowReplayer(http=ctx.http, spec=spec.shadow, store=store, pairs=pairs, judge=pairwise, clock=ctx.clock)
