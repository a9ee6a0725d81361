"""Scoring golden answers: similarity (fake and real MiniLM embedder), judge wiring, error handling."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from observer.analyse.quality.golden import GoldenItem, load_golden_set
from observer.analyse.quality.judge import JudgeClient
from observer.analyse.quality.model import Answer, ItemResult
from observer.analyse.quality.prompts import load_prompt, load_rubrics
from observer.analyse.quality.scorer import Scorer
from observer.analyse.quality.similarity import cosine_scores
from tests.support.judge_server import JudgeServer, Reply, run_judge_server

ROOT = Path(__file__).resolve().parents[2]


class BagOfWords:
    """A tiny deterministic embedder: hashed bag of words, L2-normalised (for unit tests only)."""

    model_id = "test/bag-of-words"
    dim = 256

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, int(hashlib.sha256(w.encode()).hexdigest(), 16) % self.dim] += 1
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


@pytest.fixture()
def items(tmp_path: Path) -> list[GoldenItem]:
    p = tmp_path / "s.yaml"
    p.write_text("""
items:
  - id: sim
    prompt: Summarise the incident.
    reference: the database pool was too small and caused errors
    assertions: [{type: similarity, threshold: 0.6}]
  - id: judged
    prompt: Capital of France?
    reference: Paris
    rubric: correctness
    assertions: [{type: judge}, {type: length, max_words: 10}]
  - id: plain
    prompt: Capital of Japan?
    reference: Tokyo
""".lstrip())
    return list(load_golden_set(p).items)


def test_cosine_scores_batch_and_edge_cases() -> None:
    emb = BagOfWords()
    sims = cosine_scores(emb, ["a b c", "x y z", "", "a b c"], ["a b c", "a b c", "a b c", ""])
    assert sims[0] == pytest.approx(1.0) and sims[1] == pytest.approx(0.0)
    assert sims[2] == 0.0 and sims[3] == 0.0  # empty text embeds as a zero vector: similarity 0, not NaN
    assert emb.calls == 1  # one batch for all pairs
    assert cosine_scores(emb, [], []) == []
    with pytest.raises(ValueError, match="2 outputs but 1 references"):
        cosine_scores(emb, ["a", "b"], ["a"])


async def test_similarity_pass_and_fail(items: list[GoldenItem]) -> None:
    scorer = Scorer(embedder_factory=BagOfWords)
    sim = items[0]
    good = Answer("The database pool was too small, which caused errors.", "stop", 0.1, 0.2)
    bad = Answer("Everything was fine and nothing happened.", "stop", 0.1, 0.2)
    scored = await scorer.score([sim, sim], [good, bad])
    (o_good,), (o_bad,) = [(o for o in r if o.check == "similarity") for r in scored]
    assert o_good.passed and o_good.meta["embedder"] == "test/bag-of-words"
    assert o_bad.passed is False and o_bad.score is not None and o_bad.score < 0.6


async def test_embedder_failure_leaves_items_unscored_never_passed(items: list[GoldenItem]) -> None:
    def broken() -> BagOfWords:
        raise RuntimeError("model files missing")

    scorer = Scorer(embedder_factory=broken)
    ans = Answer("the database pool was too small and caused errors", "stop", 0.1, 0.2)
    outcomes = (await scorer.score([items[0]], [ans]))[0]
    result = ItemResult("sim", "summary", ans, outcomes)
    assert not result.scored and not result.passed and result.unscored_reason == "scorer_error"
    assert any("model files missing" in o.reason for o in outcomes)


async def test_request_errors_get_no_outcomes(items: list[GoldenItem]) -> None:
    ans = Answer("", None, None, 1.0, error="HTTP 500: boom")
    assert await Scorer().score([items[2]], [ans]) == [()]


async def test_judge_not_configured_is_undecided_and_rules_still_decide(items: list[GoldenItem]) -> None:
    outcomes = (await Scorer().score([items[1]], [Answer("Paris", "stop", 0.1, 0.2)]))[0]
    judge = next(o for o in outcomes if o.check == "judge")
    assert judge.passed is None and not judge.error and "not configured" in judge.reason
    assert ItemResult("judged", "factual", Answer("Paris", "stop", 0.1, 0.2), outcomes).passed


@pytest.fixture()
def judge_server() -> Iterator[JudgeServer]:
    with run_judge_server() as s:
        yield s


async def test_judge_verdicts_and_errors_flow_into_items(items: list[GoldenItem], judge_server: JudgeServer) -> None:
    import httpx

    async with httpx.AsyncClient() as http:
        judge = JudgeClient(http, base_url=judge_server.url, model="scripted",
                            prompt=load_prompt(ROOT / "evals" / "judge_prompt.yaml"), max_retries=0)
        scorer = Scorer(judge=judge, rubrics=load_rubrics(ROOT / "evals" / "rubrics"))
        answers = [Answer("It is Paris.", "stop", 0.1, 0.2), Answer("Lyon", "stop", 0.1, 0.2)]
        good, bad = await scorer.score([items[1], items[1]], answers)
        judge_server.script(Reply(content="not json"), Reply(content="not json"))  # unusable twice: an error
        (errored,) = await scorer.score([items[1]], [answers[0]])
    r_good = ItemResult("judged", "factual", answers[0], good)
    r_bad = ItemResult("judged", "factual", answers[1], bad)
    r_err = ItemResult("judged", "factual", answers[0], errored)
    assert r_good.passed and r_good.score == 1.0
    assert r_bad.scored and not r_bad.passed
    j = next(o for o in good if o.check == "judge")
    assert j.meta["judge_model"] == "scripted" and j.meta["prompt_version"] == "judge-v1"
    assert j.meta["rubric_hash"].startswith("sha256:")
    assert r_err.judge_error and not r_err.scored and not r_err.passed
    assert r_err.unscored_reason == "judge_error"


def test_real_minilm_embedder_similarity() -> None:
    """The bundled all-MiniLM-L6-v2 through the drift area's loader (offline)."""
    from observer.analyse import embed

    emb = embed.load_local_embedder(max_cache_entries=0)
    ref = "A configuration change shrank the database connection pool and caused checkout errors."
    para = "Checkout errors happened because a config change made the DB connection pool too small."
    other = "The recipe needs two eggs, flour and a pinch of salt."
    s_para, s_other, s_same = cosine_scores(emb, [para, other, "Ünïcödé ✓ 日本語"], [ref, ref, "Ünïcödé ✓ 日本語"])
    assert s_para > 0.6 > s_other
    assert s_same == pytest.approx(1.0, abs=1e-4)
