"""A LiteLLM proxy callback that mirrors its traffic to the observer's ingest (`POST /api/v1/samples`).

One self-contained file (the standard library and LiteLLM only), so it drops into a LiteLLM image: copy it
next to LiteLLM's `config.yaml` as `observer_callback.py` and name it there (deploy/litellm/):

    litellm_settings:
      callbacks: observer_callback.handler

It reads its settings from the environment:

    OBSERVER_INGEST_URL        the observer's base URL (required), e.g. http://observer.observability.svc:9464
    OBSERVER_AUTH_TOKEN        the observer's bearer token (server.auth_token)
    OBSERVER_FRACTION          share of successful requests sent (default 1.0: the observer samples again)
    OBSERVER_QUEUE_SIZE        most samples waiting to be sent (default 10000); beyond it they are dropped
    OBSERVER_BATCH_SIZE        most samples per POST (default 100)
    OBSERVER_RETRY_SECONDS     how long a batch is retried while the observer is down or slow (default 30)

The version of a sample: the deployment's `model_info.observer_version` when set (a canary and its stable
in one model group, told apart by LiteLLM's deployment), else the model group (the `model_name` callers use).

It never slows or fails a request: LiteLLM's success hook only puts the sample on a bounded queue
(`put_nowait`; a full queue drops and counts it); a daemon thread sends batches, one version per POST with
an `Idempotency-Key`, so a retry after a lost answer is not stored twice. Counts of what was dropped travel
with the next POST that reaches the observer (the `X-Observer-Dropped` header) and become
`observer_ingest_client_dropped_total{client="litellm",reason}`; a warning line at most once a minute says
the same in LiteLLM's log. Redaction happens at the observer, before anything is stored, as for every
ingest client.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("observer.litellm")

DROP_REASONS = ("queue_full", "unknown_version", "rejected", "observer_down", "unreadable")
"""Why the callback dropped a sample: the queue was full; the observer does not know its version (422);
the observer refused it (400/413); the observer stayed down or slow past OBSERVER_RETRY_SECONDS; the
request or reply could not be read as a chat or text completion."""

Post = Callable[[str, bytes, Mapping[str, str], float], tuple[int, bytes]]


def _post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()


class Shipper:
    """The bounded queue and the sending thread, apart from LiteLLM (tested on its own)."""

    def __init__(self, ingest_url: str, *, token: str | None = None, queue_size: int = 10_000,
                 batch_size: int = 100, retry_seconds: float = 30.0, timeout: float = 5.0,
                 flush_seconds: float = 1.0, post: Post = _post) -> None:
        self.url = ingest_url.rstrip("/") + "/api/v1/samples"
        self.token = token
        self.batch_size = batch_size
        self.retry_seconds = retry_seconds
        self.timeout = timeout
        self.flush_seconds = flush_seconds
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=queue_size)
        self.dropped: Counter[str] = Counter()
        self.unreported: Counter[str] = Counter()  # dropped, not yet told to the observer
        self.sent = 0
        self._post = post
        self._lock = threading.Lock()
        self._next_warning = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="observer-shipper", daemon=True)
        self._thread.start()

    def offer(self, sample: dict[str, Any]) -> bool:
        """Queue a sample without waiting; False (and counted) when the queue is full."""
        try:
            self.queue.put_nowait(sample)
        except queue.Full:
            self.drop("queue_full")
            return False
        return True

    def drop(self, reason: str, n: int = 1) -> None:
        with self._lock:
            self.dropped[reason] += n
            self.unreported[reason] += n
        now = time.monotonic()
        if now >= self._next_warning:  # a dead observer must not flood LiteLLM's log
            self._next_warning = now + 60.0
            log.warning("observer callback: dropped %s so far (%s); the observer counts them in "
                        "observer_ingest_client_dropped_total", sum(self.dropped.values()), dict(self.dropped))

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (up to `timeout`), then stop."""
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not (self._stop.is_set() and self.queue.empty()):
            batch = self._take()
            by_version: dict[str, list[dict[str, Any]]] = {}
            for sample in batch:
                by_version.setdefault(sample["version"], []).append(sample)
            for samples in by_version.values():
                self._send(samples)

    def _take(self) -> list[dict[str, Any]]:
        batch: list[dict[str, Any]] = []
        deadline = time.monotonic() + self.flush_seconds
        while len(batch) < self.batch_size:
            wait = deadline - time.monotonic()
            if wait <= 0 or (self._stop.is_set() and self.queue.empty()):
                break
            try:
                batch.append(self.queue.get(timeout=wait))
            except queue.Empty:
                break
        return batch

    def _send(self, samples: list[dict[str, Any]]) -> None:
        body = json.dumps({"samples": samples}, ensure_ascii=False).encode()
        headers = {"content-type": "application/json", "idempotency-key": hashlib.sha256(body).hexdigest(),
                   "x-observer-client": "litellm"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        give_up = time.monotonic() + self.retry_seconds
        pause = 0.25
        while True:
            with self._lock:
                report = dict(self.unreported)
            if report:
                headers["x-observer-dropped"] = ",".join(f"{k}={v}" for k, v in sorted(report.items()))
            else:
                headers.pop("x-observer-dropped", None)
            try:
                status, _ = self._post(self.url, body, headers, self.timeout)
            except (OSError, ValueError):
                status = 0
            if status:  # the observer read the header: its counts are reported
                with self._lock:
                    self.unreported.subtract(report)
                    self.unreported = +self.unreported
            if 200 <= status < 300:
                self.sent += len(samples)
                return
            if status == 422:
                self.drop("unknown_version", len(samples))
                return
            if status in (400, 401, 403, 413):
                self.drop("rejected", len(samples))
                return
            if time.monotonic() + pause > give_up or (self._stop.is_set() and status == 0):
                self.drop("observer_down", len(samples))
                return
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # typed parts: the text ones, a marker for the rest
        return "\n".join(p.get("text", "") if isinstance(p, dict) and p.get("type") == "text"
                         else f"[{p.get('type')}]" if isinstance(p, dict) else "" for p in content)
    return ""


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def sample_of(kwargs: Mapping[str, Any], response: Any) -> dict[str, Any] | None:
    """The ingest sample of one successful LiteLLM call, or None when it is not a chat or text completion."""
    slo = kwargs.get("standard_logging_object") or {}
    params = kwargs.get("litellm_params") or {}
    metadata = params.get("metadata") or {}
    model_info = params.get("model_info") or metadata.get("model_info") or {}
    version = model_info.get("observer_version") if isinstance(model_info, Mapping) else None
    version = version or slo.get("model_group") or metadata.get("model_group") or kwargs.get("model")
    if not isinstance(version, str) or not version:
        return None
    choices = _get(response, "choices")
    if not choices:
        return None
    choice = choices[0]
    message = _get(choice, "message")
    output = _get(message, "content") if message is not None else _get(choice, "text")
    usage = _get(response, "usage")
    sample: dict[str, Any] = {"version": version[:63], "output": output if isinstance(output, str) else "",
                              "source": "ingest", "model": _get(response, "model") or kwargs.get("model")}
    messages = kwargs.get("messages")
    if isinstance(messages, list) and messages:
        sample["messages"] = [{"role": str(m.get("role", "user")), "content": _text(m.get("content"))}
                              for m in messages if isinstance(m, Mapping)]
    elif isinstance(kwargs.get("prompt"), str):
        sample["prompt"] = kwargs["prompt"]
    else:
        return None
    finish = _get(choice, "finish_reason")
    if isinstance(finish, str):
        sample["finish_reason"] = finish[:32]
    for key, field in (("prompt_tokens", "prompt_tokens"), ("completion_tokens", "output_tokens")):
        value = _get(usage, key) if usage is not None else None
        if isinstance(value, int) and value >= 0:
            sample[field] = value
    start, end = slo.get("startTime"), slo.get("endTime")
    first = slo.get("completionStartTime")
    if isinstance(start, (int, float)) and start > 0:
        sample["ts"] = float(start)
        if isinstance(end, (int, float)) and end >= start:
            sample["latency_s"] = float(end) - float(start)
        if slo.get("stream") and isinstance(first, (int, float)) and first >= start:
            sample["ttft_s"] = float(first) - float(start)
    sampling = {k: v for k, v in (kwargs.get("optional_params") or {}).items()
                if k in ("temperature", "top_p", "max_tokens", "seed", "stop", "frequency_penalty",
                         "presence_penalty") and isinstance(v, (int, float, str, list))}
    if sampling:
        sample["sampling"] = sampling
    traceparent = _traceparent(params, metadata)
    if traceparent is not None:
        sample["traceparent"] = traceparent
    # LiteLLM's session (`litellm_session_id` in the request): the observer keeps it only as a keyed hash.
    session = next((s for s in (params.get("litellm_session_id"), metadata.get("litellm_session_id"),
                                metadata.get("session_id")) if isinstance(s, str) and s.strip()), None)
    if session is not None:
        sample["conversation"] = session[:4096]
    # The answer's id, which users' feedback names (POST /api/v1/feedback); the key's team as the tenant:
    # LiteLLM authenticated the key, so it is a trusted source (the observer bounds the label).
    response_id = _get(response, "id")
    if isinstance(response_id, str) and 0 < len(response_id) <= 200:
        sample["response_id"] = response_id
    slo_meta = slo.get("metadata")
    slo_meta = slo_meta if isinstance(slo_meta, Mapping) else {}
    team = next((t for t in (slo_meta.get("user_api_key_team_alias"), slo_meta.get("user_api_key_team_id"),
                             metadata.get("user_api_key_team_alias"), metadata.get("user_api_key_team_id"))
                 if isinstance(t, str) and t.strip()), None)
    if team is not None:
        sample["tenant"] = team[:256]
    return sample


_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")


def _traceparent(params: Mapping[str, Any], metadata: Mapping[str, Any]) -> str | None:
    """The caller's W3C traceparent, which LiteLLM's proxy keeps among the request's headers (the metadata's
    logging-safe copy, or the raw request); None when absent or malformed (the observer would refuse it)."""
    request = params.get("proxy_server_request") or {}
    for headers in (metadata.get("headers"), request.get("headers") if isinstance(request, Mapping) else None):
        if isinstance(headers, Mapping):
            value = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == "traceparent"), None)
            if isinstance(value, str) and _TRACEPARENT.fullmatch(value.strip()):
                return value.strip()
    return None


