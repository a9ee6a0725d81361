"""Wiring of the quality area into the running service: scheduled golden replay, live scoring, export.

Relative paths in `quality:` (golden_dirs, judge.prompt_path, judge.rubric_dir) are resolved against the
config file's directory when the config is loaded (`config.base.FilePath`); unset, they name what the package
ships.

With the sample store on (SQLite or PostgreSQL), golden replays and live judge calls are shared work: the
leader enqueues them as durable jobs, every replica's workers claim and run them, and every replica's state
is read back from the store (`QualitySync`), so replicas agree and a restart loses no result. Without a
store (sampling off), golden replays run in this process and their results live in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.analyse.pairs import FleetPairs
from observer.analyse.quality.checks import validate
from observer.analyse.quality.collector import QualityCollector
from observer.analyse.quality.events import EvaluationSink
from observer.analyse.quality.factory import judge_client
from observer.analyse.quality.jobs import (
    GOLDEN_JOB,
    GOLDEN_LOOK_SECONDS,
    GOLDEN_PARALLEL_VERSIONS,
    LocalGolden,
    SharedGolden,
    SharedJudging,
    replayed,
)
from observer.analyse.quality.judge import JudgeClient, JudgeStats
from observer.analyse.quality.live import JUDGE_CHECK, JUDGE_JOB, LiveScorer
from observer.analyse.quality.model import scorer_name
from observer.analyse.quality.pairwise import PairwiseJudge
from observer.analyse.quality.prompts import JudgePrompt, Rubric
from observer.analyse.quality.reliability import JudgeReliability, ReliabilityCollector
from observer.analyse.quality.runner import GoldenRunner
from observer.analyse.quality.scorer import Scorer
from observer.analyse.quality.shadow import FleetShadowPairs, ShadowCollector, ShadowReplayer
from observer.analyse.quality.similarity import Embedder, load_default_embedder
from observer.analyse.quality.state import QualityState
from observer.analyse.quality.sync import QualitySync
from observer.analyse.quality.users import USER_WINDOW_SECONDS, UserAgreement
from observer.analyse.rounds import Rounds
from observer.config.fleet import VersionSpec
from observer.config.quality import QualitySpec
from observer.export import quality_api
from observer.store.base import ManagedStore
from observer.store.jobs import JobSpec
from observer.store.work import Worker, enqueue
from observer.wiring.runtime import BaseComponent, Context, Job


@dataclass
class QualityComponent(BaseComponent):
    """The quality area as built: its state (the quality service), the judge, the shadow replayer, and the
    jobs, collectors and routes the config turns on."""

    state: QualityState
    judge: JudgeClient | None
    shadow: ShadowReplayer | None
    job_list: Sequence[Job]
    collector_list: Sequence[Collector]
    router_list: Sequence[APIRouter]
    reliability: JudgeReliability | None = None
    worker_kinds: tuple[str, ...] = ()  # the shared-work kinds its workers claim (exported by the store's area)
    name: str = "quality"

    def job_kinds(self) -> Sequence[str]:
        return self.worker_kinds

    def kappa(self) -> float | None:
        """The judge's latest agreement with its anchors (None: not graded yet, undefined, or no judge)."""
        grade = self.reliability.last if self.reliability is not None else None
        return None if grade is None else grade.agreement.kappa

    def collectors(self) -> Sequence[Collector]:
        return self.collector_list

    def routers(self) -> Sequence[APIRouter]:
        return self.router_list

    def jobs(self) -> Sequence[Job]:
        return self.job_list


