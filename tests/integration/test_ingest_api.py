"""Mirror ingest `POST /api/v1/samples` on a real observer Service (sampling area only) on loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from observer import conventions as names
from observer.config import parse_config
from tests.support.observer_proc import ObserverProcess, run_observer

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def config_text(store: Path, *, max_request_bytes: int = 64 * 1024) -> str:
    return f"""
fleet:
  versions:
    - {{name: stable, openai: "http://127.0.0.1:9/v1"}}
    - {{name: canary, openai: "http://127.0.0.1:9/v1"}}
server: {{auth_token: {TOKEN}, max_request_bytes: {max_request_bytes}}}
sampling:
  max_batch_samples: 50
  store: {{path: "{store}"}}
"""


@pytest.fixture
def observer(tmp_path: Path) -> Iterator[ObserverProcess]:
    config = parse_config(config_text(tmp_path / "samples.db"), environ={})
    with run_observer(config, areas=["sample"]) as proc:
        yield proc


def post(proc: ObserverProcess, body: Any, *, headers: dict[str, str] | None = None,
         raw: bytes | None = None) -> httpx.Response:
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(proc.url + "/api/v1/samples", content=content, timeout=10,
                      headers={"content-type": "application/json", **(AUTH if headers is None else headers)})


def sample(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"version": "stable", "prompt": "What is 2+2?", "output": "4", "finish_reason": "stop",
                            "prompt_tokens": 6, "output_tokens": 1, "latency_s": 0.4, "ttft_s": 0.1,
                            "ts": 1_700_000_000.0, "tenant_tier": "gold", "model": "m"}
    base.update(kw)
    return base


def test_auth_guards_ingest_and_admin_but_not_metrics_or_health(observer: ObserverProcess) -> None:
    assert post(observer, {"samples": [sample()]}, headers={}).status_code == 401
    assert post(observer, {"samples": [sample()]}, headers={"Authorization": "Bearer nope"}).status_code == 403
    assert post(observer, {"samples": [sample()]}, headers={"Authorization": "Basic " + TOKEN}).status_code == 403
    assert httpx.get(observer.url + "/api/v1/samples?version=stable").status_code == 401
    assert observer.get("/metrics").status_code == 200
    assert observer.get("/healthz").status_code == 200


def test_accepted_batch_is_committed_redacted_and_readable(observer: ObserverProcess) -> None:
    resp = post(observer, {"samples": [
        sample(),
        sample(version="canary", prompt=None, messages=[{"role": "system", "content": "be short"},
                                                        {"role": "user", "content": "mail me: a@b.example"}],
               output="sure, call +44 20 7946 0958", ts=None, source="proxy",
               traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    ]})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["accepted"] == 2 and len(body["ids"]) == 2
    got = httpx.get(observer.url + "/api/v1/samples", params={"version": "canary"}, headers=AUTH).json()
    [row] = got["samples"]
    assert row["prompt"] == "system: be short\nuser: mail me: <EMAIL>"
    assert row["output"] == "sure, call <PHONE>" and row["source"] == "proxy"
    assert row["traceparent"] == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert abs(row["ts"] - time.time()) < 60  # defaulted to arrival time
    [stable] = httpx.get(observer.url + "/api/v1/samples", params={"version": "stable"}, headers=AUTH).json()[
        "samples"]
    assert {k: stable[k] for k in ("prompt", "output", "tenant_tier", "prompt_tokens", "ts")} == \
        {"prompt": "What is 2+2?", "output": "4", "tenant_tier": "gold", "prompt_tokens": 6, "ts": 1_700_000_000.0}
    fams = {f.name: f for f in text_string_to_metric_families(observer.get("/metrics").text)}
    stored = {s.labels[names.VERSION]: s.value for s in fams[names.SAMPLES_STORED].samples
              if s.name.endswith("_total")}
    assert stored == {"stable": 1.0, "canary": 1.0}
    seen = {(s.labels[names.VERSION], s.labels[names.SOURCE]): s.value for s in fams[names.SAMPLES_SEEN].samples
            if s.name.endswith("_total")}
    assert seen == {("stable", "ingest"): 1.0, ("canary", "proxy"): 1.0}
    kinds = {s.labels[names.REDACTION_KIND]: s.value for s in fams[names.REDACTIONS].samples
             if s.name.endswith("_total")}
    assert kinds["email"] == 1.0 and kinds["phone"] == 1.0 and kinds["card"] == 0.0


@pytest.mark.parametrize(("body", "field", "message"), [
    ({"samples": [sample(output=None)]}, "samples.0.output", "valid string"),
    ({"samples": [sample(), sample(prompt_tokens=-1)]}, "samples.1.prompt_tokens", "greater than or equal"),
    ({"samples": [sample(messages=[{"role": "user", "content": "x"}])]}, "samples.0", "exactly one of prompt"),
    ({"samples": [sample(colour="red")]}, "samples.0.colour", "Extra inputs"),
    ({"samples": [sample(prompt=None, messages=[{"content": "x"}])]}, "samples.0.messages", "string role"),
    ({"samples": []}, "samples", "at least 1"),
    ({"items": []}, "samples", "Field required"),
    ([1, 2], "body", "valid dictionary"),
    ({"samples": [sample(traceparent="00-00000000000000000000000000000000-00f067aa0ba902b7-01")]},
     "samples.0.traceparent", "not a W3C traceparent"),
    ({"samples": [sample(traceparent="4bf92f3577b34da6a3ce929d0e0e4736")]}, "samples.0.traceparent",
     "not a W3C traceparent"),
], ids=["missing-output", "negative-tokens", "prompt-and-messages", "unknown-field", "bad-messages",
        "empty-batch", "no-samples", "not-an-object", "zero-trace-id", "bare-trace-id"])
def test_malformed_batches_are_400_naming_the_field(observer: ObserverProcess, body: Any, field: str,
                                                    message: str) -> None:
    resp = post(observer, body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["field"] == field
    assert message in resp.json()["detail"]
    assert httpx.get(observer.url + "/api/v1/samples", params={"version": "stable"}, headers=AUTH
                     ).json()["samples"] == []  # nothing of a rejected batch is stored


@pytest.mark.parametrize("raw", [b"{not json", b'{"samples": [{"version": "stable", "ts": NaN}]}', b"\xff\xfe"],
                         ids=["syntax", "nan", "bytes"])
def test_invalid_json_is_400(observer: ObserverProcess, raw: bytes) -> None:
    resp = post(observer, None, raw=raw)
    assert resp.status_code == 400 and resp.json()["field"] == "body"


def test_unknown_version_is_422(observer: ObserverProcess) -> None:
    resp = post(observer, {"samples": [sample(), sample(version="blue")]})
    assert resp.status_code == 422
    assert resp.json()["field"] == "samples.1.version" and "'blue'" in resp.json()["detail"]
    assert httpx.get(observer.url + "/api/v1/samples", params={"version": "nope"}, headers=AUTH).status_code == 422


def test_oversize_is_413_with_and_without_content_length(observer: ObserverProcess) -> None:
    big = {"samples": [sample(output="x" * 70_000)]}
    assert post(observer, big).status_code == 413

    def chunks() -> Iterator[bytes]:
        data = json.dumps(big).encode()
        for i in range(0, len(data), 8192):
            yield data[i:i + 8192]

    resp = httpx.post(observer.url + "/api/v1/samples", content=chunks(), headers=AUTH, timeout=10)
    assert resp.status_code == 413 and resp.json()["field"] == "body"
    many = {"samples": [sample() for _ in range(51)]}
    resp = post(observer, many)
    assert resp.status_code == 413 and resp.json()["field"] == "samples"


def test_store_failure_is_503_and_counted(observer: ObserverProcess) -> None:
    component = next(c for c in observer.service.components if c.name == "sample")
    component.store.close()
    resp = post(observer, {"samples": [sample()]})
    assert resp.status_code == 503 and "closed" in resp.json()["detail"]
    text = observer.get("/metrics").text
    assert 'observer_samples_dropped_total{reason="store_error",version="stable"} 1.0' in text


def test_observed_template_change_reaches_metrics_and_bad_hashes_are_400(tmp_path: Path) -> None:
    """Issue 18 item 1 through the service: mirrored messages carry their system prompt's hash; the
    fingerprint job sees the canary's template change (same version name) at its next run."""
    from observer.conventions import fingerprint as fp

    text = config_text(tmp_path / "samples.db") + """  fingerprint: {interval_seconds: 0.2, window_seconds: 600,
                 reference_seconds: 3600, min_samples: 5}
"""
    config = parse_config(text, environ={})
    now = time.time()

    def batch(system: str, ts: float, n: int) -> list[dict[str, Any]]:
        return [sample(version="canary", prompt=None, ts=ts + i, sampling={"temperature": 0.2, "max_tokens": i},
                       messages=[{"role": "system", "content": system}, {"role": "user", "content": f"q{i}"}])
                for i in range(n)]

    with run_observer(config, areas=["sample"]) as proc:
        bad = post(proc, {"samples": [sample(template_hash="You are a pirate")]})
        assert bad.status_code == 400 and bad.json()["field"] == "samples.0.template_hash"
        assert post(proc, {"samples": batch("old template", now - 2000, 10) + batch("new template", now - 60, 10)
                           }).status_code == 200
        [row] = httpx.get(proc.url + "/api/v1/samples", params={"version": "canary", "limit": 1},
                          headers=AUTH).json()["samples"]
        assert row["template_hash"] == fp.template_hash(["new template"])
        assert row["sampling_hash"] == fp.sampling_hash({"temperature": 0.2})
        want = (names.FINGERPRINT_CHANGED, {"version": "canary", "part": "template"})
        deadline = time.monotonic() + 15
        value = None
        while time.monotonic() < deadline and value != 1.0:
            time.sleep(0.2)
            for fam in text_string_to_metric_families(proc.get("/metrics").text):
                for s in fam.samples:
                    if (s.name, s.labels) == want:
                        value = s.value
        assert value == 1.0