try:  # the LiteLLM base class when loaded by LiteLLM; a plain base elsewhere (tests, type checks)
    from litellm.integrations.custom_logger import CustomLogger as _Base  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - exercised inside LiteLLM
    _Base = object


class ObserverCallback(_Base):  # type: ignore[misc]
    """LiteLLM's custom logger: successful calls go to the shipper; failures are LiteLLM's to log."""

    def __init__(self, shipper: Shipper | None, *, fraction: float = 1.0) -> None:
        super().__init__()
        self.shipper = shipper  # None: not configured, every hook returns at once
        self.fraction = fraction

    def _offer(self, kwargs: Mapping[str, Any], response: Any) -> None:
        if self.shipper is None or (self.fraction < 1.0 and random.random() >= self.fraction):
            return
        try:
            sample = sample_of(kwargs, response)
        except Exception:  # whatever LiteLLM hands us, the request it logs is already answered
            sample = None
        if sample is None:
            self.shipper.drop("unreadable")
            return
        self.shipper.offer(sample)

    async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
                                      ) -> None:
        self._offer(kwargs, response_obj)

    def log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        self._offer(kwargs, response_obj)


def from_env(env: Mapping[str, str] = os.environ) -> ObserverCallback:
    """The callback configured by OBSERVER_* variables. Without an ingest URL it does nothing but say so
    once: a missing setting of the observer's must not stop the gateway users depend on."""
    url = env.get("OBSERVER_INGEST_URL")
    if not url:
        log.error("observer callback: OBSERVER_INGEST_URL is not set; nothing is sent to the observer")
        return ObserverCallback(None)
    shipper = Shipper(url, token=env.get("OBSERVER_AUTH_TOKEN") or None,
                      queue_size=int(env.get("OBSERVER_QUEUE_SIZE", "10000")),
                      batch_size=int(env.get("OBSERVER_BATCH_SIZE", "100")),
                      retry_seconds=float(env.get("OBSERVER_RETRY_SECONDS", "30")))
    return ObserverCallback(shipper, fraction=float(env.get("OBSERVER_FRACTION", "1.0")))


def __getattr__(name: str) -> Any:
    """`handler`, what LiteLLM's config names (`callbacks: observer_callback.handler`): made from the
    environment the first time LiteLLM asks for it, so importing this module starts no thread."""
    if name == "handler":
        made = globals()["handler"] = from_env()
        return made
    raise AttributeError(name)
