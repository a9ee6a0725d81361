"""Build the configured judge client (service and CLI alike)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import httpx

from observer import env
from observer.analyse.quality.judge import JudgeClient, JudgeStats, SharedBudget
from observer.analyse.quality.prompts import JudgePrompt, Rubric, load_prompt, load_rubrics
from observer.config.quality import QualitySpec


def judge_client(http: httpx.AsyncClient, spec: QualitySpec, prompt: JudgePrompt, stats: JudgeStats, *,
                 clock: Callable[[], float] = time.time, ledger: SharedBudget | None = None) -> JudgeClient:
    """The judge client of `quality.judge` (its url and model set), with the prompt already loaded; with
    `ledger` (the shared store) its hourly budget is the fleet's, not this replica's."""
    j = spec.judge
    if j.url is None or j.model is None:
        raise ValueError("judge_client needs quality.judge.url and quality.judge.model")
    return JudgeClient(http, base_url=j.url, model=j.model, prompt=prompt, api_key=os.environ.get(env.JUDGE_API_KEY),
                       timeout_s=j.timeout_seconds, max_retries=j.max_retries, backoff_s=j.backoff_seconds,
                       concurrency=j.concurrency, budget_per_hour=j.budget_per_hour, max_tokens=j.max_tokens,
                       stats=stats, wall_clock=clock, ledger=ledger)


def build_judge(http: httpx.AsyncClient, spec: QualitySpec, stats: JudgeStats, *,
                clock: Callable[[], float] = time.time) -> tuple[JudgeClient | None, dict[str, Rubric]]:
    """The judge client and rubrics when `quality.judge.url` is set, else (None, {}) — for the CLI, which
    needs the judge alone; the service builds from `checks.validate`."""
    j = spec.judge
    if j.url is None or j.model is None:
        return None, {}
    return judge_client(http, spec, load_prompt(j.prompt_path), stats, clock=clock), load_rubrics(j.rubric_dir)
