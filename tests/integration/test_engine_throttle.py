"""The throttle that reproduces a slower CPU for the real tier (observer_dev/throttle.py), on stand-in servers:
a real process tree shaped like vLLM's (an HTTP server answering /health, with a busy child whose process
title names it `EngineCore`). CPU time is what the throttle bounds, so the checks read it, not wall-clock speed."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import psutil
import pytest

from observer_dev.gameday.pace import (
    LOAD_SHARE,
    MIN_REQUESTS,
    ROUND_FIXED_S,
    ROUND_PER_REQUEST_S,
    EngineSpeed,
    Pace,
    TooSlow,
    pace_for,
)
from observer_dev.promserver import free_port
from observer_dev.throttle import EngineThrottle, engine_cores, held
from observer_dev.vllmproc import DTYPE_ENV, generator_dtype
from tests.support.poll import wait_until

SERVER = r"""
import subprocess, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
busy = subprocess.Popen(["EngineCore", "-c", "while True: pass"], executable=sys.executable)
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
try:
    HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
finally:
    busy.kill()
"""


@dataclass
class StandIn:
    """Quacks like observer_dev.vllmproc.RunningVllm where the throttle looks: proc and url."""

    proc: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def server() -> Iterator[StandIn]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], start_new_session=True)
    s = StandIn(proc, port)
    try:
        wait_until(lambda: _healthy(s) and bool(engine_cores(s)), timeout=20,  # type: ignore[arg-type]
                   message="the stand-in server and its EngineCore")
        yield s
    finally:
        for p in psutil.Process(proc.pid).children(recursive=True):
            p.kill()
        proc.kill()
        proc.wait(timeout=10)


def _healthy(s: StandIn) -> bool:
    try:
        return httpx.get(s.url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _cpu_share(p: psutil.Process, seconds: float) -> float:
    t = p.cpu_times()
    c0, w0 = t.user + t.system, time.monotonic()
    time.sleep(seconds)
    t = p.cpu_times()
    return (t.user + t.system - c0) / (time.monotonic() - w0)


def test_the_throttle_bounds_the_engine_and_never_the_api_server(server: StandIn) -> None:
    core = engine_cores(server)[0]  # type: ignore[arg-type]
    with EngineThrottle(4.0) as throttle:
        throttle.watch(server)  # type: ignore[arg-type]
        wait_until(lambda: core.status() == psutil.STATUS_STOPPED, timeout=10, message="the engine paused")
        share = _cpu_share(core, 2.0)
        assert share <= 0.25 + 0.08, share  # runs 25 ms of each 100 ms, whatever else the machine does
        assert share > 0.0
        assert _healthy(server)  # the API server answers at once
    # On exit the engine runs again, and keeps running.
    assert core.status() != psutil.STATUS_STOPPED
    time.sleep(0.3)
    assert core.status() != psutil.STATUS_STOPPED


def test_a_held_engine_stays_stopped_under_the_throttle(server: StandIn) -> None:
    import signal

    core = engine_cores(server)[0]  # type: ignore[arg-type]
    with EngineThrottle(2.0) as throttle:
        throttle.watch(server)  # type: ignore[arg-type]
        with held([core.pid]):
            core.send_signal(signal.SIGSTOP)
            assert _cpu_share(core, 1.0) < 0.01  # the throttle's SIGCONT never reaches it
            core.send_signal(signal.SIGCONT)
        wait_until(lambda: core.status() == psutil.STATUS_STOPPED, timeout=10, message="throttled again")


def test_a_restarted_server_is_throttled_only_once_healthy() -> None:
    class Stopped:
        proc = None
        url = "http://127.0.0.1:9"

    with EngineThrottle(4.0) as throttle:
        throttle.watch(Stopped())  # type: ignore[arg-type]  # no process: nothing to signal, no error
        time.sleep(0.3)
    with pytest.raises(ValueError, match="above 1"):
        EngineThrottle(1.0)


def _speed(stretch: float, decode: float = 13.6) -> EngineSpeed:
    return EngineSpeed(probe_s=4.4 * stretch, decode_tokens_s=decode / stretch, embed_batch_s=0.1 * stretch)


def test_the_pace_keeps_the_reference_sizes_on_the_reference_engine() -> None:
    assert pace_for(_speed(1.0)) == Pace()
    assert pace_for(_speed(1.4)) == Pace()  # a busy moment is not a slower machine
    assert pace_for(_speed(0.5)).stretch == 1.0  # a faster one keeps the reference too


def test_a_slower_engine_gets_fewer_requests_and_longer_rounds_with_the_same_share_of_load() -> None:
    ref = Pace()
    for stretch in (2.0, 4.0, 6.0):
        pace = pace_for(_speed(stretch), budget_s=float("inf"))
        assert MIN_REQUESTS <= pace.requests < ref.requests
        assert pace.round_seconds > ref.round_seconds
        # The load's share of a round stays the reference's (within the round's rounding up to a second): the
        # rounds neither overrun nor idle.
        share = stretch * (ROUND_FIXED_S + ROUND_PER_REQUEST_S * pace.requests) / pace.round_seconds
        assert 0.9 * LOAD_SHARE <= share <= LOAD_SHARE, (stretch, pace)
        assert pace.request_timeout_s == pytest.approx(ref.request_timeout_s * stretch)
        assert pace.golden_interval_s == pace.round_seconds


def test_an_engine_too_slow_for_the_budget_is_refused_with_its_figures() -> None:
    with pytest.raises(TooSlow) as e:
        pace_for(_speed(40.0))
    text = str(e.value)
    assert "176.0 s (reference 4.4 s)" in text and "40.0x the reference" in text and "budget of 30 min" in text
    assert "TIER_BUDGET_S" in text


def test_a_slow_probe_names_every_burst_and_how_much_the_servers_slow_each_other() -> None:
    speed = EngineSpeed(probe_s=33.0, decode_tokens_s=10.5, embed_batch_s=0.19, probes=(35.4, 33.0, 34.1),
                        alone_s=4.1)
    text = speed.describe()
    assert "probe burst 33.0 s (fastest of 35.4, 33.0, 34.1 s)" in text
    assert "one generator alone 4.1 s (8.0x slower with both on its core)" in text
    assert speed.stretch == pytest.approx(33.0 / 4.4)
    # One burst, fast: the message stays as short as it was.
    assert "fastest" not in _speed(1.0).describe() and "one generator alone" not in _speed(1.0).describe()


def test_the_generators_run_bfloat16_only_where_the_cpu_has_avx512(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    assert generator_dtype("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw\n") == "bfloat16"
    assert generator_dtype("processor\t: 0\nflags\t\t: fpu sse avx2 fma\n") == "float32"  # oneDNN's bf16 needs 512
    assert generator_dtype("") == "float32"
    monkeypatch.setenv(DTYPE_ENV, "bfloat16")
    assert generator_dtype("flags\t\t: avx2\n") == "bfloat16"
