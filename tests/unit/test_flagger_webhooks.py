"""Flagger's webhooks (observer/export/flagger_api.py) with Flagger's documented payload, on a stand-in verdict
provider: each hook answers the one status code that is safe for each verdict, and never a 2xx that lets a
promotion through on anything but `pass`. The live path (a running observer's verdicts) is in
tests/integration/test_canary_cli.py."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from observer.analyse.canary.results import Outcome, Verdict
from observer.export.flagger_api import router

# Flagger's webhook payload, as its docs show it (docs/gitbook/usage/webhooks.md).
PAYLOAD = {"name": "llm", "namespace": "llm-serving", "phase": "Progressing", "checksum": "85d557f47b",
           "metadata": {"canary": "llm", "baseline": "llm-primary"}}


class Provider:
    def __init__(self, outcome: Outcome, reason: str = "", unknown: tuple[str, ...] = ()) -> None:
        self.outcome, self.reason, self.unknown = outcome, reason or f"{outcome} because", unknown
        self.asked: list[tuple[str | None, str | None, str | None]] = []
        self.since: list[float | None] = []
        self.steps: list[float | None] = []

    async def verdict_for(self, canary: str | None, baseline: str | None, *, since: float | None,
                          weight: str | None, step_seconds: float | None = None) -> Verdict:
        self.asked.append((canary, baseline, weight))
        self.steps.append(step_seconds)
        self.since.append(since)
        return Verdict(canary=canary or "", baseline=baseline or "", verdict=self.outcome, score=0.0,
                       critical_failed=False, n_canary=0, n_baseline=0, split_ok=True, canary_share=None,
                       expected_share=None, metrics=(), reason=self.reason, evaluated_at=0.0,
                       unknown=self.unknown)


def client(provider: Provider) -> TestClient:
    app = FastAPI()
    app.include_router(router(provider, report_url=lambda c, b: f"http://observer/report/canary/{c}?baseline={b}"))
    return TestClient(app)


EXPECTED = {  # verdict → (confirm-promotion, rollback, rollout)
    Outcome.PASS: (200, 409, 200),
    Outcome.FAIL: (403, 200, 412),
    Outcome.INCONCLUSIVE: (403, 409, 200),
    Outcome.NODATA: (403, 409, 200),
    Outcome.IDLE: (403, 409, 200),
}


@pytest.mark.parametrize("outcome", list(EXPECTED))
def test_each_hook_maps_the_verdict_to_the_safe_status_and_says_why(outcome: Outcome) -> None:
    provider = Provider(outcome, reason="critical metric failed: ttft")
    c = client(provider)
    got = tuple(c.post(f"/api/v1/flagger/{hook}", json=PAYLOAD).status_code
                for hook in ("confirm-promotion", "rollback", "rollout"))
    assert got == EXPECTED[outcome]
    body = c.post("/api/v1/flagger/confirm-promotion", json=PAYLOAD).json()
    assert body["verdict"] == str(outcome) and body["reason"] == "critical metric failed: ttft"
    assert body["report"] == "http://observer/report/canary/llm?baseline=llm-primary"
    assert body["decision"] == ("promote" if outcome is Outcome.PASS else "hold")
    assert provider.asked[0] == ("llm", "llm-primary", "any")


def test_the_pair_defaults_to_flaggers_names_and_takes_the_weight_from_metadata() -> None:
    provider = Provider(Outcome.PASS)
    c = client(provider)
    c.post("/api/v1/flagger/rollout", json={**PAYLOAD, "metadata": {}})
    c.post("/api/v1/flagger/rollout", json={**PAYLOAD, "metadata": {"weight": "20", "canary": "llm:canary",
                                                                       "baseline": "llm:stable"}})
    assert provider.asked == [("llm", "llm-primary", "any"), ("llm:canary", "llm:stable", "20")]


@pytest.mark.parametrize("raw,why", [
    (b"not json", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"namespace": "llm-serving"}', "`name`"),
    (b'{"name": "llm", "namespace": "Bad_NS"}', "`namespace`"),
    (b'{"name": "llm", "namespace": "ns", "metadata": {"canary": 3}}', "`metadata`"),
    (b'{"name": "llm", "namespace": "ns", "metadata": {"canary": "a b"}}', "metadata.canary"),
])
def test_a_malformed_payload_is_a_400_with_the_reason_and_never_promotes(raw: bytes, why: str) -> None:
    provider = Provider(Outcome.PASS)
    c = client(provider)
    for hook in ("confirm-promotion", "rollback", "rollout"):
        r = c.post(f"/api/v1/flagger/{hook}", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and why in r.json()["reason"], (hook, r.text)
    assert provider.asked == []  # nothing was judged on a payload that names nothing


def test_an_unknown_pair_is_a_404_that_says_how_to_name_it() -> None:
    c = client(Provider(Outcome.NODATA, reason="unknown version(s): llm-primary", unknown=("llm-primary",)))
    for hook in ("confirm-promotion", "rollback", "rollout"):
        r = c.post(f"/api/v1/flagger/{hook}", json={**PAYLOAD, "metadata": {}})
        body: dict[str, Any] = r.json()
        assert r.status_code == 404 and "metadata.canary" in body["reason"] and "llm-primary" in body["reason"]
        assert "report" not in body


def test_the_404_is_decided_by_the_verdicts_unknown_names_never_by_its_reason_text() -> None:
    # A source's note may say anything (a store's error naming versions): only the names the fleet does not
    # know make the pair unknown.
    c = client(Provider(Outcome.NODATA, reason="unknown version(s) in the store's answer: retrying"))
    r = c.post("/api/v1/flagger/confirm-promotion", json={**PAYLOAD, "metadata": {}})
    assert r.status_code == 403 and r.json()["decision"] == "hold"


def test_a_new_revision_restarts_the_window_and_a_repeated_one_keeps_it() -> None:
    # Flagger names every revision `<name>` against `<name>-primary`: the window starts when the observer first
    # hears of the payload's checksum, so a revision is never judged on the requests of the one before.
    from observer.export.flagger_api import Revisions

    now = [100.0]
    revisions = Revisions(clock=lambda: now[0], max_canaries=2)
    provider = Provider(Outcome.PASS)
    app = FastAPI()
    app.include_router(router(provider, revisions=revisions))
    c = TestClient(app)
    c.post("/api/v1/flagger/rollout", json=PAYLOAD)
    now[0] = 160.0
    c.post("/api/v1/flagger/confirm-promotion", json=PAYLOAD)
    c.post("/api/v1/flagger/rollout", json={**PAYLOAD, "checksum": "9f0e1d2c3b"})  # the next revision
    c.post("/api/v1/flagger/rollout", json={k: v for k, v in PAYLOAD.items() if k != "checksum"})
    assert provider.since == [100.0, 100.0, 160.0, None]
    for i in range(3):  # bounded: the least recently heard of Canary is forgotten
        revisions.start("ns", f"c{i}", "x")
    assert len(revisions._seen) == 2


def test_a_checksum_that_is_not_a_string_is_a_400() -> None:
    c = client(Provider(Outcome.PASS))
    r = c.post("/api/v1/flagger/confirm-promotion", json={**PAYLOAD, "checksum": 7})
    assert r.status_code == 400 and "checksum" in r.json()["reason"]
