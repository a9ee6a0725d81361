"""Regression tests for issue #21 (hostile input): the items fixed so far, each failing on the old main."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from observer.collect.scraper import redact_url
from observer.config.spec import ObserverConfig
from observer.export import errors
from observer.sample.ingest import ingest_router
from observer.sample.metrics import SamplingMetrics
from observer.store.sqlite import SqliteStore
from observer.wiring.runtime import resolve_auth_token
from tests.support.observer_proc import run_observer


@pytest.mark.parametrize(("url", "shown"), [
    ("https://admin:hunter2@host:8443/metrics?token=abc", "https://***@host:8443/metrics?***"),
    ("http://10.0.0.5:8000/metrics", "http://10.0.0.5:8000/metrics"),
    ("http://user@[::1]:9400/metrics#frag", "http://***@[::1]:9400/metrics"),
    ("http://host/metrics?", "http://host/metrics"),
], ids=["userinfo-and-query", "plain", "ipv6-user-fragment", "empty-query"])
def test_urls_are_redacted_for_display(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_target_credentials_never_reach_metrics_or_the_targets_api() -> None:
    """Item 11: a target URL with credentials appeared verbatim in /metrics labels and /api/v1/targets."""
    secret = "http://admin:hunter2@127.0.0.1:9/metrics?token=t0psecret"
    cfg = ObserverConfig.model_validate({"fleet": {"versions": [{"name": "stable", "vllm": [secret]}]},
                                         "scrape": {"interval_seconds": 3600, "timeout_seconds": 1}})
    with run_observer(cfg, areas=["scrape"]) as proc:
        proc.wait_ready()
        targets = proc.get("/api/v1/targets").text
        metrics = proc.get("/metrics").text
    for text in (targets, metrics):
        assert "127.0.0.1:9/metrics" in text  # the target is still shown
        assert "hunter2" not in text and "t0psecret" not in text and "admin" not in text


def test_a_token_read_with_a_trailing_newline_still_matches() -> None:
    """Item 12 (part): a token from a file or Secret ends in a newline; it used to lock every client out."""
    cfg = ObserverConfig.model_validate({})
    assert resolve_auth_token(cfg, environ={"OBSERVER_AUTH_TOKEN": "s3cret\n"}) == "s3cret"
    assert resolve_auth_token(cfg, environ={"OBSERVER_AUTH_TOKEN": "  \n"}) is None


async def test_deeply_nested_json_is_a_400_not_a_500(tmp_path: Path) -> None:
    """Item 2: JSON nested 3,000 levels deep gave a 500 in the ingest handler."""
    store = SqliteStore(tmp_path / "s.db")
    app = FastAPI()
    errors.install(app)
    app.include_router(ingest_router(store=store, metrics=SamplingMetrics(), redactor=None, versions={"stable"},
                                     guard=lambda: None, max_request_bytes=1 << 20, max_batch_samples=1000,
                                     clock=lambda: 1.0))
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            for depth in (3000, 100_000):
                body = "[" * depth + "]" * depth
                r = await client.post("/api/v1/samples", content=body,
                                      headers={"Content-Type": "application/json"})
                assert r.status_code == 400, (depth, r.status_code, r.text[:200])
                assert "invalid_json" in r.text
    finally:
        store.close()
