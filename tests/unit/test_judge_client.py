"""The judge client against the scripted OpenAI-compatible judge on loopback (tests/support/judge_server)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from observer.analyse.quality.judge import REPLY_RETRY_REASONS, JudgeClient, JudgeStats
from observer.analyse.quality.prompts import VERDICT_SCHEMA, load_prompt, load_rubrics
from observer.errors import JudgeError
from tests.support.judge_server import JudgeServer, Reply, run_judge_server

ROOT = Path(__file__).resolve().parents[2]
RUBRICS = load_rubrics(ROOT / "evals" / "rubrics")
PROMPT = load_prompt(ROOT / "evals" / "judge_prompt.yaml")


@pytest.fixture()
def server() -> Iterator[JudgeServer]:
    with run_judge_server() as s:
        yield s


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client(http: httpx.AsyncClient, server: JudgeServer, **kw: object) -> tuple[JudgeClient, list[float]]:
    sleeps: list[float] = []

    async def sleep(s: float) -> None:
        sleeps.append(s)

    args: dict[str, object] = {"timeout_s": 5.0, "max_retries": 3, "backoff_s": 0.5, "sleep": sleep,
                               "stats": JudgeStats()}
    args.update(kw)
    return JudgeClient(http, base_url=server.url, model="judge-m", prompt=PROMPT, **args), sleeps  # type: ignore[arg-type]


async def judge_once(c: JudgeClient, output: str = "Paris", reference: str | None = "Paris") -> object:
    return await c.judge(rubric=RUBRICS["correctness"], prompt="Capital of France?", output=output,
                         reference=reference)


async def test_schema_conformant_verdict_and_request_shape(server: JudgeServer) -> None:
    async with httpx.AsyncClient() as http:
        c, _ = client(http, server)
        v = await c.judge(rubric=RUBRICS["correctness"], prompt="Capital of France?", output="It is Paris.",
                          reference="Paris")
        bad = await judge_once(c, output="Lyon")
    assert v.passed and v.score == 5 and v.normalised_score == 1.0
    assert not bad.passed  # type: ignore[attr-defined]
    assert v.judge_model == "judge-m" and v.prompt_version == "judge-v1"
    assert v.rubric == "correctness" and v.rubric_hash == RUBRICS["correctness"].hash
    assert v.meta()["rubric_hash"].startswith("sha256:")
    req = server.requests[0]
    assert req["temperature"] == 0
    assert req["response_format"]["type"] == "json_schema"
    assert req["response_format"]["json_schema"]["schema"] == VERDICT_SCHEMA
    assert "guided_json" not in req
    assert c.stats.calls["ok"] == 2 and c.stats.last_success is not None


async def test_nonce_differs_per_call_and_blocks_are_tagged(server: JudgeServer) -> None:
    async with httpx.AsyncClient() as http:
        c, _ = client(http, server)
        await judge_once(c)
        await judge_once(c)
    nonces = []
    for req in server.requests:
        user = req["messages"][1]["content"]
        system = req["messages"][0]["content"]
        nonce = user.split("<<<BEGIN_OUTPUT ")[1].split(">>>")[0]
        assert f"<<<END_OUTPUT {nonce}>>>" in user and nonce in system
        nonces.append(nonce)
    assert nonces[0] != nonces[1] and len(nonces[0]) >= 16


@pytest.mark.parametrize(("reply", "reason"), [
    pytest.param(Reply(content='{"reasoning": "ok", "score": 5, "verdict": "pass"'), "unparseable",
                 id="malformed-json"),
    pytest.param(Reply(content='Sure! {"reasoning": "ok", "score": 5, "verdict": "pass"}'), "unparseable",
                 id="prose-before"),
    pytest.param(Reply(content='{"reasoning": "ok", "score": 5, "verdict": "pass"}\nHope this helps.'),
                 "unparseable", id="prose-after"),
    pytest.param(Reply(content='```json\n{"reasoning": "ok", "score": 5, "verdict": "pass"}\n```'), "unparseable",
                 id="code-fence"),
    pytest.param(Reply(content='{"reasoning": "a", "score": 1, "verdict": "fail"} {"reasoning": "b", "score": 5, '
                               '"verdict": "pass"}'), "unparseable", id="two-verdicts"),
    pytest.param(Reply(content='{"reasoning": "a", "score": 1, "verdict": "fail", "verdict": "pass"}'),
                 "unparseable", id="duplicate-key"),
    pytest.param(Reply(content='{"reasoning": "ok", "score": 5, "verdict": "pass"}', finish_reason="length"),
                 "length", id="truncated-finish-length"),
    pytest.param(Reply(content='{"reasoning": "this reply was cut off mid-str', finish_reason="length"),
                 "length", id="truncated-json"),
    pytest.param(Reply(content=None, refusal="I can't evaluate this."), "refusal", id="refusal-field"),
    pytest.param(Reply(content='{"reasoning": "ok", "score": 11, "verdict": "pass"}'), "schema", id="score-range"),
    pytest.param(Reply(content='{"reasoning": "ok", "score": 4, "verdict": "maybe"}'), "schema", id="bad-enum"),
    pytest.param(Reply(content='{"reasoning": "ok", "score": 4, "verdict": "pass", "bonus": 1}'), "schema",
                 id="extra-key"),
    pytest.param(Reply(content='{"score": 4, "verdict": "pass"}'), "schema", id="missing-key"),
    pytest.param(Reply(content='{"reasoning": "ok", "score": NaN, "verdict": "pass"}'), "unparseable", id="nan"),
    pytest.param(Reply(content=""), "unparseable", id="empty"),
    pytest.param(Reply(raw_body="<html>bad gateway</html>"), "unparseable", id="http-200-not-json"),
    pytest.param(Reply(raw_body='{"choices": []}'), "unparseable", id="no-choices"),
    pytest.param(Reply(raw_body='{"choices": [{"message": "pass"}]}'), "unparseable", id="message-not-object"),
    pytest.param(Reply(raw_body='[1, 2]'), "unparseable", id="body-not-object"),
])
async def test_bad_replies_are_judge_errors(server: JudgeServer, reply: Reply, reason: str) -> None:
    server.script(reply, reply)
    async with httpx.AsyncClient() as http:
        c, sleeps = client(http, server)
        with pytest.raises(JudgeError) as info:
            await judge_once(c)
    assert info.value.reason == reason
    asked = 2 if reason in REPLY_RETRY_REASONS else 1  # an unusable reply is asked once more, a refusal never
    assert c.stats.calls[reason] == asked and c.stats.calls["ok"] == 0
    assert sleeps == []  # no back-off: the judge answered, only not usably
    assert len(server.requests) == asked


async def test_an_unusable_reply_is_asked_once_more_with_fresh_text_at_temperature_0(server: JudgeServer) -> None:
    """A small judge loops to max_tokens on one exact text now and then: the second ask renders a new nonce
    (another text, so greedy decoding takes another path) and its verdict counts; both calls are counted."""
    server.script(Reply(content='{"verdict": "pass", "sco', finish_reason="length"))
    async with httpx.AsyncClient() as http:
        c, sleeps = client(http, server)
        v = await judge_once(c)
    assert v.attempts == 2 and sleeps == []
    assert c.stats.calls["length"] == 1 and c.stats.calls["ok"] == 1
    first, second = (r["messages"] for r in server.requests)
    assert first != second and [m["role"] for m in first] == [m["role"] for m in second]
    assert all(r["temperature"] == 0.0 for r in server.requests)


async def test_retries_429_and_500_with_backoff_then_succeeds(server: JudgeServer) -> None:
    server.script(Reply(status=429), Reply(status=500), Reply(status=503, headers={"Retry-After": "2"}), Reply())
    async with httpx.AsyncClient() as http:
        c, sleeps = client(http, server)
        v = await judge_once(c)
    assert v.passed and v.attempts == 4  # type: ignore[attr-defined]
    assert sleeps == [0.5, 1.0, 2.0]  # doubling backoff; Retry-After honoured when longer
    assert c.stats.calls["rate_limited"] == 1 and c.stats.calls["server_error"] == 2 and c.stats.calls["ok"] == 1


async def test_retry_after_header_wins_over_shorter_backoff(server: JudgeServer) -> None:
    server.script(Reply(status=429, headers={"Retry-After": "7"}), Reply())
    async with httpx.AsyncClient() as http:
        c, sleeps = client(http, server)
        await judge_once(c)
    assert sleeps == [7.0]


async def test_gives_up_after_max_retries(server: JudgeServer) -> None:
    server.script(*[Reply(status=500)] * 5)
    async with httpx.AsyncClient() as http:
        c, sleeps = client(http, server, max_retries=2)
        with pytest.raises(JudgeError, match="after 3 attempt") as info:
            await judge_once(c)
    assert info.value.reason == "http" and len(server.requests) == 3 and len(sleeps) == 2


async def test_client_error_is_not_retried(server: JudgeServer) -> None:
    server.script(Reply(status=400))
    async with httpx.AsyncClient() as http:
        c, sleeps = client(http, server)
        with pytest.raises(JudgeError, match="HTTP 400"):
            await judge_once(c)
    assert len(server.requests) == 1 and sleeps == [] and c.stats.calls["client_error"] == 1


async def test_timeout_is_retried_then_a_judge_error(server: JudgeServer) -> None:
    server.script(Reply(delay_s=3.0), Reply(delay_s=3.0))
    async with httpx.AsyncClient() as http:
        c, sleeps = client(http, server, timeout_s=0.2, max_retries=1)
        with pytest.raises(JudgeError, match="timed out") as info:
            await judge_once(c)
    assert info.value.reason == "timeout" and c.stats.calls["timeout"] == 2 and sleeps == [0.5]


async def test_timeout_then_recovery(server: JudgeServer) -> None:
    server.script(Reply(delay_s=3.0))
    async with httpx.AsyncClient() as http:
        c, _ = client(http, server, timeout_s=0.2, max_retries=2)
        v = await judge_once(c)
    assert v.passed and v.attempts == 2  # type: ignore[attr-defined]


async def test_hourly_budget_refuses_calls_without_sending_them(server: JudgeServer) -> None:
    clock = Clock()
    async with httpx.AsyncClient() as http:
        c, _ = client(http, server, budget_per_hour=2, clock=clock)
        await judge_once(c)
        await judge_once(c)
        with pytest.raises(JudgeError, match="budget") as info:
            await judge_once(c)
        assert info.value.reason == "budget" and len(server.requests) == 2
        assert c.budget_left() == 0
        clock.now += 3600  # the sliding hour moves on
        assert c.budget_left() == 2
        await judge_once(c)
    assert len(server.requests) == 3 and c.stats.calls["budget_exhausted"] == 1


async def test_retries_count_against_the_budget(server: JudgeServer) -> None:
    server.script(Reply(status=500), Reply(status=500))
    async with httpx.AsyncClient() as http:
        c, _ = client(http, server, budget_per_hour=2, clock=Clock())
        with pytest.raises(JudgeError) as info:
            await judge_once(c)
    assert info.value.reason == "budget" and len(server.requests) == 2


async def test_concurrency_limit_holds(server: JudgeServer) -> None:
    server.script(*[Reply(delay_s=0.3)] * 6)
    async with httpx.AsyncClient() as http:
        c, _ = client(http, server, concurrency=2)
        verdicts = await asyncio.gather(*(judge_once(c) for _ in range(6)))
    assert len(verdicts) == 6
    assert server.max_in_flight == 2


async def test_unreachable_judge_is_a_transport_error() -> None:
    from tests.support.prom import free_port

    async with httpx.AsyncClient() as http:
        sleeps: list[float] = []

        async def sleep(s: float) -> None:
            sleeps.append(s)

        c = JudgeClient(http, base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", prompt=PROMPT,
                        max_retries=1, sleep=sleep)
        with pytest.raises(JudgeError) as info:
            await judge_once(c)
    assert info.value.reason == "transport" and c.stats.calls["transport"] == 2


def test_verdict_schema_is_strict_json_schema() -> None:
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(VERDICT_SCHEMA)
    assert VERDICT_SCHEMA["additionalProperties"] is False
    json.dumps(VERDICT_SCHEMA, allow_nan=False)


async def test_two_replicas_sharing_the_store_spend_one_fleet_wide_budget(server: JudgeServer,
                                                                          tmp_path: Path) -> None:
    """Each replica alone would allow 5 calls an hour; through the shared ledger both together make 5."""
    from observer.store.sqlite import SqliteStore

    clock = Clock()
    store = SqliteStore(tmp_path / "s.db", clock=clock)
    try:
        async with httpx.AsyncClient() as http:
            replicas = [client(http, server, budget_per_hour=5, clock=clock, ledger=store)[0] for _ in range(2)]
            outcomes = await asyncio.gather(*(judge_once(replicas[i % 2]) for i in range(12)),
                                            return_exceptions=True)
            assert sum(not isinstance(o, Exception) for o in outcomes) == 5 and len(server.requests) == 5
            assert all(isinstance(o, JudgeError) and o.reason == "budget" for o in outcomes
                       if isinstance(o, Exception))
            clock.now += 3600  # the hour moves on for every replica
            await judge_once(replicas[1])
        assert len(server.requests) == 6
    finally:
        store.close()


async def test_a_store_that_cannot_answer_spends_nothing_and_names_why(server: JudgeServer) -> None:
    from observer.errors import StoreError

    class Down:
        def spend(self, budget: str, *, limit: int, window_seconds: float) -> bool:
            raise StoreError("sample store postgresql://db: connection refused")

    async with httpx.AsyncClient() as http:
        c, _ = client(http, server, ledger=Down())
        with pytest.raises(JudgeError, match="connection refused") as info:
            await judge_once(c)
    assert info.value.reason == "budget" and server.requests == [] and c.stats.calls["budget_unavailable"] == 1
