"""The sampling pipeline: reservoir → bounded queue → writer; failures dropped and counted, never raised."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from observer import conventions as names
from observer.sample.capture import Capture
from observer.sample.metrics import SamplingCollector, SamplingMetrics
from observer.sample.pipeline import SamplePipeline, StoreSink
from observer.sample.redact import Redactor
from observer.store.base import SampleRecord
from observer.store.sqlite import SqliteStore
from tests.support.poll import async_wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class ListSink:
    def __init__(self, fail: bool = False) -> None:
        self.records: list[SampleRecord] = []
        self.fail = fail

    def write(self, records: Sequence[SampleRecord]) -> None:
        if self.fail:
            raise OSError("disk full")
        self.records.extend(records)


def capture(i: int, *, version: str = "stable", response: bytes | None = None) -> Capture:
    body = response if response is not None else json.dumps(
        {"model": "m", "choices": [{"index": 0, "text": f"out {i} mail x{i}@example.com", "finish_reason": "stop"}]}
    ).encode()
    return Capture(version=version, kind="completion", request=json.dumps({"prompt": f"p{i}"}).encode(),
                   response=body, content_type="application/json", ts=100.0 + i, ttft_s=None, latency_s=0.1)


def pipeline(sink: object, clock: Clock, **kw: object) -> SamplePipeline:
    args: dict[str, object] = dict(metrics=SamplingMetrics(), redactor=Redactor.build(), fraction=lambda v: 1.0,
                                   capacity=1000, window_seconds=1.0, seed=0, queue_size=1000, batch_size=50,
                                   clock=clock)
    args.update(kw)
    return SamplePipeline(sink=sink, **args)  # type: ignore[arg-type]


async def test_samples_flow_to_the_sink_redacted_after_their_window() -> None:
    clock, sink = Clock(), ListSink()
    p = pipeline(sink, clock)
    await p.start()
    for i in range(5):
        assert p.want("stable")
        p.submit(capture(i))
    await asyncio.sleep(0.05)
    assert sink.records == []  # the window is still open
    clock.now += 1.0
    await async_wait_until(lambda: len(sink.records) == 5)
    assert {r.output for r in sink.records} == {f"out {i} mail <EMAIL>" for i in range(5)}
    m = p.metrics
    assert (m.seen[("stable", "proxy")], m.sampled[("stable", "proxy")], m.stored["stable"]) == (5, 5, 5)
    assert m.redactions["email"] == 5
    await p.stop()


async def test_an_idle_writer_sleeps_without_ticking_and_wakes_for_the_next_window() -> None:
    """No capture held: the writer waits on no timer (an idle proxy costs no CPU); the first capture of a new
    window makes it tick again, so that window is still written when it closes."""
    clock, sink = Clock(), ListSink()
    p = pipeline(sink, clock, window_seconds=0.2)  # tick 0.05 s while a window is open
    await p.start()
    p.submit(capture(0))
    clock.now += 0.2
    await async_wait_until(lambda: len(sink.records) == 1)
    await asyncio.sleep(0.15)  # the writer flushed the closed window and now holds nothing
    assert not p.reservoir.has_open()
    ticks = 0
    original = p.reservoir.flush

    def counting(**kw: bool) -> dict[str, list[Capture]]:
        nonlocal ticks
        ticks += 1
        return original(**kw)

    p.reservoir.flush = counting  # type: ignore[method-assign]
    await asyncio.sleep(0.3)  # six ticks' time idle
    assert ticks == 0
    p.submit(capture(1))
    clock.now += 0.2
    await async_wait_until(lambda: len(sink.records) == 2)
    assert ticks >= 1
    await p.stop()


async def test_full_queue_drops_and_counts() -> None:
    clock, sink = Clock(), ListSink()
    p = pipeline(sink, clock, queue_size=3)  # writer not started: nothing drains the queue
    for i in range(10):
        p.submit(capture(i))
    clock.now += 1.0
    p.submit(capture(99))  # closes the first window → 10 captures meet a queue of 3
    assert p.queue_depth() == 3
    assert p.metrics.dropped[("stable", "queue_full")] == 7
    await p.stop(drain_seconds=0)
    # the open window met the still-full queue; the queued ones were never written
    assert p.metrics.dropped[("stable", "queue_full")] == 8
    assert p.metrics.dropped[("stable", "shutdown")] == 3
    assert sink.records == []


async def test_a_failing_sink_drops_batches_and_the_writer_survives() -> None:
    clock, sink = Clock(), ListSink(fail=True)
    p = pipeline(sink, clock)
    await p.start()
    for i in range(4):
        p.submit(capture(i))
    clock.now += 1.0
    await async_wait_until(lambda: p.metrics.dropped[("stable", "store_error")] == 4)
    sink.fail = False
    p.submit(capture(10))
    clock.now += 1.0
    await async_wait_until(lambda: len(sink.records) == 1)
    await p.stop()


async def test_unparseable_captures_are_counted_not_stored() -> None:
    clock, sink = Clock(), ListSink()
    p = pipeline(sink, clock)
    await p.start()
    p.submit(capture(0, response=b"<html>oops</html>"))
    p.submit(capture(1))
    await p.stop()  # stop flushes the open window and drains
    assert len(sink.records) == 1
    assert p.metrics.dropped[("stable", "unparseable")] == 1
    assert p.metrics.stored["stable"] == 1


async def test_window_cap_counts_displaced_candidates() -> None:
    clock, sink = Clock(), ListSink()
    p = pipeline(sink, clock, capacity=3)
    for i in range(10):
        p.submit(capture(i))
    assert p.metrics.dropped[("stable", "window_full")] == 7
    assert p.metrics.sampled[("stable", "proxy")] == 10


async def test_store_sink_writes_durably(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "p.db")
    p = pipeline(StoreSink(store), Clock())
    await p.start()
    p.submit(capture(1))
    await p.stop()
    [sample] = store.samples("stable")
    assert sample.prompt == "p1" and sample.source == "proxy"
    store.close()


def test_exposition_is_valid_and_bounded(tmp_path: Path) -> None:
    m = SamplingMetrics()
    m.seen[("stable", "proxy")] += 3
    m.drop("stable", "queue_full")
    m.observe_request("stable", code=200, added_s=0.0003, ttft_s=0.05, e2e_s=0.4)
    m.observe_request("stable", code=502, added_s=0.002, ttft_s=None, e2e_s=None)
    registry = CollectorRegistry()
    registry.register(SamplingCollector(m, queue_depth=lambda: 7, store_bytes=lambda: 4096,
                                        store_rows=lambda: {"stable": 2}, redaction_kinds=("email",)))
    text = generate_latest(registry).decode()
    (tmp_path / "m.prom").write_text(text)
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams[names.SAMPLE_QUEUE_DEPTH].samples[0].value == 7
    codes = {s.labels[names.CODE]: s.value for s in fams[names.PROXY_REQUESTS].samples if s.name.endswith("_total")}
    assert codes == {"200": 1.0, "502": 1.0, "429": 0.0, "500": 0.0, "503": 0.0, "504": 0.0}  # watched codes from 0
    added = [s for s in fams[names.PROXY_ADDED_LATENCY].samples if s.name.endswith("_count")]
    assert added[0].value == 2
    assert [s.value for s in fams[names.REDACTIONS].samples] == [0.0]  # declared kinds start at zero
    with pytest.raises(AssertionError):
        m.drop("stable", "free text reason")
