"""From sampled exchange to durable sample, off the request path: reservoir → bounded queue → writer → sink.

The proxy calls `want` (the fraction gate) and `submit` (a finished capture); both are O(1) and never
block or raise. The writer task parses, redacts and writes batches in a worker thread. Anything that
fails there is dropped and counted by reason; the proxied request never notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

import httpx

from observer.sample.capture import Capture, CaptureError, to_record
from observer.sample.metrics import SamplingMetrics
from observer.sample.redact import Redactor
from observer.sample.reservoir import WindowReservoir
from observer.store.base import SampleRecord, SampleStore

log = logging.getLogger("observer.sample")


class Sink(Protocol):
    """Where finished samples go; `write` is synchronous (called in a worker thread) and raises on failure."""

    def write(self, records: Sequence[SampleRecord]) -> None: ...


class StoreSink:
    """Writes to a local SampleStore."""

    def __init__(self, store: SampleStore) -> None:
        self.store = store

    def write(self, records: Sequence[SampleRecord]) -> None:
        self.store.add(records)


class RemoteSink:
    """Posts batches to an observer's `POST /api/v1/samples` (the sidecar proxy's sink)."""

    def __init__(self, base_url: str, *, token: str | None, timeout_seconds: float = 10.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_seconds)

    def write(self, records: Sequence[SampleRecord]) -> None:
        body = {"samples": [
            {k: v for k, v in dataclasses.asdict(r).items() if v is not None} for r in records]}
        resp = self._client.post("/api/v1/samples", json=body)
        if resp.status_code != 200:
            raise RuntimeError(f"ingest answered {resp.status_code}")

    def close(self) -> None:
        self._client.close()


def redact_records(redactor: Redactor | None, records: Sequence[SampleRecord]
                   ) -> tuple[list[SampleRecord], Counter[str]]:
    """Redact prompt and output of each record; returns the new records and the matches per kind."""
    counts: Counter[str] = Counter()
    if redactor is None:
        return list(records), counts
    out = []
    for r in records:
        prompt, output = redactor.redact(r.prompt), redactor.redact(r.output)
        counts.update(prompt.counts)
        counts.update(output.counts)
        out.append(dataclasses.replace(r, prompt=prompt.text, output=output.text))
    return out, counts


class SamplePipeline:
    """The per-process sampling pipeline shared by every proxy of the process."""

    def __init__(self, *, sink: Sink, metrics: SamplingMetrics, redactor: Redactor | None,
                 fraction: Callable[[str], float], capacity: int, window_seconds: float, seed: int = 0,
                 queue_size: int = 10_000, batch_size: int = 200,
                 clock: Callable[[], float] = time.time) -> None:
        self.sink = sink
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
        offer, closed = self.reservoir.offer(version, capture)
        if not offer.kept or offer.evicted:
            self.metrics.drop(version, "window_full")
        if closed:
            self._enqueue(closed)

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
            stored, failed, counts = await asyncio.to_thread(self._convert_and_write, batch)
        except Exception as e:  # the sink failed: drop the batch, keep the writer alive
            for c in batch:
                self.metrics.drop(c.version, "store_error")
            log.warning("could not store %d sample(s): %s", len(batch), type(e).__name__)
            log.debug("store failure detail", exc_info=True)
            return
        self.metrics.redactions.update(counts)
        for version in failed:
            self.metrics.drop(version, "unparseable")
        for version in stored:
            self.metrics.stored[version] += 1

    def _convert_and_write(self, batch: list[Capture]) -> tuple[list[str], list[str], Counter[str]]:
        records: list[SampleRecord] = []
        failed: list[str] = []
        for c in batch:
            try:
                records.append(to_record(c))
            except CaptureError:
                failed.append(c.version)
        records, counts = redact_records(self.redactor, records)
        if records:
            self.sink.write(records)
        return [r.version for r in records], failed, counts

    def queue_depth(self) -> int:
        """Samples waiting for the writer."""
        return self.queue.qsize()
