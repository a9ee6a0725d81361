"""Build the configured judge client and check golden sets against its rubrics (service and CLI alike)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

import httpx

from observer import env
from observer.analyse.quality.golden import GoldenSet
from observer.analyse.quality.judge import JudgeClient, JudgeStats
from observer.analyse.quality.prompts import Rubric, load_prompt, load_rubrics
from observer.config.quality import QualitySpec
from observer.errors import ConfigError


def build_judge(http: httpx.AsyncClient, spec: QualitySpec, stats: JudgeStats, *,
                clock: Callable[[], float] = time.time) -> tuple[JudgeClient | None, dict[str, Rubric]]:
    """The judge client and rubrics when `quality.judge.url` is set, else (None, {})."""
    j = spec.judge
    if j.url is None or j.model is None:
        return None, {}
    client = JudgeClient(http, base_url=j.url, model=j.model, prompt=load_prompt(j.prompt_path),
                         api_key=os.environ.get(env.JUDGE_API_KEY), timeout_s=j.timeout_seconds,
                         max_retries=j.max_retries, backoff_s=j.backoff_seconds, concurrency=j.concurrency,
                         budget_per_hour=j.budget_per_hour, max_tokens=j.max_tokens, stats=stats,
                         wall_clock=clock)
    return client, load_rubrics(j.rubric_dir)


def check_rubrics(golden: Sequence[GoldenSet], rubrics: dict[str, Rubric]) -> None:
    """Every rubric a judged golden item names must exist (checked only when a judge is configured)."""
    for gs in golden:
        for item in gs.items:
            for a in item.assertions:
                if a.type == "judge" and (name := a.rubric or item.rubric) not in rubrics:
                    raise ConfigError(f"item {item.id!r} uses unknown rubric {name!r}; known: "
                                      f"{', '.join(sorted(rubrics)) or 'none'}", source=gs.path, line=item.line)
