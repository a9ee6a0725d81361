"""From sampled exchange to durable sample, off the request path: reservoir → bounded queue → writer → sink.

The proxy calls `want` (the fraction gate) and `submit` (a finished capture); both are O(1) and never
block or raise. The writer task parses, redacts and writes batches in a worker thread. Anything that
fails there is dropped and counted by reason; the proxied request never notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

import httpx

from observer.sample.capture import Capture, CaptureError, to_record
from observer.sample.conversation import Keyer
from observer.sample.metrics import SamplingMetrics
from observer.sample.redact import Redactor
from observer.sample.reservoir import WindowReservoir
from observer.store.base import SampleRecord, SampleStore

log = logging.getLogger("observer.sample")


Rejected = Sequence[tuple[int, str]]
"""(index in the batch, drop reason) of the records a sink refused one by one; the others are stored."""


class Sink(Protocol):
    """Where finished samples go. `write` is synchronous (called in a worker thread); it raises when the sink
    is down (the whole batch is lost, counted) and returns the records it refused alone (None: none)."""

    def write(self, records: Sequence[SampleRecord]) -> Rejected | None: ...


class _Refused(Exception):
    """The ingest refused a request for its data (400/413/422): a smaller part may go through."""

    def __init__(self, message: str, *, reason: str) -> None:
        self.reason = reason
        super().__init__(message)


class StoreSink:
    """Writes to a local SampleStore."""

    def __init__(self, store: SampleStore) -> None:
        self.store = store

    def write(self, records: Sequence[SampleRecord]) -> Rejected | None:
        self.store.add(records)
        return None


_OVERHEAD = len(b'{"samples":[]}')


def _retry_after(value: str | None, *, default: float) -> float:
    """Seconds from a Retry-After header given in seconds (an HTTP date, or nonsense: `default`)."""
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default


class RemoteSink:
    """Posts batches to an observer's `POST /api/v1/samples` (the sidecar proxy's sink).

    Batches are split so each request body stays under `max_request_bytes` (the central observer's
    `server.max_request_bytes`, 4 MiB by default); one sample larger than that alone is rejected alone.

    An outage answer (502/503/504, 429, a timeout or a dropped connection) is retried up to `retries` times
    with the same `Idempotency-Key` (the body's SHA-256), waiting the answer's `Retry-After` or an
    exponential back-off (both capped at `max_backoff_seconds`): a retry after an answer lost in transit is
    stored once. Meanwhile the pipeline's bounded queue holds new samples (and counts what it drops)."""

    RETRIED = frozenset({429, 502, 503, 504})

    def __init__(self, base_url: str, *, token: str | None, timeout_seconds: float = 10.0,
                 max_request_bytes: int = 4 * 1024 * 1024, retries: int = 3, backoff_seconds: float = 0.5,
                 max_backoff_seconds: float = 5.0, sleep: Callable[[float], None] = time.sleep,
                 transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_seconds,
                                    transport=transport)
        self.max_request_bytes = max_request_bytes
        self.url = base_url.rstrip("/") + "/api/v1/samples"
        self.retries = retries
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self._sleep = sleep
        self.retried = 0  # outage answers retried (for tests and logs)

    def write(self, records: Sequence[SampleRecord]) -> Rejected | None:
        # json, not observer.jsonsafe: a sample must arrive as it was taken, never with a value coerced.
        # A conversation key is already keyed here: it travels as `conversation_key`, never hashed again.
        encoded = [json.dumps({("conversation_key" if k == "conversation" else k): v
                               for k, v in dataclasses.asdict(r).items() if v is not None},
                              ensure_ascii=False, allow_nan=False).encode("utf-8") for r in records]
        rejected: list[tuple[int, str]] = []
        chunk: list[int] = []
        size = _OVERHEAD
        for i, item in enumerate(encoded):
            if _OVERHEAD + len(item) > self.max_request_bytes:
                log.warning("sample of %s rejected: %d bytes exceed the ingest limit of %d bytes",
                            records[i].version, len(item), self.max_request_bytes)
                rejected.append((i, "too_large"))
                continue
            if chunk and size + len(item) + 1 > self.max_request_bytes:
                self._deliver(chunk, encoded, records, rejected)
                chunk, size = [], _OVERHEAD
            chunk.append(i)
            size += len(item) + 1
        if chunk:
            self._deliver(chunk, encoded, records, rejected)
        return rejected

    def _deliver(self, chunk: list[int], encoded: list[bytes], records: Sequence[SampleRecord],
                 rejected: list[tuple[int, str]]) -> None:
        """Post `chunk`; when the ingest refuses it for its data, halve it until the refused samples are
        alone, so one bad sample never takes its neighbours with it (each part is posted once)."""
        try:
            self._post([encoded[i] for i in chunk])
        except _Refused as e:
            if len(chunk) == 1:
                log.warning("sample of %s rejected: %s", records[chunk[0]].version, e)
                rejected.append((chunk[0], e.reason))
                return
            mid = len(chunk) // 2
            self._deliver(chunk[:mid], encoded, records, rejected)
            self._deliver(chunk[mid:], encoded, records, rejected)

    def _post(self, items: list[bytes]) -> None:
        body = b'{"samples":[' + b",".join(items) + b"]}"
        headers = {"Content-Type": "application/json", "Idempotency-Key": hashlib.sha256(body).hexdigest()}
        for attempt in range(self.retries + 1):
            wait = self.backoff_seconds * 2 ** attempt
            try:
                resp = self._client.post("/api/v1/samples", content=body, headers=headers)
            except httpx.TransportError as e:  # the answer may have been lost after a commit: same key
                if attempt == self.retries:
                    raise RuntimeError(f"ingest {self.url} unreachable for {len(items)} sample(s) after "
                                       f"{attempt + 1} attempts: {type(e).__name__}: {e}") from e
            else:
                if resp.status_code not in self.RETRIED or attempt == self.retries:
                    break
                wait = _retry_after(resp.headers.get("retry-after"), default=wait)
            self.retried += 1
            log.info("ingest %s: retrying %d sample(s) in %.1fs (attempt %d of %d)", self.url, len(items),
                     min(wait, self.max_backoff_seconds), attempt + 2, self.retries + 1)
            self._sleep(min(wait, self.max_backoff_seconds))
        if resp.status_code != 200:
            detail = " ".join(resp.text.split())[:200]
            message = f"ingest {self.url} answered HTTP {resp.status_code} for {len(items)} sample(s): {detail}"
            if resp.status_code in (400, 413, 422):  # about the data: a smaller part may go through
                raise _Refused(message, reason="too_large" if resp.status_code == 413 else "rejected")
            raise RuntimeError(message)  # an outage (401/403/5xx): the whole batch fails at once

    def close(self) -> None:
        self._client.close()


def redact_records(redactor: Redactor | None, records: Sequence[SampleRecord]
                   ) -> tuple[list[SampleRecord], Counter[str]]:
    """Redact every free-text field of each record (prompt, output, and the client-supplied `model` and
    `tenant_tier`, which an e-mail or card number can reach too); returns the new records and the matches
    per kind."""
    counts: Counter[str] = Counter()
    if redactor is None:
        return list(records), counts
    out = []
    for r in records:
        fields: dict[str, str | None] = {}
        for name in ("prompt", "output", "model", "tenant_tier"):
            value = getattr(r, name)
            if value is None:
                fields[name] = None
                continue
            red = redactor.redact(value)
            counts.update(red.counts)
            fields[name] = red.text
        out.append(dataclasses.replace(r, **fields))  # type: ignore[arg-type]
    return out, counts


def _storable(record: SampleRecord) -> bool:
    """Whether every text of `record` is valid UTF-8 (a lone surrogate such as \\ud83d is not)."""
    for text in (record.prompt, record.output, record.model, record.finish_reason, record.tenant_tier):
        if text is None:
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return False
    return True


class SamplePipeline:
    """The per-process sampling pipeline shared by every proxy of the process."""

    def __init__(self, *, sink: Sink, metrics: SamplingMetrics, redactor: Redactor | None,
                 fraction: Callable[[str], float], capacity: int, window_seconds: float, seed: int = 0,
                 queue_size: int = 10_000, batch_size: int = 200,
                 clock: Callable[[], float] = time.time, keyer: Keyer | None = None,
                 openai_user: bool = False) -> None:
        self.sink = sink
        self.keyer = keyer  # conversation keys: kept as keyed hashes, or not at all
        self.openai_user = openai_user
        self.metrics = metrics
        self.redactor = redactor
        self._fraction = fraction
        self._clock = clock
        self.reservoir: WindowReservoir[Capture] = WindowReservoir(
            capacity=capacity, window_seconds=window_seconds, seed=seed, clock=clock)
        self.queue: asyncio.Queue[Capture | None] = asyncio.Queue(maxsize=queue_size)
        self.batch_size = batch_size
        self._task: asyncio.Task[None] | None = None
        self._tick = min(1.0, window_seconds / 4)
        self._closing = False
        self._wake = asyncio.Event()

    # --- request path: O(1), never raises.
    def want(self, version: str) -> bool:
        """Count a request of `version` and decide whether to capture its reply."""
        self.metrics.seen[(version, "proxy")] += 1
        return self.reservoir.gate(self._fraction(version))

    def submit(self, capture: Capture) -> None:
        """Hand over a finished capture (after `want` said yes)."""
        version = capture.version
        self.metrics.sampled[(version, "proxy")] += 1
        idle = not self.reservoir.has_open()
        offer, closed = self.reservoir.offer(version, capture)
        if not offer.kept or offer.evicted:
            self.metrics.drop(version, "window_full")
        if closed:
            self._enqueue(closed)
        elif idle:
            self._wake.set()  # the writer slept without a tick: it must now tick to close this window

    def discard(self, version: str, reason: str) -> None:
        """A capture that `want` selected could not be completed."""
        self.metrics.sampled[(version, "proxy")] += 1
        self.metrics.drop(version, reason)

    def _enqueue(self, captures: Sequence[Capture]) -> None:
        for c in captures:
            try:
                self.queue.put_nowait(c)
            except asyncio.QueueFull:
                self.metrics.drop(c.version, "queue_full")
        self._wake.set()

    # --- writer side.
    async def start(self) -> None:
        """Start the writer task."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="observer-sample-writer")

    async def stop(self, *, drain_seconds: float = 5.0) -> None:
        """Flush open windows, write what is queued (within `drain_seconds`), stop the writer."""
        for captures in self.reservoir.flush(force=True).values():
            self._enqueue(captures)
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            self._wake.set()  # wake a writer waiting on an empty queue
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=drain_seconds)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item is not None:
                self.metrics.drop(item.version, "shutdown")
        self._closing = False

    async def _run(self) -> None:
        while True:
            for captures in self.reservoir.flush().values():
                self._enqueue(captures)
            batch = await self._take()
            if batch:
                await self._write(batch)
            elif self._closing and self.queue.empty():
                return

    async def _take(self) -> list[Capture]:
        # Never `wait_for(queue.get())`: on Python 3.11 a timeout racing a put can lose the item.
        if self.queue.empty():
            self._wake.clear()
            if not self.reservoir.has_open() and not self._closing:
                # Nothing held: sleep until a capture arrives (no wake-up a second on an idle proxy).
                await self._wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=self._tick)
        batch: list[Capture] = []
        while len(batch) < self.batch_size and not self.queue.empty():
            item = self.queue.get_nowait()
            if item is not None:
                batch.append(item)
        return batch

    async def _write(self, batch: list[Capture]) -> None:
        try:
            stored, dropped, counts = await asyncio.to_thread(self._convert_and_write, batch)
        except Exception as e:  # a bug in conversion: drop the batch, keep the writer alive
            for c in batch:
                self.metrics.drop(c.version, "store_error")
            log.warning("could not store %d sample(s): %s: %s", len(batch), type(e).__name__, e)
            log.debug("store failure detail", exc_info=True)
            return
        self.metrics.redactions.update(counts)
        for version, reason in dropped:
            self.metrics.drop(version, reason)
        for version in stored:
            self.metrics.stored[version] += 1

    def _convert_and_write(self, batch: list[Capture]
                           ) -> tuple[list[str], list[tuple[str, str]], Counter[str]]:
        records: list[SampleRecord] = []
        dropped: list[tuple[str, str]] = []
        for c in batch:
            try:
                record = to_record(c, key=None if self.keyer is None else self.keyer.key,
                                   openai_user=self.openai_user)
            except CaptureError:
                dropped.append((c.version, "unparseable"))
                continue
            if not _storable(record):
                dropped.append((c.version, "invalid_text"))
                continue
            records.append(record)
        records, counts = redact_records(self.redactor, records)
        if not records:
            return [], dropped, counts
        try:
            refused = dict(self.sink.write(records) or ())
        except Exception as e:  # the sink is down or broken: this batch is lost, counted, the writer lives
            log.warning("could not store %d sample(s): %s: %s", len(records), type(e).__name__, e)
            log.debug("store failure detail", exc_info=True)
            return [], dropped + [(r.version, "store_error") for r in records], counts
        dropped += [(records[i].version, reason) for i, reason in sorted(refused.items())]
        return [r.version for i, r in enumerate(records) if i not in refused], dropped, counts

    def queue_depth(self) -> int:
        """Samples waiting for the writer."""
        return self.queue.qsize()
