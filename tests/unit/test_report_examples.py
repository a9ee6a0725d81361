"""The report's worst answers from a real SQLite store: each names the trace of the request it came from, linked
through report.trace_url; a malformed or missing trace context shows nothing rather than a broken link."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from observer.config import parse_config
from observer.errors import ConfigError
from observer.export.report import pages
from observer.export.report.examples import StoreExamples
from observer.store.base import SampleRecord
from observer.store.pairs import PairRecord
from observer.store.sqlite import SqliteStore
from tests.support import report_app as ra

TP_LIVE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TP_PAIR = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
VIEWER = "https://jaeger.example/trace/{trace_id}"


def store(tmp_path: Path) -> SqliteStore:
    s = SqliteStore(tmp_path / "s.db", clock=lambda: ra.NOW)
    live, plain, prime = s.add([
        SampleRecord(version="m0-canary", prompt="Return JSON", output="{not json", ts=ra.NOW - 30,
                     traceparent=TP_LIVE, source="proxy"),
        SampleRecord(version="m0-canary", prompt="Say hi", output="", ts=ra.NOW - 20, source="ingest"),
        SampleRecord(version="m0-stable", prompt="Name a prime.", output="Seven.", ts=ra.NOW - 10,
                     traceparent=TP_PAIR, source="proxy")])
    s.attach_score(live, scorer="rule:invalid_json", passed=False, score=0.0, reason="not JSON", meta={})
    s.attach_score(plain, scorer="rule:empty", passed=False, score=0.0, reason="empty output", meta={})
    s.add_pair(PairRecord(canary="m0-canary", baseline="m0-stable", sample_id=prime, ts=ra.NOW - 5, body={
        "prompt": "Name a prime.", "canary": {"output": "Nine."}, "baseline": {"output": "Seven."},
        "rules": {"refusal": "tie"}, "judge": {"outcome": "loss"}, "traceparent": TP_PAIR}))
    return s


def test_each_worst_answer_links_to_its_requests_trace(tmp_path: Path) -> None:
    s = store(tmp_path)
    got = StoreExamples(s, trace_url=VIEWER).worst("m0-canary", since=0, limit=5)
    assert [(e.kind, e.trace_id, e.trace_url) for e in got] == [
        ("lost pair", TP_PAIR.split("-")[1], f"https://jaeger.example/trace/{TP_PAIR.split('-')[1]}"),
        ("live failure", "", ""),  # an ingest client that sent no trace context
        ("live failure", TP_LIVE.split("-")[1], f"https://jaeger.example/trace/{TP_LIVE.split('-')[1]}")]
    bare = StoreExamples(s).worst("m0-canary", since=0, limit=5)  # no viewer: the id as text
    assert [(e.trace_id, e.trace_url) for e in bare][2] == (TP_LIVE.split("-")[1], "")
    s.close()


def test_a_malformed_trace_context_in_a_pair_links_nowhere(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "s.db", clock=lambda: ra.NOW)
    (sid,) = s.add([SampleRecord(version="m0-stable", prompt="p", output="o", ts=ra.NOW - 10)])
    s.add_pair(PairRecord(canary="m0-canary", baseline="m0-stable", sample_id=sid, ts=ra.NOW - 5, body={
        "prompt": "p", "judge": {"outcome": "loss"}, "traceparent": 'javascript:alert(1)"'}))
    [e] = StoreExamples(s, trace_url=VIEWER).worst("m0-canary", since=0, limit=5)
    assert (e.trace_id, e.trace_url) == ("", "")
    s.close()


def test_the_pair_page_shows_the_trace_link(tmp_path: Path) -> None:
    s = store(tmp_path)
    source = StoreExamples(s, trace_url=VIEWER)

    async def worst(canary: str, *, since: float, limit: int) -> list[object]:
        return source.worst(canary, since=since, limit=limit)  # type: ignore[return-value]

    config = parse_config(ra.config_text(1), environ={})
    _, service, _ = ra.build()
    app = FastAPI()
    app.include_router(pages.router(config, service, token=ra.TOKEN, anonymous=False, examples=worst,  # type: ignore[arg-type]
                                    group_of=lambda n: None, clock=lambda: ra.NOW + 42))
    html = TestClient(app).get("/report/canary/m0-canary?baseline=m0-stable",
                               headers={"Authorization": f"Bearer {ra.TOKEN}"}).text
    trace = TP_LIVE.split("-")[1]
    assert f'<a class="trace" href="https://jaeger.example/trace/{trace}" rel="noreferrer">{trace[:16]}…</a>' in html
    s.close()


def test_a_trace_url_without_the_id_placeholder_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"has no \{trace_id\}"):
        parse_config("canary: {report: {trace_url: 'https://jaeger.example/search'}}", environ={})
    with pytest.raises(ConfigError, match="must be an http"):
        parse_config("canary: {report: {trace_url: 'javascript:{trace_id}'}}", environ={})
