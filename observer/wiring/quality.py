"""Wiring of the quality area into the running service: scheduled golden replay, live scoring, export.

Relative paths in `quality:` (golden_dirs, judge.prompt_path, judge.rubric_dir) are resolved from
the working directory the observer runs in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.analyse.quality.collector import QualityCollector
from observer.analyse.quality.factory import build_judge, check_rubrics
from observer.analyse.quality.golden import GoldenSet, discover
from observer.analyse.quality.judge import JudgeClient, JudgeStats
from observer.analyse.quality.live import JUDGE_CHECK, LiveScorer
from observer.analyse.quality.model import GoldenRunResult
from observer.analyse.quality.runner import GoldenRunner
from observer.analyse.quality.scorer import Scorer
from observer.analyse.quality.similarity import Embedder, load_default_embedder
from observer.analyse.quality.state import QualityState
from observer.config.fleet import VersionSpec
from observer.config.quality import QualitySpec
from observer.errors import ConfigError
from observer.export import quality_api
from observer.store.base import SampleStore
from observer.wiring.runtime import BaseComponent, Context, Job

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

    def collectors(self) -> Sequence[Collector]:
        return (self.collector,) if self.collector else ()

    def routers(self) -> Sequence[APIRouter]:
        assert self.state is not None
        return (quality_api.router(self.state, versions=[v.name for v in self.versions]),)

    def jobs(self) -> Sequence[Job]:
        jobs = []
        if self.runner is not None and self.golden and any(v.openai for v in self.versions):
            jobs.append(Job("quality-golden", self.spec.interval_seconds, self.run_golden,
                            run_at_start=self.spec.run_at_start, singleton=True))
        if self.live is not None:
            jobs.append(Job("quality-live", self.spec.live.interval_seconds, self.run_live, singleton=True))
        return jobs

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

    async def run_live(self) -> None:
        """Score the newest unscored live samples of every version."""
        assert self.live is not None
        await self.live.run_once([v.name for v in self.versions])


def build(ctx: Context, *, store: SampleStore | None,
          embedder_factory: Callable[[], Embedder] | None = None) -> QualityComponent | None:
    """Return this area's component (its `state` is the quality service), or None when it is disabled.

    `store`: the sample store live checks read (None: sampling is off, so live scoring is too)."""
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
    live = None
    if live_on and store is not None:
        live = LiveScorer(store=store, state=state, spec=spec.live, judge=judge,
                          rubric=rubrics.get(spec.live.judge_rubric) if spec.live.judge_fraction > 0 else None)
    collector = QualityCollector(state, golden_sets=golden, judge_stats=stats if judge else None,
                                 judge_model=spec.judge.model if judge else None,
                                 judge_prompt_version=judge.prompt.version if judge else None,
                                 live_window_s=spec.live.window_seconds, clock=ctx.clock)
    return QualityComponent(spec=spec, versions=versions, golden=golden,
                            runner=GoldenRunner(ctx.http, spec=spec, scorer=scorer, clock=ctx.clock),
                            live=live, state=state, judge=judge, collector=collector)
