"""Judge reliability (#16): the anchors re-graded at start, on a judge change and daily; κ, position
consistency and the call budget exported per judge. The judge is the scripted rule judge on loopback, which
agrees with the anchors' labels on the items it can decide; a scripted "always pass" judge has κ 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from observer.analyse.quality.calibrate import LabelledItem
from observer.analyse.quality.judge import JudgeClient
from observer.analyse.quality.prompts import load_prompt, load_rubrics
from observer.analyse.quality.reliability import JudgeReliability, ReliabilityCollector
from observer.config.quality import ReliabilitySpec
from tests.support.judge_server import JudgeServer, Reply, run_judge_server

ROOT = Path(__file__).resolve().parents[2]
RUBRICS = load_rubrics(ROOT / "evals" / "rubrics")
PROMPT = load_prompt(ROOT / "evals" / "judge_prompt.yaml")
ITEMS = [LabelledItem(id=f"a{i}", rubric="correctness", prompt="Capital of France?", output=out, reference="Paris",
                      human_pass=ok, note="") for i, (out, ok) in enumerate(
                          [("Paris.", True), ("It is Paris.", True), ("Lyon.", False), ("Marseille.", False)] * 3)]


@pytest.fixture(scope="module")
def server() -> Iterator[JudgeServer]:
    with run_judge_server() as s:
        yield s


async def test_regrades_at_start_on_a_change_and_when_old_but_not_otherwise(server: JudgeServer) -> None:
    now = [1000.0]
    async with httpx.AsyncClient() as http:
        judge = JudgeClient(http, base_url=server.url, model="scripted", prompt=PROMPT, max_retries=0)
        rel = JudgeReliability(judge, RUBRICS, ITEMS, spec=ReliabilitySpec(interval_seconds=3600),
                               clock=lambda: now[0])
        assert rel.due() == "first grade"
        first = await rel.run_once()
        assert first is not None and first.agreement.kappa == pytest.approx(1.0) and first.agreement.n == 12
        assert first.identity["prompt_hash"] == PROMPT.hash and "correctness=" in first.identity["rubric_hash"]
        now[0] += 60
        assert rel.due() is None and await rel.run_once() is None
        judge.prompt = replace(PROMPT, system=PROMPT.system + "\nBe brief.")  # same version, edited text
        assert rel.due() == "judge identity changed (prompt_hash)"
        assert await rel.run_once() is not None
        judge.model = "other-judge"
        assert "judge_model" in (rel.due() or "")
        await rel.run_once()
        now[0] += 3600
        assert rel.due() == "last grade older than 3600s"


async def test_a_judge_that_passes_everything_has_kappa_zero_and_is_exported(server: JudgeServer) -> None:
    async with httpx.AsyncClient() as http:
        judge = JudgeClient(http, base_url=server.url, model="lenient", prompt=PROMPT, max_retries=0,
                            budget_per_hour=500)
        server.script(*[Reply(content=json.dumps({"reasoning": "ok", "score": 5, "verdict": "pass"}))] * 11,
                      Reply(content="not json"), Reply(content="not json"))  # unusable twice: an error
        rel = JudgeReliability(judge, RUBRICS, ITEMS, spec=ReliabilitySpec())
        grade = await rel.run_once()
        assert grade is not None and grade.agreement.kappa == pytest.approx(0.0) and grade.agreement.errors == 1
        registry = CollectorRegistry()
        registry.register(ReliabilityCollector(judge, rel, position=lambda: (45, 50)))
        text = generate_latest(registry).decode()
    assert 'observer_judge_agreement_kappa{judge="lenient"} 0.0' in text
    assert 'observer_judge_agreement_items{judge="lenient"} 11.0' in text
    assert 'observer_judge_agreement_errors{judge="lenient"} 1.0' in text
    assert 'observer_judge_position_consistency{judge="lenient"} 0.9' in text
    assert 'observer_judge_budget_per_hour{judge="lenient"} 500.0' in text
    assert 'observer_judge_budget_remaining{judge="lenient"} 487.0' in text  # 13 calls spent


def test_no_grade_yet_exports_no_kappa_never_nan() -> None:
    http = httpx.AsyncClient()
    judge = JudgeClient(http, base_url="http://127.0.0.1:9/v1", model="j", prompt=PROMPT)
    registry = CollectorRegistry()
    registry.register(ReliabilityCollector(judge, None, position=lambda: (0, 0)))
    text = generate_latest(registry).decode()
    assert "observer_judge_agreement_kappa" not in text and "position_consistency" not in text
    assert "NaN" not in text
