"""Users' feedback ingest: each event joined to the sampled answer it is about, counted for the version that
answered; bad events refused by reason while the good ones of the batch are kept, none counted twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from observer.config.sampling import FeedbackSpec
from observer.export import errors
from observer.sample.feedback import feedback_router
from observer.sample.ingest import ingest_router
from observer.sample.metrics import SamplingCollector, SamplingMetrics, families
from observer.sample.redact import Redactor
from observer.store.sqlite import SqliteStore

NOW = 1_700_000_000.0
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _app(store: SqliteStore, metrics: SamplingMetrics, spec: FeedbackSpec | None = None) -> FastAPI:
    app = FastAPI()
    errors.install(app)
    app.include_router(ingest_router(store=store, metrics=metrics, redactor=None, versions={"stable", "canary"},
                                     guard=lambda: None, max_request_bytes=1 << 22, max_batch_samples=1000,
                                     clock=lambda: NOW))
    app.include_router(feedback_router(store=store, metrics=metrics, spec=spec or FeedbackSpec(),
                                       redactor=Redactor.build(), guard=lambda: None, max_request_bytes=1 << 22,
                                       clock=lambda: NOW))
    return app


async def _seed(client: httpx.AsyncClient) -> None:
    samples = [{"version": "canary", "prompt": "q1", "output": "a1", "ts": NOW - 60, "response_id": "chatcmpl-1",
                "conversation_key": "a" * 32},
               {"version": "stable", "prompt": "q2", "output": "a2", "ts": NOW - 60, "response_id": "chatcmpl-2",
                "traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"},
               {"version": "stable", "prompt": "q3", "output": "a3", "ts": NOW - 3 * 86_400,
                "response_id": "chatcmpl-old"}]
    r = await client.post("/api/v1/samples", json={"samples": samples})
    assert r.status_code == 200, r.text


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = SqliteStore(tmp_path / "s.db")
    yield s
    s.close()


async def test_a_mixed_batch_keeps_the_good_events_and_names_each_refusal(store: SqliteStore) -> None:
    metrics = SamplingMetrics()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app(store, metrics)), base_url="http://t") as c:
        await _seed(c)
        events = [
            {"id": "e1", "response_id": "chatcmpl-1", "kind": "thumbs", "value": 0, "ts": NOW - 30,
             "comment": "wrong again, mail me at jane@example.com"},
            {"id": "e2", "trace_id": TRACE, "kind": "rating", "value": 5},
            {"id": "e3", "response_id": "chatcmpl-1", "kind": "regenerate"},
            {"id": "e4", "response_id": "chatcmpl-nobody", "kind": "thumbs", "value": 1},
            {"id": "e5", "response_id": "chatcmpl-old", "kind": "thumbs", "value": 1},
            {"id": "e6", "response_id": "chatcmpl-2", "kind": "rating", "value": 11},
            {"id": "e7", "response_id": "chatcmpl-2", "kind": "stars", "value": 3},
            {"id": "e1", "response_id": "chatcmpl-1", "kind": "thumbs", "value": 1},
            {"kind": "thumbs", "value": 1},
        ]
        r = await c.post("/api/v1/feedback", json={"events": events})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["accepted"] == 3
        assert [e["status"] for e in body["events"]] == ["stored", "stored", "stored", "unknown_response", "late",
                                                         "off_scale", "invalid", "duplicate", "invalid"]
        assert "events.6.kind" in body["events"][6]["detail"] and "[1, 5]" in body["events"][5]["detail"]
        # A retried batch counts nothing again.
        again = await c.post("/api/v1/feedback", json={"events": events[:3]})
        assert again.json()["accepted"] == 0 and again.json()["rejected"] == {"duplicate": 3}
    stored = store.feedback("canary", since=NOW - 3600, until=NOW + 1, limit=100)
    assert [(e.event_id, e.negative, e.kind, e.unit) for e in stored] == [
        ("e1", True, "thumbs", "a" * 32), ("e3", True, "regenerate", "a" * 32)]
    assert stored[0].comment is not None and "jane@example.com" not in stored[0].comment
    (stable,) = store.feedback("stable", since=NOW - 3600, until=NOW + 1, limit=100)
    assert (stable.event_id, stable.negative, stable.unit) == ("e2", False, f"sample:{stable.sample_id}")
    assert store.answered("stable", since=NOW - 3600, until=NOW + 1) == 1
    exported = {(f.name, tuple(sorted(s.labels.items()))): s.value for f in families(SamplingCollector(metrics))
                for s in f.samples}
    assert exported[("observer_feedback_events", (("kind", "thumbs"), ("outcome", "negative"),
                                                  ("version", "canary")))] == 1
    rejected = {dict(k[1])["reason"]: v for k, v in exported.items() if k[0] == "observer_feedback_rejected"}
    assert rejected == {"invalid": 2, "unknown_response": 1, "duplicate": 4, "late": 1, "off_scale": 1, "flood": 0,
                        "store_error": 0, "not_feedback": 0}
    # Comments are never exported.
    assert not any("jane" in str(k) or "wrong again" in str(k) for k in exported)


async def test_a_flood_from_one_conversation_is_bounded_and_the_rest_kept(store: SqliteStore) -> None:
    metrics = SamplingMetrics()
    spec = FeedbackSpec(max_events_per_unit=5)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app(store, metrics, spec)),
                                 base_url="http://t") as c:
        await _seed(c)
        flood = [{"id": f"f{i}", "response_id": "chatcmpl-1", "kind": "thumbs", "value": 0} for i in range(40)]
        other = [{"id": "s1", "response_id": "chatcmpl-2", "kind": "thumbs", "value": 1}]
        r = await c.post("/api/v1/feedback", json={"events": flood[:3] + other})
        assert r.json()["accepted"] == 4
        r = await c.post("/api/v1/feedback", json={"events": flood[3:]})
        assert r.json()["accepted"] == 2 and r.json()["rejected"] == {"flood": 35}
    assert len(store.feedback("canary", since=NOW - 3600, until=NOW + 1, limit=1000)) == 5
    assert len(store.feedback("stable", since=NOW - 3600, until=NOW + 1, limit=1000)) == 1
    assert metrics.feedback_rejected["flood"] == 35


async def test_a_retried_batch_at_the_flood_bound_is_duplicate_never_flood(store: SqliteStore) -> None:
    # A client whose response was lost retries the whole batch: its events were stored (and fill their
    # conversation's window), so the answer must say duplicate, not flood: a flood reply would tell the client
    # that events it already delivered were thrown away.
    metrics = SamplingMetrics()
    spec = FeedbackSpec(max_events_per_unit=3)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app(store, metrics, spec)),
                                 base_url="http://t") as c:
        await _seed(c)
        batch = [{"id": f"r{i}", "response_id": "chatcmpl-1", "kind": "thumbs", "value": 0} for i in range(3)]
        first = (await c.post("/api/v1/feedback", json={"events": batch})).json()
        assert first["accepted"] == 3
        again = (await c.post("/api/v1/feedback", json={"events": batch})).json()
        assert again["accepted"] == 0 and again["rejected"] == {"duplicate": 3}, again
        # A copy of an id within one batch takes no slot either: the conversation's other event still fits.
        fresh = [{"id": "s1", "response_id": "chatcmpl-2", "kind": "thumbs", "value": 1}]
        twice = (await c.post("/api/v1/feedback", json={"events": fresh * 2 + [
            {"id": f"s{i}", "response_id": "chatcmpl-2", "kind": "thumbs", "value": 0} for i in (2, 3)]})).json()
        assert [e["status"] for e in twice["events"]] == ["stored", "duplicate", "stored", "stored"], twice
    assert len(store.feedback("canary", since=NOW - 3600, until=NOW + 1, limit=1000)) == 3
    assert len(store.feedback("stable", since=NOW - 3600, until=NOW + 1, limit=1000)) == 3
    assert metrics.feedback_rejected["duplicate"] == 4 and metrics.feedback_rejected["flood"] == 0


async def test_a_body_that_is_not_a_batch_is_a_400_and_a_huge_one_a_413(store: SqliteStore) -> None:
    spec = FeedbackSpec(max_batch_events=2)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app(store, SamplingMetrics(), spec)),
                                 base_url="http://t") as c:
        assert (await c.post("/api/v1/feedback", content=b"{nope")).status_code == 400
        assert (await c.post("/api/v1/feedback", json={"events": []})).status_code == 400
        assert (await c.post("/api/v1/feedback", json=[{"id": "x"}])).status_code == 400
        r = await c.post("/api/v1/feedback", json={"events": [{"id": str(i)} for i in range(3)]})
        assert r.status_code == 413 and "max_batch_events" in r.text


def test_the_rating_scale_must_hold_its_negative_cut() -> None:
    with pytest.raises(ValueError, match="negative_at_most"):
        FeedbackSpec(rating_scale=(1, 5), negative_at_most=5)
    with pytest.raises(ValueError, match="lowest < highest"):
        FeedbackSpec(rating_scale=(5, 1))
