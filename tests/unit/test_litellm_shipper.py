"""The LiteLLM callback's shipper without LiteLLM: a bounded queue that never blocks, one version per POST,
retries under one Idempotency-Key, and drop counts that reach the observer exactly once."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from observer.integrations import litellm as cb
from observer.sample.metrics import CLIENT_DROP_REASONS, SamplingMetrics
from tests.support.poll import wait_until


class FakeIngest:
    """Answers POSTs from a script of statuses (0: connection refused); records what it was sent."""

    def __init__(self, statuses: list[int], *, default: int = 200, delay: float = 0.0) -> None:
        self.statuses = statuses
        self.default = default
        self.delay = delay
        self.posts: list[tuple[bytes, dict[str, str]]] = []
        self.lock = threading.Lock()

    def __call__(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
        time.sleep(self.delay)
        with self.lock:
            status = self.statuses.pop(0) if self.statuses else self.default
            if status == 0:
                raise ConnectionRefusedError("refused")
            self.posts.append((body, dict(headers)))
        return status, b"{}"


def sample(version: str = "stable", i: int = 0) -> dict[str, object]:
    return {"version": version, "prompt": f"p{i}", "output": "o", "source": "ingest"}


def test_a_full_queue_drops_without_waiting_and_counts() -> None:
    ingest = FakeIngest([], delay=0.5)
    shipper = cb.Shipper("http://observer", queue_size=3, batch_size=1, flush_seconds=0.01, post=ingest)
    t0 = time.perf_counter()
    accepted = [shipper.offer(sample(i=i)) for i in range(50)]
    assert time.perf_counter() - t0 < 0.05  # never waits on the observer
    assert accepted.count(False) >= 40 and shipper.dropped["queue_full"] == accepted.count(False)
    shipper.close(timeout=5)


def test_one_version_per_post_and_an_unknown_version_loses_only_its_own() -> None:
    ingest = FakeIngest([200, 422], default=200)
    shipper = cb.Shipper("http://observer", batch_size=10, flush_seconds=0.2, post=ingest)
    for i in range(4):
        shipper.offer(sample("stable", i))
        shipper.offer(sample("typo", i))
    wait_until(lambda: shipper.sent == 4 and shipper.dropped["unknown_version"] == 4, timeout=5)
    assert all(body.count(b'"version": "stable"') in (0, 4) for body, _ in ingest.posts)
    shipper.close()


def test_retries_keep_one_idempotency_key_and_drops_are_reported_once() -> None:
    ingest = FakeIngest([0, 0, 503, 200, 200])
    shipper = cb.Shipper("http://observer", batch_size=5, flush_seconds=0.1, retry_seconds=10, post=ingest)
    shipper.drop("queue_full", 7)  # e.g. a burst before
    for i in range(5):
        shipper.offer(sample(i=i))
    wait_until(lambda: shipper.sent == 5, timeout=10)
    first, second = ingest.posts[0][1], ingest.posts[1][1]  # the 503 and the 200 of the same batch
    assert first["idempotency-key"] == second["idempotency-key"]
    assert first["x-observer-dropped"] == "queue_full=7"  # the 503 was an answer: the report arrived
    assert "x-observer-dropped" not in second  # ... and is not repeated
    metrics = SamplingMetrics()
    metrics.client_report(first["x-observer-client"], first["x-observer-dropped"])
    assert metrics.client_dropped == {("litellm", "queue_full"): 7}
    shipper.close()


def test_an_observer_down_past_the_retry_time_drops_and_says_why() -> None:
    ingest = FakeIngest([0] * 1000)
    shipper = cb.Shipper("http://observer", batch_size=5, flush_seconds=0.05, retry_seconds=0.5, post=ingest)
    for i in range(3):
        shipper.offer(sample(i=i))
    wait_until(lambda: shipper.dropped["observer_down"] == 3, timeout=5)
    assert shipper.unreported["observer_down"] == 3  # kept for the next POST that reaches the observer
    shipper.close(timeout=1)


def test_client_reports_are_bounded() -> None:
    metrics = SamplingMetrics()
    metrics.client_report("litellm", "queue_full=3, bogus=2,rejected=x,observer_down=99999999999,=1")
    metrics.client_report("someone-else", "rejected=1")
    assert metrics.client_dropped == {("litellm", "queue_full"): 3, ("litellm", "other"): 2,
                                      ("other", "rejected"): 1}
    assert set(cb.DROP_REASONS) <= set(CLIENT_DROP_REASONS)  # the callback's file stands alone: kept in step


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_sample_of_a_litellm_call() -> None:
    kwargs = {"model": "llama", "messages": [{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                                         {"type": "image_url"}]}],
              "optional_params": {"temperature": 0.2, "max_tokens": 16, "user": "u1"},
              "litellm_params": {"metadata": {"model_group": "llama", "headers": {"Traceparent": TRACEPARENT},
                                              "model_info": {"observer_version": "canary"}}},
              "standard_logging_object": {"startTime": 100.0, "endTime": 100.5, "completionStartTime": 100.1,
                                          "stream": True, "model_group": "llama"}}
    response = {"model": "sim-canary", "choices": [{"message": {"content": "Hello"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 2}}
    got = cb.sample_of(kwargs, response)
    assert got is not None
    assert got["version"] == "canary" and got["output"] == "Hello" and got["finish_reason"] == "stop"
    assert got["messages"] == [{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": "Hi\n[image_url]"}]
    assert got["sampling"] == {"temperature": 0.2, "max_tokens": 16}
    assert (got["ts"], got["latency_s"], round(got["ttft_s"], 6)) == (100.0, 0.5, 0.1)
    assert (got["prompt_tokens"], got["output_tokens"]) == (9, 2)
    assert got["traceparent"] == TRACEPARENT
    assert "response_id" not in got and "tenant" not in got
    teamed = {**kwargs, "standard_logging_object": {**kwargs["standard_logging_object"],  # type: ignore[dict-item]
                                                    "metadata": {"user_api_key_team_alias": "search-team"}}}
    with_id = cb.sample_of(teamed, {**response, "id": "chatcmpl-42"})
    assert with_id is not None and (with_id["response_id"], with_id["tenant"]) == ("chatcmpl-42", "search-team")
    no_info = {**kwargs, "litellm_params": {}}
    assert cb.sample_of(no_info, response)["version"] == "llama"  # type: ignore[index]
    assert "traceparent" not in cb.sample_of(no_info, response)  # type: ignore[operator]
    raw = {**kwargs, "litellm_params": {"proxy_server_request": {"headers": {"traceparent": TRACEPARENT}}}}
    assert cb.sample_of(raw, response)["traceparent"] == TRACEPARENT  # type: ignore[index]
    garbage = {**kwargs, "litellm_params": {"metadata": {"headers": {"traceparent": "00-" + "0" * 32 + "-x-01"}}}}
    assert "traceparent" not in cb.sample_of(garbage, response)  # type: ignore[operator]  # ingest would refuse
    assert cb.sample_of(kwargs, {"choices": []}) is None  # an embedding, an image: not a sample
