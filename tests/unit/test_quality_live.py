"""Live-sample scoring against the real SQLite store; the judge is the scripted server on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from observer.analyse.quality.judge import JudgeClient
from observer.analyse.quality.live import DONE_MARKER, LiveScorer, selected_for_judge
from observer.analyse.quality.prompts import load_prompt, load_rubrics
from observer.analyse.quality.state import QualityState
from observer.config.quality import LiveSpec
from observer.store.base import SampleRecord
from observer.store.sqlite import SqliteStore
from tests.support.judge_server import JudgeServer, Reply, run_judge_server

ROOT = Path(__file__).resolve().parents[2]
OUTPUTS = [
    ("How do I restart pods?", "Run kubectl rollout restart deployment/NAME.", "stop"),
    ("How do I kill a process?", "I'm sorry, but I can't help with that request.", "stop"),
    ("Explain queues.", "A queue holds requests. " * 8, "stop"),
    ("Write a long essay.", "Once upon a time there was a scheduler that", "length"),
    ("Say nothing.", "   ", None),
    ("Capital of France?", "Paris.", None),
]


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "samples.db")
    s.add([SampleRecord(version="canary", prompt=p, output=o, ts=1000.0 + i, finish_reason=f)
           for i, (p, o, f) in enumerate(OUTPUTS)])
    s.add([SampleRecord(version="stable", prompt="hi", output="Hello! How can I help?", ts=1000.0,
                        finish_reason="stop")])
    yield s
    s.close()


def state() -> QualityState:
    return QualityState(versions=["stable", "canary"], golden_sets=[],
                        live_checks=["empty", "refusal", "repetition", "truncation", "judge"])


async def test_rule_checks_on_every_sample_and_scores_attached(store: SqliteStore) -> None:
    st = state()
    scorer = LiveScorer(store=store, state=st, spec=LiveSpec())
    assert await scorer.run_once(["stable", "canary"]) == 7
    assert st.live_check_totals("canary", "refusal", since=0) == (1, 6)
    assert st.live_check_totals("canary", "repetition", since=0) == (1, 6)
    assert st.live_check_totals("canary", "empty", since=0) == (1, 6)
    # truncation is undecided where the finish reason is unknown (2 samples): counted in neither
    assert st.live_check_totals("canary", "truncation", since=0) == (1, 4)
    assert st.live_check_totals("stable", "refusal", since=0) == (0, 1)
    assert st.live_check_totals("canary", "refusal", since=1002.0) == (0, 4)
    samples = {s.output: s for s in store.samples("canary")}
    refused = samples[OUTPUTS[1][1]]
    assert refused.scores["rule:refusal"].passed is False
    assert refused.scores[DONE_MARKER].passed is False and "refusal" in refused.scores[DONE_MARKER].reason
    assert samples[OUTPUTS[0][1]].scores[DONE_MARKER].passed is True
    assert samples["Paris."].scores["rule:truncation"].passed is None
    # a second pass finds nothing left to score
    assert await scorer.run_once(["stable", "canary"]) == 0
    assert st.live_check_totals("canary", "refusal", since=0) == (1, 6)


async def test_batch_size_bounds_each_pass(store: SqliteStore) -> None:
    scorer = LiveScorer(store=store, state=state(), spec=LiveSpec(batch_size=4))
    assert await scorer.run_once(["canary"]) == 4
    assert await scorer.run_once(["canary"]) == 2
    assert await scorer.run_once(["canary"]) == 0


def test_judge_selection_is_stable_and_close_to_the_fraction() -> None:
    hashes = [f"h{i}" for i in range(10_000)]
    chosen = [h for h in hashes if selected_for_judge(h, 0.2)]
    assert 0.18 < len(chosen) / len(hashes) < 0.22
    assert chosen == [h for h in hashes if selected_for_judge(h, 0.2)]
    assert not any(selected_for_judge(h, 0.0) for h in hashes)
    assert all(selected_for_judge(h, 1.0) for h in hashes)


@pytest.fixture()
def judge_server() -> Iterator[JudgeServer]:
    with run_judge_server() as s:
        yield s


async def test_judge_on_a_fraction_records_verdicts_and_errors(store: SqliteStore, judge_server: JudgeServer) -> None:
    st = state()
    rubric = load_rubrics(ROOT / "evals" / "rubrics")["helpfulness"]
    # The judge truncates its reply on one sample twice (asked once more, as every unusable reply is): an error.
    def on_paris(user: str) -> bool:
        return "Paris." in user

    judge_server.script(*[Reply(finish_reason="length", when=on_paris)] * 2)
    async with httpx.AsyncClient() as http:
        judge = JudgeClient(http, base_url=judge_server.url, model="scripted", concurrency=1, max_retries=0,
                            prompt=load_prompt(ROOT / "evals" / "judge_prompt.yaml"))
        scorer = LiveScorer(store=store, state=st, spec=LiveSpec(judge_fraction=1.0), judge=judge, rubric=rubric)
        await scorer.run_once(["canary"])
    judged = [s.scores["judge:helpfulness"] for s in store.samples("canary")]
    assert len(judged) == 6 and len(judge_server.requests) == 7
    errors = [s for s in judged if s.passed is None]
    assert len(errors) == 1 and errors[0].meta["error"] is True and "length" in errors[0].reason
    ok = [s for s in judged if s.passed is not None]
    assert all(s.meta["rubric_hash"] == rubric.hash and s.meta["judge_model"] == "scripted" for s in ok)
    failures, total = st.live_check_totals("canary", "judge", since=0)
    assert total == 5  # the judge error is not a pass or a fail
    assert failures == sum(1 for s in ok if s.passed is False) >= 2  # the refusal and the blank output
