"""The `feedback` canary metric: users' negative share per arm on the slice test, `nodata` below the
minimum events (never `pass`), a canary whose users answer less often named; and its reader over the store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from observer.analyse.canary import planned
from observer.analyse.canary.judge import judge_metric
from observer.analyse.canary.results import ArmData, FeedbackWindow, Outcome
from observer.analyse.canary.sources import StoreFeedback
from observer.analyse.canary.verdict import judge
from observer.config.canary import CanaryMetricSpec, CanarySpec
from observer.store.base import SampleRecord
from observer.store.feedback import FeedbackRecord
from observer.store.sqlite import SqliteStore

METRIC = CanaryMetricSpec(name="feedback", kind="feedback", base_rate=0.1)


def _arm(rng: np.random.Generator, *, slices: int, events: float, share: float, responses: int) -> ArmData:
    per = rng.poisson(events, size=slices)
    neg = rng.binomial(per, share)
    return ArmData(feedback=FeedbackWindow(events=int(per.sum()), negatives=int(neg.sum()), responses=responses,
                                           units=int(per.sum()) // 2,
                                           slices=tuple((int(a), int(b)) for a, b in zip(neg, per, strict=True))))


def test_too_few_events_is_nodata_never_pass() -> None:
    rng = np.random.default_rng(1)
    c = _arm(rng, slices=30, events=0.5, share=0.1, responses=900)  # ~15 events
    b = _arm(rng, slices=30, events=10, share=0.1, responses=9000)
    r = judge_metric(METRIC, c, b, alpha=0.01, power=0.8)
    assert r.outcome is Outcome.NODATA and "min_responses" in r.detail and r.n_canary == c.feedback.events  # type: ignore[union-attr]
    assert judge_metric(METRIC, ArmData(), b, alpha=0.01, power=0.8).outcome is Outcome.NODATA


def test_a_canary_users_dislike_twice_as_often_fails_and_a_like_one_passes() -> None:
    rng = np.random.default_rng(2)
    plan, _ = planned.plan(step_seconds=1800, elapsed_seconds=1800, slice_seconds=60, window_seconds=3600)
    worse = judge_metric(METRIC, _arm(rng, slices=30, events=15, share=0.3, responses=9000),
                         _arm(rng, slices=30, events=15, share=0.1, responses=9000), alpha=0.01, power=0.8,
                         plan=plan)
    assert worse.outcome is Outcome.FAIL, worse.detail
    assert worse.canary is not None and worse.baseline is not None and worse.canary > 2 * worse.baseline
    same = judge_metric(METRIC, _arm(rng, slices=30, events=15, share=0.1, responses=9000),
                        _arm(rng, slices=30, events=15, share=0.1, responses=9000), alpha=0.01, power=0.8,
                         plan=plan)
    assert same.outcome is Outcome.PASS, same.detail
    assert "negative share of users' feedback" in same.detail and "response rate 4.6% vs 5.3%" in same.detail


def test_a_canary_whose_users_answer_less_often_is_named() -> None:
    rng = np.random.default_rng(3)
    c = _arm(rng, slices=30, events=5, share=0.1, responses=9000)  # 150 of 9000: 1.7 %
    b = _arm(rng, slices=30, events=15, share=0.1, responses=9000)  # 450 of 9000: 5 %
    r = judge_metric(METRIC, c, b, alpha=0.01, power=0.8)
    assert "answer less often" in r.detail, r.detail


def test_the_verdict_carries_the_feedback_metric() -> None:
    rng = np.random.default_rng(4)
    spec = CanarySpec(metrics=[METRIC.model_copy(update={"critical": True})])
    c = replace(_arm(rng, slices=30, events=15, share=0.35, responses=9000), requests={"stop": 9000.0})
    b = replace(_arm(rng, slices=30, events=15, share=0.1, responses=9000), requests={"stop": 9000.0})
    v = judge(spec, canary="c", baseline="b", canary_data=c, baseline_data=b, expected_share=None, now=1800.0)
    assert v.verdict is Outcome.FAIL and v.metric("feedback").outcome is Outcome.FAIL


def test_the_store_reader_cuts_events_on_the_window_slices(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        ids = store.add([SampleRecord(version="c", prompt="p", output=f"o{i}", ts=1000.0 + i) for i in range(10)]
                        + [SampleRecord(version="c", prompt="p", output="g", ts=1001.0, source="golden")])

        def ev(i: int, ts: float, negative: bool, unit: str) -> FeedbackRecord:
            return FeedbackRecord(event_id=f"e{i}", version="c", sample_id=ids[0], unit=unit, answered=1000.0 + i,
                                  ts=ts, kind="thumbs", value=0.0 if negative else 1.0, negative=negative)

        store.add_feedback([ev(0, 1010, True, "a"), ev(1, 1059, False, "a"), ev(2, 1061, True, "b"),
                            ev(3, 1150, True, "c"), ev(4, 1185, False, "c")])
        w = StoreFeedback(store).window("c", since=1000.0, now=1180.0, step=60.0)
        assert (w.events, w.negatives, w.responses, w.units) == (4, 3, 10, 3)  # e4 after `now`; golden not a user's
        # On the clock's grid of 60 s: [960, 1020) (its part in the window), [1020, 1080), [1080, 1140); the
        # slice still open at `now` is not cut yet.
        assert w.slices == ((1, 1), (1, 2), (0, 0))
        later = StoreFeedback(store).window("c", since=995.0, now=1199.0, step=60.0)
        assert later.slices[:2] == w.slices[:2]  # another window puts each event in the same slice
        assert w.response_rate == 0.4
        capped = StoreFeedback(store, max_events=2).window("c", since=1000.0, now=1180.0, step=60.0)
        assert capped.events == 2 and "only the first 2 events" in capped.note
        store._db.execute("DROP TABLE feedback")  # a store that cannot answer: nodata with the reason, no raise
        broken = StoreFeedback(store).window("c", since=1000.0, now=1180.0, step=60.0)
        assert "no such table: feedback" in broken.error
        r = judge_metric(METRIC, ArmData(feedback=broken), ArmData(feedback=w), alpha=0.01, power=0.8)
        assert r.outcome is Outcome.NODATA and "unreadable" in r.detail
    finally:
        store.close()


def test_the_live_judge_is_graded_against_the_users(tmp_path: Path) -> None:
    """On answers both the live judge graded and users answered: a judge that agrees with them on 19 of 20 has a
    high κ, and the gauges say how many answers it rests on; answers with no feedback or no score are not in it."""
    import httpx
    from prometheus_client import CollectorRegistry, generate_latest

    from observer.analyse.quality.judge import JudgeClient
    from observer.analyse.quality.prompts import load_prompt
    from observer.analyse.quality.reliability import ReliabilityCollector
    from observer.analyse.quality.users import UserAgreement

    store = SqliteStore(tmp_path / "s.db")
    try:
        ids = store.add([SampleRecord(version="c", prompt="p", output=f"o{i}", ts=1000.0 + i) for i in range(24)])
        users_pass = [True, False] * 10
        judge_pass = list(users_pass)
        judge_pass[0] = False  # one disagreement in twenty: the users liked it, the judge did not
        events = []
        for i in range(20):
            store.attach_score(ids[i], scorer="judge:helpfulness", passed=judge_pass[i], score=None, reason="",
                               meta={})
            events.append(FeedbackRecord(event_id=f"e{i}", version="c", sample_id=ids[i], unit=f"u{i}",
                                         answered=1000.0 + i, ts=1100.0, kind="thumbs",
                                         value=1.0 if users_pass[i] else 0.0, negative=not users_pass[i]))
        # a second event on one answer: the answer is the unit (negative if any event is)
        events.append(FeedbackRecord(event_id="e0b", version="c", sample_id=ids[0], unit="u0", answered=1000.0,
                                     ts=1101.0, kind="thumbs", value=1.0, negative=False))
        store.attach_score(ids[22], scorer="judge:helpfulness", passed=True, score=None, reason="", meta={})
        store.attach_score(ids[21], scorer="rule:refusal", passed=True, score=None, reason="", meta={})
        events.append(FeedbackRecord(event_id="e21", version="c", sample_id=ids[21], unit="u21", answered=1021.0,
                                     ts=1100.0, kind="thumbs", value=0.0, negative=True))  # no judge score
        store.add_feedback(events)
        users = UserAgreement(store, "judge:helpfulness", window_seconds=3600, clock=lambda: 1200.0)
        grade = users.compute()
        a = grade.agreement
        assert (a.n, a.tp, a.tn, a.fp, a.fn) == (20, 9, 10, 0, 1), a
        assert a.kappa == pytest.approx(0.9)
        http = httpx.AsyncClient()
        judge = JudgeClient(http, base_url="http://127.0.0.1:9/v1", model="j",
                            prompt=load_prompt(Path(__file__).resolve().parents[2] / "evals" / "judge_prompt.yaml"))
        registry = CollectorRegistry()
        registry.register(ReliabilityCollector(judge, None, users=users))
        text = generate_latest(registry).decode()
        assert 'observer_judge_user_agreement_answers{judge="j"} 20.0' in text
        assert 'observer_judge_user_agreement_kappa{judge="j"} 0.89999' in text
        assert UserAgreement(store, "judge:helpfulness", window_seconds=50, clock=lambda: 1200.0
                             ).compute().agreement.n == 0  # feedback older than the window
    finally:
        store.close()