def build(ctx: Context, *, store: ManagedStore | None,
          embedder_factory: Callable[[], Embedder] | None = None,
          events: EvaluationSink | None = None) -> QualityComponent | None:
    """Return this area's component (its `state` is the quality service), or None when it is disabled.

    `store`: the sample store live checks read and the shared work queue (None: sampling is off, so live
    scoring is too, and golden replays run in process)."""
    spec = ctx.config.quality
    inputs = validate(ctx.config)  # what check-config reports; built from what it loaded
    if inputs is None:
        return None
    golden = inputs.golden
    stats = JudgeStats()
    judging = inputs.judge
    judge = None
    if judging is not None:  # with a store, the hourly budget is the fleet's: N replicas spend what one would
        judge = judge_client(ctx.http, spec, judging.prompt, stats, clock=ctx.clock, ledger=store)
    rubrics = judging.rubrics if judging is not None else {}
    fleet = ctx.fleet
    live_checks: list[str] = list(spec.live.checks)
    if judge is not None and spec.live.judge_fraction > 0:
        live_checks.append(JUDGE_CHECK)
    live_on = spec.live.enabled and store is not None
    state = QualityState(versions=[], golden_sets=[g.name for g in golden], live_checks=live_checks if live_on else [])

    def follow(versions: Sequence[VersionSpec]) -> None:
        state.follow([v.name for v in replayed(versions)], [v.name for v in versions])

    follow(fleet.versions())
    fleet.subscribe(follow)  # discovered versions: zero counts from the start, series end when they leave
    needs_embedder = any(g.uses("similarity") for g in golden)
    scorer = Scorer(judge=judge, rubrics=rubrics, similarity_threshold=spec.similarity_threshold,
                    embedder_factory=(embedder_factory or load_default_embedder) if needs_embedder else None)
    work_spec = ctx.config.sampling.store.work
    work_metrics = ctx.work
    runner = GoldenRunner(ctx.http, spec=spec, scorer=scorer, clock=ctx.clock)
    shadow = None
    if spec.shadow.enabled and store is not None:  # no store: the sample area was left out of this assembly
        shadow = build_shadow(ctx, spec, store, judge, judging.pairwise_prompt if judging is not None else None,
                              rubrics, events)
    reliability = None
    if judge is not None and judging is not None and judging.anchors is not None:
        reliability = JudgeReliability(judge, rubrics, judging.anchors, spec=spec.reliability, clock=ctx.clock)
    golden_on = bool(golden)
    rounds = Rounds(spec.interval_seconds, ctx.clock, run_at_start=spec.run_at_start, select=replayed)
    look = min(spec.interval_seconds, GOLDEN_LOOK_SECONDS)
    jobs: list[Job] = []
    workers: list[Worker] = []
    live: LiveScorer | None = None
    sync: QualitySync | None = None  # reads the shared results back (a store only)
    if store is None:
        if golden_on:
            jobs.append(Job("quality-golden", look, LocalGolden(runner, golden, fleet, state, rounds,
                                                                 events).run,
                            singleton=True))
    else:
        rubric = rubrics.get(spec.live.judge_rubric) if judge is not None and spec.live.judge_fraction > 0 else None
        sync = QualitySync(store, state, live_checks=tuple(spec.live.checks) if live_on else (),
                           judge_rubric=rubric.name if live_on and rubric is not None else None)
        if golden_on:
            shared = SharedGolden(store, runner, golden, fleet, rounds, work_spec, work_metrics, events)
            jobs.append(Job("quality-golden", look, shared.enqueue, singleton=True))
            workers.append(Worker(store, GOLDEN_JOB, shared.replay, work_spec, work_metrics,
                                  limit=GOLDEN_PARALLEL_VERSIONS))
        if live_on:
            async def judge_jobs(specs: Sequence[JobSpec]) -> object:
                return await enqueue(store, specs, spec=work_spec, metrics=work_metrics)

            live = LiveScorer(store=store, state=state, spec=spec.live, judge=judge, rubric=rubric,
                              judge_jobs=judge_jobs if judge is not None else None, sync=sync.run_once,
                              events=events)
            if rubric is not None:
                workers.append(Worker(store, JUDGE_JOB, SharedJudging(store, live, rubric).judge, work_spec,
                                      work_metrics, limit=spec.judge.concurrency))
    if live is not None:
        scorer_live = live
        jobs.append(Job("quality-live", spec.live.interval_seconds,
                        lambda: scorer_live.run_once([v.name for v in fleet.versions()]), singleton=True))
    if shadow is not None:
        jobs.append(Job("quality-shadow", spec.shadow.interval_seconds, shadow.run_once, singleton=True))
    if reliability is not None:
        # Checks every minute whether a re-grade is due (identity change, interval); cheap when not.
        jobs.append(Job("quality-reliability", 60.0, reliability.run_once, singleton=True))
    users = None
    if live is not None and judge is not None and rubric is not None and store is not None:
        users = UserAgreement(store, scorer_name("judge", rubric.name), window_seconds=USER_WINDOW_SECONDS,
                              clock=ctx.clock)
        jobs.append(Job("quality-users", 60.0, users.run_once))
    jobs.extend(Job(f"work-{w.kind}", work_spec.poll_seconds, w.tick) for w in workers)
    if sync is not None:
        jobs.append(Job("quality-sync", work_spec.sync_seconds, sync.run_once))

    collectors: list[Collector] = [QualityCollector(
        state, golden_sets=golden, judge_stats=stats if judge else None,
        judge_model=spec.judge.model if judge else None, judge_prompt_version=judge.prompt.version if judge else None,
        live_window_s=spec.live.window_seconds, clock=ctx.clock)]
    shadow_collector = ShadowCollector(shadow) if shadow is not None else None
    if shadow_collector is not None:
        collectors.append(shadow_collector)
    if judge is not None:
        collectors.append(ReliabilityCollector(judge, reliability, position=shadow_collector.position
                                               if shadow_collector is not None else None, users=users))
    router = quality_api.router(state, versions=lambda: [v.name for v in fleet.versions()])
    return QualityComponent(state=state, judge=judge, shadow=shadow, job_list=jobs, collector_list=collectors,
                            router_list=(router,), reliability=reliability,
                            worker_kinds=tuple(w.kind for w in workers))


def build_shadow(ctx: Context, spec: QualitySpec, store: ManagedStore, judge: JudgeClient | None,
                 pairwise_prompt: JudgePrompt | None, rubrics: Mapping[str, Rubric],
                 events: EvaluationSink | None = None) -> ShadowReplayer:
    """The shadow replayer of every (canary, baseline) pair of the live fleet."""
    pairs = FleetShadowPairs(FleetPairs(ctx.config, ctx.fleet).current, ctx.fleet, spec.shadow.targets)
    pairwise = None
    if judge is not None and pairwise_prompt is not None:
        pw = spec.shadow.pairwise
        pairwise = PairwiseJudge(judge, pairwise_prompt, rubrics[pw.rubric], votes=pw.votes, temperature=pw.temperature)
    return ShadowReplayer(http=ctx.http, spec=spec.shadow, store=store, pairs=pairs, judge=pairwise, clock=ctx.clock,
                          events=events)
