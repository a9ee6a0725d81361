"""The quality component's wiring: enable/disable, jobs, its state and judge, config errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from observer.analyse.quality.state import QualityState
from observer.config import parse_config
from observer.config.fleet import VersionSpec
from observer.errors import ConfigError
from observer.store.base import SampleRecord
from observer.store.sqlite import SqliteStore
from observer.wiring.quality import QualityComponent, build
from observer.wiring.runtime import Context

ROOT = Path(__file__).resolve().parents[2]


def context(quality: dict[str, Any]) -> Context:
    data = {"fleet": {"versions": [{"name": "stable", "openai": "http://127.0.0.1:9/v1"},
                                   {"name": "canary", "openai": "http://127.0.0.1:9/v1"}]},
            "quality": {"golden_dirs": [str(ROOT / "golden_sets")], **quality}}
    return Context(config=parse_config(yaml.safe_dump(data), environ={}), http=httpx.AsyncClient())


def judge_cfg(**extra: Any) -> dict[str, Any]:
    return {"url": "http://127.0.0.1:9/v1", "model": "j", "prompt_path": str(ROOT / "evals" / "judge_prompt.yaml"),
            "rubric_dir": str(ROOT / "evals" / "rubrics"), **extra}


def test_disabled_builds_nothing() -> None:
    ctx = context({"enabled": False})
    assert build(ctx, store=None) is None


def test_defaults_publish_state_and_schedule_golden_only() -> None:
    ctx = context({"interval_seconds": 120, "run_at_start": False})
    comp = build(ctx, store=None)
    assert isinstance(comp, QualityComponent)
    assert isinstance(comp.state, QualityState) and comp.judge is None
    jobs = {j.name: j for j in comp.jobs()}
    assert set(jobs) == {"quality-golden"}  # no store published: no live scoring
    # It looks for due versions every 15 s (a discovered version waits at most that); each is replayed once
    # per 120 s slot, and run_at_start: false makes the versions there at start wait for the next slot.
    assert jobs["quality-golden"].interval_seconds == 15
    assert len(comp.collectors()) == 1 and len(comp.routers()) == 1
    assert comp.state.golden_totals("canary", since=0) == (0, 0)


def test_judge_and_live_scoring_with_a_store(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        ctx = context({"judge": judge_cfg(), "live": {"judge_fraction": 0.1, "interval_seconds": 30}})
        comp = build(ctx, store=store)
        assert comp is not None
        assert comp.judge is not None
        jobs = {j.name: (j.interval_seconds, j.singleton) for j in comp.jobs()}
        # the leader enqueues golden rounds and scores live rules; every replica works the queue and syncs
        assert jobs == {"quality-golden": (15.0, True), "quality-live": (30.0, True), "work-golden": (1.0, False),
                        "work-judge": (1.0, False), "quality-sync": (2.0, False),
                        "quality-users": (60.0, False)}  # each replica grades its own gauge from the shared store
        assert comp.job_kinds() == ("golden", "judge")  # declared; the root collects them for the store's area
    finally:
        store.close()


async def test_live_job_scores_the_store(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        store.add([SampleRecord(version="canary", prompt="q", output="I'm sorry, but I can't help with that.",
                                ts=5.0, finish_reason="stop")])
        comp = build(context({}), store=store)
        assert isinstance(comp, QualityComponent)
        live = next(j for j in comp.jobs() if j.name == "quality-live")
        await live.func()
        assert comp.state is not None
        assert comp.state.live_check_totals("canary", "refusal", since=0) == (1, 1)
    finally:
        store.close()


@pytest.mark.parametrize(("quality", "fragment"), [
    ({"golden_sets": ["nope"]}, "nope"),
    ({"golden_dirs": ["/nonexistent/golden"]}, "does not exist"),
    ({"judge": judge_cfg(rubric_dir="/nonexistent/rubrics")}, "rubric directory"),
    ({"judge": judge_cfg(), "live": {"judge_fraction": 0.5, "judge_rubric": "missing"}}, "unknown rubric 'missing'"),
])
def test_config_errors_name_the_problem(quality: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        build(context(quality), store=None)


def test_judge_requires_a_model() -> None:
    with pytest.raises(ConfigError, match=r"judge\.model is required"):
        context({"judge": {"url": "http://127.0.0.1:9/v1"}})


def test_judged_items_need_known_rubrics(tmp_path: Path) -> None:
    (tmp_path / "g.yaml").write_text("items:\n  - {id: a, prompt: q, rubric: nosuch}\n")
    with pytest.raises(ConfigError, match="unknown rubric 'nosuch'"):
        build(context({"golden_dirs": [str(tmp_path)], "judge": judge_cfg()}), store=None)
    assert build(context({"golden_dirs": [str(tmp_path)]}), store=None) is not None  # no judge: not checked


def test_docs_config_example_is_valid() -> None:
    """The `quality:` example in docs/quality.md parses and builds."""
    doc = (ROOT / "docs" / "quality.md").read_text()
    block = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    cfg = yaml.safe_load(block)
    cfg["quality"]["golden_dirs"] = [str(ROOT / "golden_sets")]
    cfg["quality"]["judge"].update(prompt_path=str(ROOT / "evals" / "judge_prompt.yaml"),
                                   rubric_dir=str(ROOT / "evals" / "rubrics"))
    data = {"fleet": {"versions": [{"name": "stable", "openai": "http://127.0.0.1:9/v1"}]}, **cfg}
    ctx = Context(config=parse_config(yaml.safe_dump(data), environ={}), http=httpx.AsyncClient())
    comp = build(ctx, store=None)
    assert comp is not None and comp.judge is not None


def _answering(text: str) -> httpx.AsyncClient:
    """An HTTP client whose every chat completion answers `text` (one JSON body, no stream)."""
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": text}, "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_golden_rounds_are_jobs_and_their_results_survive_a_restart(tmp_path: Path) -> None:
    (tmp_path / "g.yaml").write_text("items:\n  - {id: a, prompt: q, assertions: [{type: contains, values: [kill]}]}\n"
                                     "  - {id: b, prompt: r, assertions: [{type: contains, values: [nope]}]}\n")
    data = {"fleet": {"versions": [{"name": "stable", "openai": "http://127.0.0.1:9/v1", "model": "m"}]},
            "quality": {"golden_dirs": [str(tmp_path)], "live": {"enabled": False}}}
    config = parse_config(yaml.safe_dump(data), environ={})
    store = SqliteStore(tmp_path / "s.db")
    try:
        comp = build(Context(config=config, http=_answering("kill it")), store=store)
        assert comp is not None and comp.state is not None
        jobs = {j.name: j for j in comp.jobs()}
        await jobs["quality-golden"].func()
        await jobs["quality-golden"].func()  # the same interval's slot: enqueued once
        assert store.job_counts() == {("golden", "queued"): 1}
        await jobs["work-golden"].func()
        assert store.job_counts() == {("golden", "done"): 1}
        assert comp.state.latest("stable") == {}  # results reach the state through the store only
        await jobs["quality-sync"].func()
        run = comp.state.latest("stable")["g"]
        assert (run.passed, run.scored) == (1, 2)
    finally:
        store.close()
    store = SqliteStore(tmp_path / "s.db")  # a restarted observer reads the stored runs back
    try:
        again = build(Context(config=config, http=_answering("kill it")), store=store)
        assert again is not None and again.state is not None
        await next(j for j in again.jobs() if j.name == "quality-sync").func()
        restored = again.state.latest("stable")["g"]
        assert (restored.passed, restored.scored, restored.items[0].answer.text) == (1, 2, "kill it")
        assert again.state.golden_totals("stable", since=0) == (1, 2)
    finally:
        store.close()


def _recording(seen: list[str]) -> httpx.AsyncClient:
    """An OpenAI server answering every golden item with one streamed word; records the hosts asked."""

    def handle(req: httpx.Request) -> httpx.Response:
        seen.append(req.url.host)
        if req.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        body = ('data: {"choices":[{"delta":{"content":"Paris"},"finish_reason":"stop"}]}\n\n'
                "data: [DONE]\n\n")
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


def _discovering(now: list[float], seen: list[str]) -> tuple[Context, QualityComponent, Any]:
    """The quality area with no static versions (as with discovery), its clock at `now[0]`, its golden
    replays recorded in `seen`; returns the context, the component and its golden job."""
    data = {"fleet": {"versions": []}, "quality": {"golden_dirs": [str(ROOT / "golden_sets")],
                                                   "golden_sets": ["factual"], "interval_seconds": 600}}
    ctx = Context(config=parse_config(yaml.safe_dump(data), environ={}), http=_recording(seen),
                  clock=lambda: now[0])
    comp = build(ctx, store=None)
    assert comp is not None
    return ctx, comp, next(j for j in comp.jobs() if j.name == "quality-golden")


async def test_a_discovered_version_is_replayed_at_the_next_look_and_its_series_end_when_it_leaves() -> None:
    now = [1000.0]
    seen: list[str] = []
    ctx, comp, golden = _discovering(now, seen)
    await golden.func()
    assert seen == []  # nothing discovered yet
    ctx.fleet.replace("kubernetes", [VersionSpec(name="abc123", role="canary", openai="http://abc/v1", group="llm")])
    assert ("abc123", "factual") in comp.state.snapshot(live_since=0).golden_totals  # zero counts from the start
    now[0] += 20  # mid-interval: the new version is due at once
    await golden.func()
    assert set(seen) == {"abc"}
    assert comp.state.golden_totals("abc123", since=0)[1] > 0
    seen.clear()
    now[0] += 20
    await golden.func()
    assert seen == []  # replayed once per interval slot
    ctx.fleet.replace("kubernetes", [])
    assert not any(v == "abc123" for v, _ in comp.state.snapshot(live_since=0).golden_totals)
    await ctx.http.aclose()


async def test_a_promoted_canary_keeps_its_quality_and_a_version_gone_within_a_look_leaves_nothing() -> None:
    now = [1000.0]
    seen: list[str] = []
    ctx, comp, golden = _discovering(now, seen)
    canary = VersionSpec(name="bbb", role="canary", openai="http://bbb/v1", group="llm")
    ctx.fleet.replace("kubernetes", [VersionSpec(name="aaa", role="stable", openai="http://aaa/v1", group="llm"),
                                     canary])
    await golden.func()
    scored = comp.state.golden_totals("bbb", since=0)
    assert scored[1] > 0
    # Promotion moves the role, never the identity: the same name keeps its runs and totals.
    ctx.fleet.replace("kubernetes", [canary.model_copy(update={"role": "stable"})])
    assert comp.state.golden_totals("bbb", since=0) == scored
    # A revision that comes and goes between two looks is never replayed and leaves no series behind.
    seen.clear()
    ctx.fleet.replace("kubernetes", [canary, VersionSpec(name="ccc", role="canary", openai="http://ccc/v1")])
    ctx.fleet.replace("kubernetes", [canary])
    now[0] += 20
    await golden.func()
    assert "ccc" not in seen
    assert not any(v == "ccc" for v, _ in comp.state.snapshot(live_since=0).golden_totals)
    await ctx.http.aclose()
