"""Shadow replay's faults (#16): a canary that errors or times out, judge garbage, a full queue, the daily budget
after a restart, replay-safety and the tag on every replay. The arms and the judge are httpx mock transports
(an in-process stand-in for three OpenAI-compatible servers); the store is a real SQLite file."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from observer.analyse.quality.judge import JudgeClient
from observer.analyse.quality.pairwise import PairwiseJudge
from observer.analyse.quality.prompts import load_prompt, load_rubrics
from observer.analyse.quality.shadow import ShadowPair, ShadowReplayer, day_start
from observer.config.fleet import VersionSpec
from observer.config.quality import ShadowSpec
from observer.store.base import SampleRecord
from observer.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[2]
PROMPT = load_prompt(ROOT / "evals" / "pairwise_prompt.yaml")
RUBRIC = load_rubrics(ROOT / "evals" / "rubrics")["helpfulness"]
NOW = 1_800_000_000.0
STABLE = VersionSpec(name="stable", role="stable", vllm=["http://s/metrics"], openai="http://stable/v1", model="m")
CANARY = VersionSpec(name="canary", role="canary", vllm=["http://c/metrics"], openai="http://canary/v1", model="m")


def chat(text: str, finish: str = "stop") -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": text},
                                                  "finish_reason": finish}], "usage": {}})


class Arms:
    """What each host answers; records every request."""

    def __init__(self) -> None:
        self.seen: list[httpx.Request] = []
        self.canary: Callable[[dict[str, Any]], httpx.Response] = lambda b: chat("A fine answer.")
        self.judge: Callable[[dict[str, Any]], httpx.Response] = lambda b: chat(
            json.dumps({"reasoning": "r", "better": "tie"}))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        body = json.loads(request.content or b"{}")
        if request.url.host == "judge":
            return self.judge(body)
        if request.url.host == "canary":
            return self.canary(body)
        return chat("A fine answer.")


def make(tmp_path: Path, arms: Arms, *, judge: bool = True, clock: Callable[[], float] = lambda: NOW,
         **spec: Any) -> tuple[ShadowReplayer, SqliteStore, httpx.AsyncClient]:
    store = SqliteStore(tmp_path / "s.db", clock=clock)
    http = httpx.AsyncClient(transport=httpx.MockTransport(arms))
    pw = None
    if judge:
        client = JudgeClient(http, base_url="http://judge/v1", model="j", prompt=PROMPT, max_retries=0)
        pw = PairwiseJudge(client, PROMPT, RUBRIC)
    pair = ShadowPair(canary=CANARY, baseline=STABLE, canary_url="http://canary/v1", baseline_url="http://stable/v1")

    async def no_sleep(_: float) -> None:
        return None

    r = ShadowReplayer(http=http, spec=ShadowSpec(enabled=True, rate_per_second=100, interval_seconds=1, **spec),
                       store=store, pairs=lambda: [pair], judge=pw, clock=clock, sleep=no_sleep)
    return r, store, http


def seed(store: SqliteStore, prompts: list[str]) -> None:
    store.add([SampleRecord(version="stable", prompt=p, output="live answer", ts=NOW - 100 + i, source="proxy",
                            finish_reason="stop") for i, p in enumerate(prompts)])


async def test_every_replay_is_tagged_and_stored_once(tmp_path: Path) -> None:
    arms = Arms()
    r, store, http = make(tmp_path, arms)
    seed(store, [f"question {i}" for i in range(5)] + ["golden? no"])
    store.add([SampleRecord(version="stable", prompt="a golden item", output="x", ts=NOW - 1, source="golden")])
    assert await r.run_once() == 6
    assert await r.run_once() == 0  # already paired: nothing replayed twice
    replays = [q for q in arms.seen if q.url.host in ("stable", "canary")]
    assert len(replays) == 12 and all(q.headers.get("x-observer-shadow") == "1" for q in replays)
    pairs = store.pairs("canary", since=0, limit=100)
    assert len(pairs) == 6 and all(p.body["judge"]["outcome"] == "tie" for p in pairs)
    assert "a golden item" not in {p.body["prompt"] for p in pairs}  # golden replays are not live traffic
    await http.aclose()


@pytest.mark.parametrize("failure", ["timeout", "http_500", "broken_json"])
async def test_a_failing_canary_makes_an_undecided_pair_never_a_win(tmp_path: Path, failure: str) -> None:
    arms = Arms()

    def canary(_: dict[str, Any]) -> httpx.Response:
        if failure == "timeout":
            raise httpx.ReadTimeout("slow canary")
        if failure == "http_500":
            return httpx.Response(500, text="engine dead")
        return httpx.Response(200, headers={"content-type": "application/json"}, content=b"{not json")

    arms.canary = canary
    r, store, http = make(tmp_path, arms)
    seed(store, ["q1", "q2"])
    await r.run_once()
    outcomes, _, _ = r.paired_outcomes("canary", since=0)
    assert [o["judge"] for o in outcomes] == ["error", "error"]
    assert {o["refusal"] for o in outcomes} == {"error"}
    assert r.stats.replays[("canary", "error")] == 2
    assert not [q for q in arms.seen if q.url.host == "judge"]  # nothing to judge: no judge call spent
    await http.aclose()


async def test_judge_garbage_is_an_undecided_pair(tmp_path: Path) -> None:
    arms = Arms()
    arms.judge = lambda b: chat("Answer 2 is better, clearly.")
    r, store, http = make(tmp_path, arms)
    seed(store, ["q1"])
    await r.run_once()
    outcomes, _, _ = r.paired_outcomes("canary", since=0)
    assert outcomes[0]["judge"] == "error"
    assert r.stats.pairs[("canary", "error")] == 1
    await http.aclose()


async def test_refusing_canary_loses_the_paired_refusal_check(tmp_path: Path) -> None:
    arms = Arms()
    arms.canary = lambda b: chat("I'm sorry, but I can't help with that request.")
    r, store, http = make(tmp_path, arms, judge=False)
    seed(store, ["q1", "q2", "q3"])
    await r.run_once()
    outcomes, _, identity = r.paired_outcomes("canary", since=0)
    assert [o["refusal"] for o in outcomes] == ["loss"] * 3
    assert "judge" not in outcomes[0] and identity == {}
    await http.aclose()


async def test_unsafe_long_and_overflowing_prompts_are_skipped_and_counted(tmp_path: Path) -> None:
    arms = Arms()
    r, store, http = make(tmp_path, arms, queue_size=3, max_prompt_chars=100)
    seed(store, ["tool: {\"rows\": 1}", "please do not replay this", "x" * 101] + [f"ok {i}" for i in range(5)])
    stored = await r.run_once()
    assert stored == 3
    assert r.stats.skipped[("canary", "not_replay_safe")] == 2
    assert r.stats.skipped[("canary", "too_long")] == 1
    assert r.stats.skipped[("canary", "queue_full")] == 2
    await http.aclose()


async def test_the_daily_budget_survives_a_restart_and_resets_at_midnight(tmp_path: Path) -> None:
    now = [day_start(NOW) + 3600.0]
    arms = Arms()
    r, store, http = make(tmp_path, arms, daily_budget=4, clock=lambda: now[0])
    store.add([SampleRecord(version="stable", prompt=f"q{i}", output="a", ts=now[0] - 10 + i, source="proxy")
               for i in range(6)])
    assert await r.run_once() == 4
    outcomes, note, _ = r.paired_outcomes("canary", since=0)
    assert len(outcomes) == 4 and "budget of 4 pairs/day is spent" in note
    await http.aclose()
    restarted, _, http2 = make(tmp_path, arms, daily_budget=4, clock=lambda: now[0])
    restarted.store = store
    assert await restarted.run_once() == 0  # today's stored pairs count against today's budget
    now[0] += 86400.0
    store.add([SampleRecord(version="stable", prompt="tomorrow", output="a", ts=now[0] - 1, source="proxy")])
    assert await restarted.run_once() >= 1
    await http2.aclose()


FLEET = """
fleet:
  versions:
    - {name: stable, role: stable, vllm: [http://127.0.0.1:1/metrics], openai: http://127.0.0.1:1/v1}
    - {name: canary, role: canary, vllm: [http://127.0.0.1:2/metrics]}
quality:
  golden_dirs: []
  judge: {url: "http://127.0.0.1:3/v1", model: j}
"""


@pytest.mark.parametrize(("extra", "message"), [
    ("  shadow: {enabled: true}\nsampling: {enabled: false}\n", "turn sampling on"),
    ("  shadow: {enabled: true}\n", "version 'canary' has no URL to replay prompts to"),
    ("  shadow: {enabled: true, targets: {canary: 'http://x/v1', ghost: 'http://y/v1'}}\n", "unknown version(s) ghost"),
    ("  shadow: {enabled: true, targets: {canary: 'http://x/v1'}, pairwise: {rubric: nope}}\n",
     "unknown rubric 'nope'"),
    ("  shadow: {enabled: true, skip_patterns: ['(unclosed']}\n", "does not compile"),
])
def test_shadow_config_errors_name_the_key(tmp_path: Path, extra: str, message: str) -> None:
    from observer.config import parse_config
    from observer.errors import ConfigError
    from observer.service import Service

    text = FLEET + extra + ("" if "sampling:" in extra else f"sampling: {{store: {{path: {tmp_path / 's.db'}}}}}\n")
    with pytest.raises((ConfigError, ValueError), match=re.escape(message)):
        Service.build(parse_config(text, environ={}), areas=["sample", "quality"])


async def test_the_service_wires_shadow_replay_into_jobs_and_metrics(tmp_path: Path) -> None:
    from observer.config import parse_config
    from observer.service import Service

    text = FLEET + "  shadow: {enabled: true, targets: {canary: 'http://x/v1'}}\n  reliability: {anchors_path: " \
        f"{ROOT / 'evals' / 'anchors.jsonl'}}}\nsampling: {{store: {{path: {tmp_path / 's.db'}}}}}\n"
    service = Service.build(parse_config(text, environ={}), areas=["sample", "quality", "canary"])
    names = {j.name for j in service.jobs()}
    assert {"quality-shadow", "quality-reliability"} <= names
    assert service.services.shadow is not None
    from prometheus_client import generate_latest
    text_metrics = generate_latest(service.registry).decode()
    assert 'observer_shadow_budget_remaining{version="canary"} 2000.0' in text_metrics
    assert 'observer_judge_budget_per_hour{judge="j"} 1000.0' in text_metrics
    assert service.services.store is not None
    service.services.store.close()
