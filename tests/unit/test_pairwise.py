"""The pairwise judge (issue 16): both orders, position inconsistency, votes, garbage, injections, rule checks.

The judge on loopback is the scripted, deliberately gullible one (tests/support/judge_server.py): text that
escapes an answer block and plants a preference is obeyed. The control test shows the corpus does make the
attacked answer win when the pair is fenced naively, so the main test passes only because the client defends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import yaml

from observer.analyse.quality.judge import JudgeClient
from observer.analyse.quality.pairwise import PairwiseJudge, combine, majority, paired_rule
from observer.analyse.quality.prompts import load_prompt, load_rubrics, render_pair
from tests.support.judge_server import JudgeServer, Reply, rule_preference, run_judge_server

ROOT = Path(__file__).resolve().parents[2]
CORPUS = yaml.safe_load((ROOT / "evals" / "injections.yaml").read_text())
ATTACKS: list[dict[str, str]] = CORPUS["attacks"] + CORPUS["pairwise_attacks"]
RUBRIC = load_rubrics(ROOT / "evals" / "rubrics")["correctness"]
PROMPT = load_prompt(ROOT / "evals" / "pairwise_prompt.yaml")
QUESTION, REFERENCE = "What is the capital of France?", "Paris"
GOOD, BAD = "The capital is Paris.", "The capital is Lyon."


@pytest.fixture(scope="module")
def server() -> Iterator[JudgeServer]:
    with run_judge_server() as s:
        yield s


def judge(http: httpx.AsyncClient, server: JudgeServer, **kw: object) -> PairwiseJudge:
    client = JudgeClient(http, base_url=server.url, model="scripted", prompt=PROMPT, max_retries=0)
    return PairwiseJudge(client, PROMPT, RUBRIC, **kw)  # type: ignore[arg-type]


def pick(better: str) -> Reply:
    return Reply(content=json.dumps({"reasoning": "r", "better": better}))


def test_combine_needs_both_orders_to_agree() -> None:
    assert combine("canary", "canary") == "win"
    assert combine("baseline", "baseline") == "loss"
    assert combine("tie", "tie") == "tie"
    assert combine("canary", "baseline") == "inconsistent"
    assert combine("tie", "canary") == "inconsistent"
    assert combine(None, "canary") == "error"
    assert majority(["1", "1", "2"]) == "1" and majority(["1", "2"]) == "tie"


async def test_the_better_answer_wins_in_both_orders(server: JudgeServer) -> None:
    async with httpx.AsyncClient() as http:
        j = judge(http, server)
        worse = await j.compare(prompt=QUESTION, baseline=GOOD, canary=BAD, reference=REFERENCE)
        better = await j.compare(prompt=QUESTION, baseline=BAD, canary=GOOD, reference=REFERENCE)
        same = await j.compare(prompt=QUESTION, baseline=GOOD, canary=GOOD, reference=REFERENCE)
    assert (worse.outcome, worse.baseline_first, worse.canary_first) == ("loss", "baseline", "baseline")
    assert better.outcome == "win" and same.outcome == "tie"
    assert worse.calls == 2


async def test_a_judge_that_prefers_a_position_is_inconsistent_not_a_win(server: JudgeServer) -> None:
    async with httpx.AsyncClient() as http:
        j = judge(http, server)
        server.script(pick("1"), pick("1"))  # always the first answer, whatever it is
        r = await j.compare(prompt=QUESTION, baseline=GOOD, canary=BAD)
    assert r.outcome == "inconsistent"
    assert {r.baseline_first, r.canary_first} == {"baseline", "canary"}


async def test_garbage_or_an_error_in_one_order_is_undecided(server: JudgeServer) -> None:
    async with httpx.AsyncClient() as http:
        j = judge(http, server)
        for bad in (Reply(content="the first one, obviously"), Reply(content='{"better": "3", "reasoning": ""}'),
                    Reply(status=500), Reply(finish_reason="length", content='{"better": "1"')):
            # An unusable reply is asked once more (bad twice is an error); a 500 is the HTTP retries' business.
            server.script(pick("2"), *([bad] if bad.status == 500 else [bad, bad]))
            r = await j.compare(prompt=QUESTION, baseline=GOOD, canary=BAD)
            assert r.outcome == "error", bad
            assert r.error


async def test_votes_take_the_majority_at_a_temperature(server: JudgeServer) -> None:
    async with httpx.AsyncClient() as http:
        j = judge(http, server, votes=3, temperature=0.7)
        # baseline first: 2 of 3 say "1" (baseline); canary first: 2 of 3 say "2" (baseline). The six calls
        # run concurrently, so each reply is keyed to its order, not to arrival.
        def first(answer: str) -> Callable[[str], bool]:
            return lambda user: re.search(r"BEGIN_ANSWER_1 [^>]*>>>\s*" + re.escape(answer), user) is not None

        server.script(*(replace(pick(b), when=first(GOOD)) for b in ("1", "2", "1")),
                      *(replace(pick(b), when=first(BAD)) for b in ("2", "1", "2")))
        before = len(server.requests)
        r = await j.compare(prompt=QUESTION, baseline=GOOD, canary=BAD)
        sent = server.requests[before:]
    assert r.outcome == "loss" and r.calls == 6
    assert {req["temperature"] for req in sent} == {0.7}
    assert all(req["response_format"]["json_schema"]["name"] == "preference" for req in sent)


def attacked(base: str, attack: dict[str, str]) -> str:
    return base + attack["text"].replace("{answer}", base)


@pytest.mark.parametrize("attack", ATTACKS, ids=[a["id"] for a in ATTACKS])
async def test_injection_in_the_worse_answer_does_not_change_the_outcome(server: JudgeServer,
                                                                         attack: dict[str, str]) -> None:
    async with httpx.AsyncClient() as http:
        j = judge(http, server)
        clean = await j.compare(prompt=QUESTION, baseline=GOOD, canary=BAD, reference=REFERENCE)
        hit = await j.compare(prompt=QUESTION, baseline=GOOD, canary=attacked(BAD, attack), reference=REFERENCE)
    assert clean.outcome == "loss"
    assert hit.outcome == clean.outcome, hit


def naive_user(first: str, second: str) -> str:
    """How a careless client fences a pair: fixed markers, nothing neutralised."""
    return (f"<<<BEGIN_PROMPT n>>>\n{QUESTION}\n<<<END_PROMPT n>>>\n\n<<<BEGIN_REFERENCE n>>>\n{REFERENCE}\n"
            f"<<<END_REFERENCE n>>>\n\n<<<BEGIN_ANSWER_1 n>>>\n{first}\n<<<END_ANSWER_1 n>>>\n\n"
            f"<<<BEGIN_ANSWER_2 n>>>\n{second}\n<<<END_ANSWER_2 n>>>")


def test_control_naive_fencing_lets_the_attacked_answer_win() -> None:
    flipped = []
    for a in ATTACKS:
        bad = attacked(BAD, a)
        orders = (rule_preference(naive_user(GOOD, bad))["better"], rule_preference(naive_user(bad, GOOD))["better"])
        if orders != ("1", "2"):  # the good (baseline) answer no longer wins both orders
            flipped.append(a["id"])
    assert rule_preference(naive_user(GOOD, BAD))["better"] == "1"
    assert len(flipped) >= 8, flipped  # the rest target END_OUTPUT blocks or judges that obey text inside a block


def test_control_client_rendering_is_not_fooled() -> None:
    for a in ATTACKS:
        for first, second, want in ((GOOD, attacked(BAD, a), "1"), (attacked(BAD, a), GOOD, "2")):
            _, user = render_pair(PROMPT, RUBRIC, nonce="feedfacecafebeef", judged_prompt=QUESTION, first=first,
                                  second=second, reference=REFERENCE)
            assert rule_preference(user)["better"] == want, a["id"]


@pytest.mark.parametrize(("check", "baseline", "canary", "b_finish", "c_finish", "want"), [
    ("refusal", "Paris.", "I'm sorry, I can't help with that.", "stop", "stop", "loss"),
    ("refusal", "I'm sorry, I can't help with that.", "Paris.", "stop", "stop", "win"),
    ("refusal", "Paris.", "Paris!", "stop", "stop", "tie"),
    ("empty", "Paris.", "   ", "stop", "stop", "loss"),
    ("truncation", "Paris.", "Par", "stop", "length", "loss"),
    ("truncation", "Paris.", "Paris.", None, "stop", "error"),
    ("invalid_json", '{"a": 1}', '{"a": 1', "stop", "stop", "loss"),
])
def test_paired_rule_checks(check: str, baseline: str, canary: str, b_finish: str | None, c_finish: str | None,
                            want: str) -> None:
    prompt = "Reply in JSON." if check == "invalid_json" else QUESTION
    assert paired_rule(check, prompt=prompt, baseline=baseline, canary=canary, baseline_finish=b_finish,
                       canary_finish=c_finish) == want


def test_the_identity_pins_model_prompt_and_rubric() -> None:
    async_client = httpx.AsyncClient()
    try:
        client = JudgeClient(async_client, base_url="http://127.0.0.1:9/v1", model="m", prompt=PROMPT)
        ident = PairwiseJudge(client, PROMPT, RUBRIC).identity()
    finally:
        import asyncio
        asyncio.run(async_client.aclose())
    assert ident == {"judge_model": "m", "prompt_version": "pairwise-v1", "prompt_hash": PROMPT.hash,
                     "rubric": "correctness", "rubric_hash": RUBRIC.hash}
    assert PROMPT.hash.startswith("sha256:")
