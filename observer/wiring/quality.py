"""Wiring of the quality area into the running service: scheduled golden replay, live scoring, export.

Relative paths in `quality:` (golden_dirs, judge.prompt_path, judge.rubric_dir) are resolved from
the working directory the observer runs in.

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

from observer.analyse.canary.pairs import resolve_pairs
from observer.analyse.quality.calibrate import load_labels
from observer.analyse.quality.collector import QualityCollector
from observer.analyse.quality.factory import build_judge, check_rubrics
from observer.analyse.quality.golden import discover
from observer.analyse.quality.jobs import (
    GOLDEN_JOB,
    LocalGolden,
    SharedGolden,
    SharedJudging,
    refresh_counts,
    replayed,
)
from observer.analyse.quality.judge import JudgeClient, JudgeStats
from observer.analyse.quality.live import JUDGE_CHECK, JUDGE_JOB, LiveScorer
from observer.analyse.quality.pairwise import PairwiseJudge
from observer.analyse.quality.prompts import Rubric, load_prompt
from observer.analyse.quality.reliability import JudgeReliability, ReliabilityCollector
from observer.analyse.quality.runner import GoldenRunner
from observer.analyse.quality.scorer import Scorer
from observer.analyse.quality.shadow import ShadowCollector, ShadowPair, ShadowReplayer
from observer.analyse.quality.similarity import Embedder, load_default_embedder
from observer.analyse.quality.state import QualityState
from observer.analyse.quality.sync import QualitySync
from observer.config.quality import QualitySpec
from observer.errors import ConfigError
from observer.export import quality_api
from observer.store.base import ManagedStore
from observer.store.jobs import JobSpec
from observer.store.work import WorkCollector, Worker, WorkMetrics, enqueue
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
    name: str = "quality"

    def collectors(self) -> Sequence[Collector]:
        return self.collector_list

    def routers(self) -> Sequence[APIRouter]:
        return self.router_list

    def jobs(self) -> Sequence[Job]:
        return self.job_list


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
    runner = GoldenRunner(ctx.http, spec=spec, scorer=scorer, clock=ctx.clock)
    shadow = build_shadow(ctx, spec, store, judge, rubrics) if spec.shadow.enabled else None
    reliability = None
    if judge is not None and spec.reliability.anchors_path:
        reliability = JudgeReliability(judge, rubrics, load_labels(spec.reliability.anchors_path),
                                       spec=spec.reliability, clock=ctx.clock)
    golden_on = bool(golden and replayed(versions))
    jobs: list[Job] = []
    workers: list[Worker] = []
    live: LiveScorer | None = None
    sync: QualitySync | None = None  # reads the shared results back (a store only)
    if store is None:
        if golden_on:
            jobs.append(Job("quality-golden", spec.interval_seconds,
                            LocalGolden(runner, golden, versions, state).run,
                            run_at_start=spec.run_at_start, singleton=True))
    else:
        rubric = rubrics.get(spec.live.judge_rubric) if judge is not None and spec.live.judge_fraction > 0 else None
        sync = QualitySync(store, state, live_checks=tuple(spec.live.checks) if live_on else (),
                           judge_rubric=rubric.name if live_on and rubric is not None else None)
        if golden_on:
            shared = SharedGolden(store, runner, golden, versions, spec.interval_seconds, work_spec, work_metrics,
                                  ctx.clock)
            jobs.append(Job("quality-golden", spec.interval_seconds, shared.enqueue,
                            run_at_start=spec.run_at_start, singleton=True))
            workers.append(Worker(store, GOLDEN_JOB, shared.replay, work_spec, work_metrics,
                                  limit=len(replayed(versions))))
        if live_on:
            async def judge_jobs(specs: Sequence[JobSpec]) -> object:
                return await enqueue(store, specs, spec=work_spec, metrics=work_metrics)

            live = LiveScorer(store=store, state=state, spec=spec.live, judge=judge, rubric=rubric,
                              judge_jobs=judge_jobs if judge is not None else None, sync=sync.run_once)
            if rubric is not None:
                workers.append(Worker(store, JUDGE_JOB, SharedJudging(store, live, rubric).judge, work_spec,
                                      work_metrics, limit=spec.judge.concurrency))
        work_metrics.kinds = tuple(w.kind for w in workers)  # exported label set: one per worker
    if live is not None:
        scorer_live = live
        jobs.append(Job("quality-live", spec.live.interval_seconds,
                        lambda: scorer_live.run_once([v.name for v in versions]), singleton=True))
    if shadow is not None:
        jobs.append(Job("quality-shadow", spec.shadow.interval_seconds, shadow.run_once, singleton=True))
    if reliability is not None:
        # Checks every minute whether a re-grade is due (identity change, interval); cheap when not.
        jobs.append(Job("quality-reliability", 60.0, reliability.run_once, singleton=True))
    jobs.extend(Job(f"work-{w.kind}", work_spec.poll_seconds, w.tick) for w in workers)
    if sync is not None:
        jobs.append(Job("quality-sync", work_spec.sync_seconds, sync.run_once))
    if store is not None and workers:
        jobs.append(Job("work-stats", 15.0, lambda: refresh_counts(store, work_metrics)))

    collectors: list[Collector] = [QualityCollector(
        state, golden_sets=golden, judge_stats=stats if judge else None,
        judge_model=spec.judge.model if judge else None, judge_prompt_version=judge.prompt.version if judge else None,
        live_window_s=spec.live.window_seconds, clock=ctx.clock)]
    shadow_collector = ShadowCollector(shadow) if shadow is not None else None
    if shadow_collector is not None:
        collectors.append(shadow_collector)
    if judge is not None:
        collectors.append(ReliabilityCollector(judge, reliability, position=shadow_collector.position
                                               if shadow_collector is not None else None))
    if store is not None:
        collectors.append(WorkCollector(work_metrics))
    router = quality_api.router(state, versions=[v.name for v in versions])
    return QualityComponent(state=state, judge=judge, shadow=shadow, job_list=jobs, collector_list=collectors,
                            router_list=(router,))


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
